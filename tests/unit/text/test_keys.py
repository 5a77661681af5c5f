"""normalize_key and same_key: the key-spelling rule behind fact dedupe (docs/memory.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from navi_memory.text.keys import DROPPED_MODIFIERS, PHRASES, normalize_key, same_key

MUST_MERGE = [
    # "current" is dropped before a setting of several, and any modifier before a name of two
    # words
    ("current_branch", "branch"),
    ("python_current_version", "python_version"),
    ("current_profile_picture", "profile_picture"),
    ("default_profile_picture", "profile_picture"),
    ("default_key_binding", "key_binding"),
    ("primary_key_fingerprint", "key_fingerprint"),
    ("current_port_number", "port_number"),
    ("main_value_proposition", "value_proposition"),
    # an acronym's plural in a camelCase key is the acronym's
    ("user_ids", "userIDs"),
    ("bookmark_urls", "bookmarkURLs"),
    ("ssds", "SSDs"),
    ("server_ip", "server_ips"),
    ("home_server_vms", "home_server_vm"),
    ("my_IDs_list", "MyIDsList"),
    # the spec's and the brief's pairs
    ("language", "preferred_language"),
    ("Editor", "editor"),
    ("home-city", "home_city"),
    ("favourite_colour", "favorite_color"),
    ("os", "operating_system"),
    # separators and case
    ("home city", "home_city"),
    ("home.city", "HOME_CITY"),
    ("home/city", "home_city"),
    ("homeCity", "home_city"),
    ("HomeCity", "home-city"),
    ("preferredLanguage", "language"),
    # a word split at a hump is the word written whole
    ("GitHub_username", "github_username"),
    ("phoneNumber", "phonenumber"),
    ("jobTitle", "jobtitle"),
    ("emailAddress", "emailaddress"),
    ("iOS_version", "ios_version"),
    ("macOS_version", "mac_os_version"),
    ("eBay_account", "ebay_account"),
    # brands whose humps hold a table word, a modifier or an "s"
    ("WhatsApp_number", "whatsapp_number"),
    ("MongoDB_version", "mongodb_version"),
    ("MySQL_version", "mysql_version"),
    ("NodeJS_version", "nodejs_version"),
    ("DevOps_experience", "devops_experience"),
    ("watchOS_version", "watchos_version"),
    ("cpp_version", "C++_version"),
    # "A of B" turns the word before "of" only; phrases are read first
    ("mom_date_of_birth", "mom_dob"),
    ("favorite_type_of_music", "favorite_music_type"),
    ("phone_number_of_mom", "mom_phone_number"),
    ("name_of_wife_of_brother", "brother_wife_name"),
    # possessives, parents, numbers, plurals
    ("Marie's_birthday", "marie_birthday"),
    ("user‘s_name", "username"),
    ("mom_name", "mother_name"),
    ("dad_email", "father_email"),
    ("phone_no", "phone_number"),
    ("headaches", "headache"),
    ("beaches", "beach"),
    ("coaches", "coach"),
    ("hoodies", "hoodie"),
    ("diagnoses", "diagnosis"),
    ("number_of_passports", "passport_count"),
    ("account_no", "account_number"),
    ("grandma_name", "grandmother_name"),
    ("kids", "children"),
    ("contact_lenses", "contact_lens"),
    ("postgresql_version", "postgres_version"),
    ("first_name_of_wife", "wife_first_name"),
    ("preferred_programming_language", "programming_language"),
    ("preferred_pronouns", "pronoun"),
    ("preferred_email", "email"),
    # a common plural before the last word; "A of B" before the head is made singular
    ("kids_names", "kid_name"),
    ("home_address_of_parents", "parents_home_address"),
    ("birthday_of_lucas", "lucas_birthday"),
    ("passport_number_of_wife", "wife_passport_number"),
    # a wish said either way round
    ("preferred_seat", "seat_preference"),
    ("location_preference", "preferred_location"),
    ("K8S_VERSION", "k8s_version"),
    ("mothers_maiden_name", "mother_maiden_name"),
    ("drivers_license", "driver_license"),
    ("preferred_package_manager", "package_manager"),
    ("number_of_users", "user_count"),
    ("Chris'S_phone", "chris_phone"),
    ("MySQLVersion", "mysql_version"),
    ("user_ids", "user_id"),
    ("Favourite Colour", "FAVORITE_COLOR"),
    # plurals
    ("languages", "language"),
    ("hobbies", "hobby"),
    ("addresses", "address"),
    ("favorite_movies", "fav_movie"),
    ("kids", "kid"),
    ("children_names", "child_name"),
    # abbreviations, compounds and "of"
    ("date_of_birth", "dob"),
    ("birthday", "birth_date"),
    ("birthdate", "DOB"),
    ("tz", "time_zone"),
    ("timezone", "time-zone"),
    ("email", "e-mail"),
    ("email_address", "email"),
    ("phone_number", "phone"),
    ("telephone_number", "tel"),
    ("cell_phone", "mobile_number"),
    ("cell", "cell_phone"),
    ("mobile", "mobile_phone"),
    ("work_cell", "work_mobile_phone"),
    ("mob", "mobile_no"),
    ("cell_carrier", "mobile_carrier"),
    ("cell_provider", "mobile_provider"),
    ("cell_of_mom", "mom_cell"),
    ("mobile_phone_of_mom", "mom_mobile_phone"),
    ("mobile_phone_of_mom", "mom_cell"),
    ("mobile_preference", "preferred_mobile"),
    ("default_postgres_port", "postgres_default_port"),
    ("current_branch_name", "branch_name"),
    ("num_children", "number_of_children"),
    ("no_of_children", "child_count"),
    ("num_employees", "employee_count"),
    ("users_count", "user_count"),
    ("number_plates", "number_plate"),
    ("childrens_names", "child_name"),
    ("zip", "postal_code"),
    ("postcode", "zip_code"),
    ("surname", "last_name"),
    ("lastName", "last_name"),
    ("firstname", "first_name"),
    ("given_name", "first_name"),
    ("user_name", "username"),
    ("preferred_name", "nickname"),
    ("preferred_first_name", "nickname"),
    ("preferredGivenName", "preferred_name"),
    ("nick_name", "nickname"),
    ("name_of_pet", "pet_name"),
    ("db_password", "database_password"),
    ("repo_url", "repository_url"),
    ("language_preference", "preferred_language"),
    ("lang_pref", "language"),
    # British spelling
    ("organisation", "organization"),
    ("licence_number", "license_number"),
    ("neighbourhood", "neighborhood"),
    ("favourite_programme", "favorite_program"),
    # modifiers
    ("my_editor", "editor"),
    ("current_city", "city"),
    ("default_shell", "shell"),
    ("main_language", "language"),
    ("primary_email", "email"),
    ("usual_bedtime", "bedtime"),
    ("user_email", "email"),
    ("the_employer", "employer"),
]

MUST_NOT_MERGE = [
    # a setting's default, current, main or primary one is one of several
    ("default_branch", "current_branch"),
    ("main_branch", "current_branch"),
    ("postgres_default_port", "postgres_port"),
    ("default_version", "current_version"),
    ("primary_key", "key"),
    ("default_region", "region"),
    # the brief's pairs
    ("home_city", "work_city"),
    ("first_name", "last_name"),
    ("name", "first_name"),
    ("start_date", "end_date"),
    ("python_version", "node_version"),
    # documented decisions
    ("favorite_color", "color"),
    ("favourite_food", "food"),
    ("preferred_name", "name"),
    ("preferred_first_name", "first_name"),
    ("preferred_given_name", "given_name"),
    ("preferred_full_name", "full_name"),
    ("user_name", "name"),
    ("nickname", "name"),
    ("programming_language", "language"),
    ("previous_job", "job"),
    ("previous_job", "current_job"),
    ("primary_language", "secondary_language"),
    ("full_name", "first_name"),
    # near neighbours
    ("home_address", "work_address"),
    ("email", "phone"),
    ("phone", "mobile_phone"),
    ("phone", "mobile"),
    ("mobile_app", "mobile_phone"),
    ("mobile_os", "mobile"),
    ("mobile_preference", "mobile_phone"),
    ("preferred_mobile", "mobile"),
    ("cell_carrier", "mobile_phone"),
    # default/main/primary anywhere before the setting, or before its name or number
    ("default_postgres_port", "postgres_port"),
    ("default_branch_name", "current_branch_name"),
    ("main_branch_name", "branch_name"),
    ("default_port_number", "port_number"),
    ("default_aws_region", "aws_region"),
    ("primary_ssh_key", "ssh_key"),
    ("default_python_version", "python_version"),
    ("number_plate", "plate_count"),
    ("num_child", "child_count"),  # a singular after "num": no count said
    ("number_plates", "plate_count"),
    # tone marks tell words apart: a key keeps its accents
    ("telefone_avó", "telefone_avô"),
    ("tên_bà", "tên_ba"),
    ("país", "pais"),
    ("thé_favori", "favori"),
    ("पिता", "पता"),  # marks on other letters are parts of their words
    ("birth_date", "birth_place"),
    ("mother_name", "father_name"),
    ("dog_name", "cat_name"),
    ("spouse_name", "name"),
    ("timezone", "time"),
    ("height", "weight"),
    ("wake_time", "sleep_time"),
    ("shoe_size", "shirt_size"),
    ("os", "os_version"),
    ("database", "database_version"),
    ("project", "project_name"),
    ("city", "country"),
    ("min_temperature", "max_temperature"),
    ("employer", "job_title"),
    ("vitamin_a", "vitamin_b"),
    ("glasses", "glass"),
    ("news", "new"),
    ("github_username", "gitlab_username"),
    ("home_timezone", "work_timezone"),
    ("default_shell", "default_editor"),
    ("user_id", "username"),
    ("postal_code", "area_code"),
    ("ipv4_address", "ipv6_address"),
    ("python3_path", "python2_path"),
    ("movie", "movies_watched"),
    ("home_town", "home_city"),
    # "<attribute>_preference" is not the attribute
    ("gender_preference", "gender"),
    ("email_preferences", "email"),
    ("name_preference", "name"),
    ("seat_preference", "seat"),
    ("partner_gender_preference", "partner_gender"),
    ("work_email_preference", "work_email"),
    # a modifier that is part of a name
    ("primary_school", "school"),
    ("main_course", "course"),
    ("MySQL_version", "sql_version"),
    # one letter and a symbol is a language
    ("C++_version", "c_version"),
    ("C#_version", "c_version"),
    ("F#_version", "f_version"),
    # a possessive is not a plural, a vowel sign is part of its word
    ("Marie's_birthday", "Mary's_birthday"),
    ("पिता", "पता"),
    # a protected last word read again as part of one joined word
    ("use_https", "use_http"),
    ("timeout_ms", "timeout_m"),
    ("reading_glasses", "reading_glass"),
    ("city_news", "city_new"),
    # written apart, "my SQL" is no MySQL; a modifier last is the thing named
    ("my_sql_experience", "mysql_experience"),
    ("db_user", "db"),
    ("ssh_user", "ssh"),
    ("preferred_gender", "gender"),
    ("current_account", "account"),
    ("number_of_passports", "passport_number"),
    # a preferred location, salary or car is a wish; only a choice's preferred one is the one
    ("preferred_location", "location"),
    ("location_preference", "location"),
    ("preferred_salary", "salary"),
    ("car_preference", "car"),
    ("partner_preferences", "partner"),
    # only the last word is made singular: names end in "s"
    ("friend_lucas_birthday", "friend_luca_birthday"),
    ("birthday_of_lucas", "luca_birthday"),
    ("email_preference", "preferred_email"),
    ("preferred_channel", "channel"),
    ("preferred_manager", "manager"),
    ("preferred_car_brand", "car_brand"),
    ("preferred_hair_style", "hair_style"),
    ("router_default_password", "router_password"),
    ("app_user_count", "app_count"),
    ("user_count", "count"),
    ("andreas_phone", "andrea_phone"),
    ("first_name_of_wife", "first_wife_name"),
    ("user_experience", "experience"),
    ("primary_color", "color"),
    # numbers run together once joined: "_" stays between two
    ("server_10.1.11.1", "server_10.11.1.1"),
    ("trip_1_12", "trip_11_2"),
]


@pytest.mark.parametrize(("a", "b"), MUST_MERGE)
def test_spellings_of_the_same_key_merge(a: str, b: str) -> None:
    assert same_key(a, b), (normalize_key(a), normalize_key(b))
    assert same_key(b, a)


@pytest.mark.parametrize(("a", "b"), MUST_NOT_MERGE)
def test_different_keys_do_not_merge(a: str, b: str) -> None:
    assert not same_key(a, b), normalize_key(a)


def test_tables_have_enough_examples() -> None:
    assert len(MUST_MERGE) >= 30
    assert len(MUST_NOT_MERGE) >= 30


@pytest.mark.parametrize(
    ("key", "canonical"),
    [
        ("preferred_language", "language"),
        ("favourite_colour", "favoritecolor"),
        ("os", "operatingsystem"),
        ("date_of_birth", "birthdate"),
        ("HTTPPort", "httpport"),
        ("foods_I_don't_eat", "foodidonteat"),
        ("default", "default"),
        ("preferred_user", "preferreduser"),
        ("GitHub_username", "githubusername"),
        ("iOS_version", "iosversion"),
    ],
)
def test_canonical_form(key: str, canonical: str) -> None:
    assert normalize_key(key) == canonical


@pytest.mark.parametrize("key", ["", "   ", "___", "--", "?!"])
def test_key_without_tokens_falls_back_to_lowercased_original(key: str) -> None:
    assert normalize_key(key) == key.strip().lower()


def test_a_modifier_last_is_the_thing_named_and_kept() -> None:
    assert normalize_key("my_default") == "default"
    assert normalize_key("the_main") == "main"


def test_every_phrase_replacement_is_already_canonical() -> None:
    for replacement in PHRASES.values():
        canonical = "".join(replacement)
        if replacement == ("mobile",):  # a key of that word alone is the phone (_round)
            assert normalize_key(canonical) == "mobilephone"
            continue
        assert normalize_key(canonical) == canonical


def test_no_phrase_replacement_is_a_dropped_modifier_except_preference() -> None:
    produced = {token for replacement in PHRASES.values() for token in replacement}
    assert produced & DROPPED_MODIFIERS == {"preference"}


@pytest.mark.parametrize("key", [k for pair in MUST_MERGE + MUST_NOT_MERGE for k in pair])
def test_normalize_is_idempotent_on_the_tables(key: str) -> None:
    assert normalize_key(normalize_key(key)) == normalize_key(key)


VOCABULARY = sorted(
    {token for phrase in PHRASES for token in phrase}
    | {token for replacement in PHRASES.values() for token in replacement}
    | DROPPED_MODIFIERS
    | {"of", "home", "city", "colours", "hobbies", "movies", "names", "status", "x"}
)
SEPARATOR = st.sampled_from(["_", "-", ".", " ", "/", "__"])


@st.composite
def table_keys(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=6))
    separators = draw(st.lists(SEPARATOR, min_size=len(words), max_size=len(words)))
    return "".join(w + s for w, s in zip(words, separators, strict=True))


@given(key=st.one_of(st.text(), table_keys()))
def test_normalize_is_idempotent_on_any_key(key: str) -> None:
    once = normalize_key(key)
    assert normalize_key(once) == once
    assert same_key(key, once)


def test_a_key_of_a_thousand_ofs_does_not_raise() -> None:
    """The "of" reordering was recursive: 1,000 of them (an application's SQL) raised
    RecursionError, and every dedupe write in that category with it."""
    assert normalize_key("of_" * 3000 + "x") == "x"
    assert normalize_key("a_of_" * 2000 + "b").startswith("b")
