"""Search and recall in Chinese, Japanese and Korean: a query's runs of those letters are
overlapping pairs (text.terms), the pairs holding a function character left out, the query's
other terms kept when the 16 terms run out, and recall asks three pairs of evidence."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from navi_memory import Memory, open_memory
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import new_session_row, new_user
from tests.integration.test_context_builder import HOST, conversation, padded
from tests.integration.test_search import draft

POLITE = "不好意思再问一下，我之前好像跟你提过一次，我们测试服务器的登录密码是什么？"
CHATTY = "你还记得我们的服务器端口是多少吗"


async def chunks(memory: Memory, uid: uuid.UUID, sid: str, *contents: str) -> None:
    await memory.store.add_chunks(
        [draft(c, start_seq=i * 2) for i, c in enumerate(contents)], user_id=uid, session_id=sid
    )


async def test_a_long_polite_question_finds_its_topic(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """The opening courtesies' pairs filled the 16 terms before "登录密码" came."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await memory.store.upsert_fact("technical", "测试服务器登录密码", "hunter2", user_id=uid)
    await memory.store.upsert_fact("personal", "午饭", "我喜欢吃面条", user_id=uid)
    await chunks(memory, uid, sid, "User: 测试服务器的登录密码是hunter2", "User: 今天天气不错")
    fake_ollama.mode = "fail"
    facts = await memory.store.search_facts(POLITE, user_id=uid)
    assert [f.value for f in facts][:1] == ["hunter2"]
    raw = await memory.search.search(POLITE, "raw", user_id=uid)
    assert "hunter2" in raw[0].text


async def test_a_ticket_after_a_long_question_is_still_a_term(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    uid = await new_user(memory)
    await memory.store.upsert_fact("work", "ticket", "deploy ticket JIRA-123", user_id=uid)
    fake_ollama.mode = "fail"
    facts = await memory.store.search_facts(
        "我们上周讨论的那个服务器部署问题现在怎么样了 JIRA-123", user_id=uid
    )
    assert [f.key for f in facts] == ["ticket"]


async def test_a_chatty_row_sharing_filler_does_not_outrank_the_answer(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """ "你还", "我们", "少吗"… matched the chatty row six times against the answer's four."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await memory.store.upsert_fact("technical", "服务器端口", "8099", user_id=uid)
    await memory.store.upsert_fact(
        "personal", "晚饭", "你还记得我们上次吃饭花了多少钱吗", user_id=uid
    )
    answer = "User: 服务器端口改成8099了"
    await chunks(memory, uid, sid, answer, "User: 你还记得我们上次吃饭花了多少钱吗？不记得了")
    fake_ollama.mode = "fail"
    assert (await memory.store.search_facts(CHATTY, user_id=uid))[0].value == "8099"
    assert (await memory.store.search_chunks(CHATTY, user_id=uid))[0].content == answer


@pytest.fixture
async def small_chunks(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    async with open_memory(make_settings(db_url, fake_ollama, chunk_max_chars=200)) as opened:
        yield opened


async def recalled_after(
    memory: Memory, fake_ollama: FakeOllama, said: str, then: str, incoming: str
) -> list[str]:
    """What recall injects for ``incoming`` once ``said`` (padded) was compressed away and
    ``then`` is the context's message, the embedder down (text only)."""
    uid = await new_user(memory)
    sid = await conversation(
        memory, fake_ollama, uid, [("user", padded(said)), ("assistant", then)], keep_last=1
    )
    fake_ollama.mode = "fail"
    prompt = await memory.context.build_prompt(sid, incoming, system_prompt=HOST, user_id=uid)
    return [hit.text for hit in prompt.recalled]


DEPLOY = "部署脚本在/opt/navi/deploy.sh，需要root权限"


@pytest.mark.parametrize(
    ("said", "incoming", "recalled"),
    [
        # one shared word of three letters is two pairs: not two words of evidence
        ("服务器的风扇声音很吵", "服务器重启了吗", False),
        # function words ("怎么", "问题" beside "的") are no evidence
        ("火锅怎么样？有什么问题吗", "发票的问题怎么处理", False),
        (DEPLOY, "部署脚本在哪里", True),
        # three pairs are asked only of a query of nothing but pairs: "nginx" and "port" are
        # two words of evidence though the question ends in Chinese
        ("The nginx port on staging is 8080", "nginx 的 port 是多少", True),
    ],
)
async def test_recall_in_chinese_asks_three_pairs_of_evidence(
    small_chunks: Memory, fake_ollama: FakeOllama, said: str, incoming: str, recalled: bool
) -> None:
    hits = await recalled_after(small_chunks, fake_ollama, said, "好", incoming)
    assert bool(hits) == recalled, hits


@pytest.mark.parametrize(
    "context_message",
    [
        "Sure, here are the steps: install docker compose, configure nginx proxy, restart "
        "postgres service, check journalctl logs, verify firewall rules, update certificates, "
        "rotate secrets, monitor grafana dashboards",
        "好的，我明天下午三点去机场接朋友，然后一起去吃火锅",
    ],
)
async def test_recall_keeps_the_incoming_questions_terms_first(
    small_chunks: Memory, fake_ollama: FakeOllama, context_message: str
) -> None:
    """Recall's query is the incoming message, then the context's: its 16 terms are the first
    ones, so an older message's words (English, or Chinese pairs) never evict the question's."""
    assert await recalled_after(
        small_chunks, fake_ollama, DEPLOY, context_message, "部署脚本在哪里"
    )


@pytest.mark.parametrize(
    ("query", "answer", "other"),
    [
        ("はしはどこ？", "User: はしはひきだしにいれたよ", "User: どこでもいいよ"),  # chopsticks
        ("의자가 부서졌어", "User: 의자는 이케아에서 샀어", "User: 오늘 날씨 좋다"),  # the chair
    ],
)
async def test_a_kana_or_hangul_word_holding_a_particles_letter_is_searched(
    memory: Memory, fake_ollama: FakeOllama, query: str, answer: str, other: str
) -> None:
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await chunks(memory, uid, sid, answer, other)
    fake_ollama.mode = "fail"
    raw = await memory.search.search(query, "raw", user_id=uid)
    assert raw[0].text.endswith(answer.removeprefix("User: ")), [h.text for h in raw]


GLUED = {
    "python": "User: 我用Python写的爬虫，每天早上跑一次",
    "nginx": "User: 서버nginx설정을 어제 바꿨어",
    "thai": "User: ใช้Rustเขียนเครื่องมือนี้",
    "port": "User: 测试环境的端口8099已经开了",
    "csharp": "User: 那个服务是用C#写的",
}


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("Python", "python"),
        ("nginx", "nginx"),
        ("rust", "thai"),
        ("8099", "port"),
        ("C#", "csharp"),
    ],
)
@pytest.mark.parametrize("stage", ["queued", "indexed"])
async def test_a_latin_word_written_against_cjk_or_thai_letters_is_found_by_an_ascii_query(
    memory: Memory, fake_ollama: FakeOllama, query: str, wanted: str, stage: str
) -> None:
    """The text index read "我用Python写的爬虫" as one lexeme: an ASCII query takes the BM25
    path (lexemes), which never found the chunk (revision 0032)."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await chunks(memory, uid, sid, *GLUED.values(), "User: 今天天气不错")
    if stage == "indexed":
        await memory.store.index_pending_chunks()
    fake_ollama.mode = "fail"
    hits = await memory.store.search_chunks(query, user_id=uid)
    assert [h.content for h in hits] == [GLUED[wanted]]
    assert hits[0].terms_hit == 1


async def test_recall_finds_english_words_written_into_chinese(
    small_chunks: Memory, fake_ollama: FakeOllama
) -> None:
    hits = await recalled_after(
        small_chunks,
        fake_ollama,
        "后端是我用Django和Celery搭的，队列放在redis里",
        "好",
        "What did we use for the Celery queue, redis?",
    )
    assert any("Celery" in hit for hit in hits), hits
