"""storable_vector(s): the one check every embedding passes before it can be stored or searched."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

import pytest

from navi_memory.constants import EMBEDDING_DIM, FLOAT32_MAX
from navi_memory.errors import EmbeddingError
from navi_memory.llm import storable_vector, storable_vectors

GOOD = [0.1] * EMBEDDING_DIM


class BrokenIterable:
    """Iterable, until it is iterated."""

    def __iter__(self) -> Iterator[float]:
        raise RuntimeError("iterator exploded")


def test_a_good_vector_comes_back_as_float32_with_the_same_values() -> None:
    """A list of floats becomes array('f'), each value rounded to float32 and nothing else."""
    vector = [(i % 7 - 3) / 3.0 for i in range(EMBEDDING_DIM)]
    checked = storable_vector(vector)
    assert isinstance(checked, array)
    assert checked.typecode == "f"
    assert checked.tolist() == array("f", vector).tolist()
    assert checked.tolist() == pytest.approx(vector, rel=1e-6)


@pytest.mark.parametrize(
    "vector",
    [
        tuple(GOOD),
        array("d", GOOD),
        array("f", GOOD),
        (x for x in GOOD),
        [1] * EMBEDDING_DIM,
        [FLOAT32_MAX] + [0.0] * (EMBEDDING_DIM - 1),
    ],
    ids=["tuple", "array-d", "array-f", "generator", "ints", "float32-max"],
)
def test_any_ordered_iterable_of_numbers_is_accepted(vector: Any) -> None:
    """Tuples, arrays, generators and ints are all vectors; float32's largest value fits."""
    assert len(storable_vector(vector)) == EMBEDDING_DIM


@pytest.mark.parametrize(
    ("vector", "expected"),
    [
        (None, "returned None instead of a vector"),
        (42, "returned an int instead of a vector"),
        ("0.1, 0.2", "returned a str instead of a vector"),
        (b"\x00" * 4 * EMBEDDING_DIM, "returned a bytes instead of a vector"),
        ({"a": 1.0}, "returned a dict instead of a vector"),
        ({0.1, 0.2}, "returned a set instead of a vector"),
        ([0.1] * 3, "returned 3-dimensional embeddings, expected 768"),
        ([], "returned 0-dimensional embeddings"),
        ([*GOOD, 0.1], "returned 769-dimensional embeddings"),
        (["0.1"] * EMBEDDING_DIM, "non-numbers"),
        ([None] * EMBEDDING_DIM, "non-numbers"),
        ([[0.1]] * EMBEDDING_DIM, "non-numbers"),
        ([True] + [False] * (EMBEDDING_DIM - 1), "a vector of booleans"),
        ([*GOOD[:-1], True], "a vector of booleans"),
        ([GOOD], "a list holding a list where one vector of 768 numbers was expected"),
        ([None], "a list holding None where one vector"),
        ([10**400, *GOOD[1:]], "non-numbers"),
        ([float("nan"), *GOOD[1:]], "non-finite"),
        ([float("inf"), *GOOD[1:]], "non-finite"),
        ([float("-inf"), *GOOD[1:]], "non-finite"),
        ([1e39, *GOOD[1:]], "beyond float32"),
        ([-1e39, *GOOD[1:]], "beyond float32"),
        ([0.0] * EMBEDDING_DIM, "all-zero"),
        (BrokenIterable(), "iterator exploded"),
    ],
)
def test_anything_else_is_an_embedding_error_saying_what_was_wrong(
    vector: object, expected: str
) -> None:
    """Junk of every shape is an EmbeddingError whose message names the problem."""
    with pytest.raises(EmbeddingError, match=r"^the embedder returned") as caught:
        storable_vector(vector)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("vector", "expected"),
    [
        (array("f", [float("nan"), *GOOD[1:]]), "non-finite"),
        (array("f", [float("inf"), *GOOD[1:]]), "non-finite"),
        (array("f", [0.0] * EMBEDDING_DIM), "all-zero"),
        (array("f", GOOD[1:]), "returned 767-dimensional embeddings"),
        (array("f", [*GOOD, 0.5]), "returned 769-dimensional embeddings"),
    ],
    ids=["nan", "inf", "zero", "short", "long"],
)
def test_float32_arrays_are_checked_like_any_other_vector(
    vector: array[float], expected: str
) -> None:
    """An array('f') (what a guarded embedder answers) takes a shorter road, not a lax one."""
    with pytest.raises(EmbeddingError, match=r"^the embedder returned") as caught:
        storable_vector(vector)
    assert expected in str(caught.value)


def test_a_float32_array_comes_back_as_a_copy() -> None:
    """The stored vector is not the caller's array: changing one later cannot change the other."""
    mine = array("f", GOOD)
    checked = storable_vector(mine)
    assert checked == mine
    mine[0] = 0.9
    assert checked[0] == pytest.approx(0.1)


def test_the_wrong_dimension_says_how_to_fix_it() -> None:
    """A model of another width is told apart from junk: use a 768-d model (re-embedding
    cannot help: the columns are vector(768))."""
    with pytest.raises(EmbeddingError) as caught:
        storable_vector([0.1] * 384)
    assert "use a 768-dimensional model" in str(caught.value)
    assert "re-embed" not in str(caught.value)


def test_the_subject_and_dimension_can_be_given() -> None:
    """The message starts with the given subject, and the width checked is ``dim``."""
    assert len(storable_vector([0.5] * 4, dim=4)) == 4
    with pytest.raises(EmbeddingError, match=r"^embedding model Mine returned 768-dim"):
        storable_vector(GOOD, dim=4, subject="embedding model Mine")


def test_a_list_of_good_vectors_comes_back_in_order() -> None:
    """Several vectors keep their order, each converted to float32."""
    vectors = [[float(i + 1)] * EMBEDDING_DIM for i in range(3)]
    checked = storable_vectors(vectors, 3)
    assert [v[0] for v in checked] == [1.0, 2.0, 3.0]
    assert all(v.typecode == "f" for v in checked)
    assert storable_vectors([], 0) == []


@pytest.mark.parametrize(
    ("vectors", "expected"),
    [
        (None, "returned None instead of a list of embeddings"),
        ("vectors", "returned a str instead of a list of embeddings"),
        ({"0": GOOD}, "returned a dict instead of a list of embeddings"),
        ([GOOD], "returned 1 embeddings for 2 inputs"),
        ([GOOD, GOOD, GOOD], "returned 3 embeddings for 2 inputs"),
        ([GOOD, None], "returned None instead of a vector (#1)"),
        ([GOOD, [float("nan")] * EMBEDDING_DIM], "non-finite or out-of-range value (#1)"),
        ([[0.1] * 5, GOOD], "5-dimensional embeddings, expected 768 (#0)"),
    ],
)
def test_a_list_with_the_wrong_count_or_a_bad_member_is_refused(
    vectors: object, expected: str
) -> None:
    """The count must match the texts, and the message says which member was junk."""
    with pytest.raises(EmbeddingError) as caught:
        storable_vectors(vectors, 2)
    assert expected in str(caught.value)
