"""hashed_embedding: deterministic vectors whose distances behave enough like a real model's."""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys

import pytest

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.testing import hashed_embedding


def cosine_distance(a: str, b: str) -> float:
    x, y = hashed_embedding(a), hashed_embedding(b)
    return 1.0 - sum(p * q for p, q in zip(x, y, strict=True))


def test_vectors_have_the_embedding_dim_and_unit_length() -> None:
    for text in ["hello world", "", "a", "x" * 5000]:
        vector = hashed_embedding(text)
        assert len(vector) == EMBEDDING_DIM
        assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, rel_tol=1e-9)


def test_dim_is_honoured_and_must_be_positive() -> None:
    assert len(hashed_embedding("hello world", dim=16)) == 16
    with pytest.raises(ValueError, match="dim"):
        hashed_embedding("hello", dim=0)


def test_identical_texts_are_at_distance_zero() -> None:
    assert cosine_distance("the server runs on port 8080", "the server runs on port 8080") == (
        pytest.approx(0.0, abs=1e-12)
    )


def test_task_prefixes_case_and_punctuation_do_not_change_the_vector() -> None:
    plain = hashed_embedding("hello world 42")
    assert hashed_embedding("search_document: hello world 42") == plain
    assert hashed_embedding("search_query: hello world 42") == plain
    assert hashed_embedding("Hello, WORLD! (42)") == plain


def test_digits_are_words_too() -> None:
    assert cosine_distance("port 8080", "port 9090") > 0.3


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The server listens on port 8080", "the server listens on port 8081"),
        ("I prefer neovim as my editor", "I prefer neovim as my text editor"),
        ("user lives in Berlin with two cats", "user lives in Berlin with three cats"),
    ],
)
def test_texts_sharing_most_words_are_closer_than_0_3(a: str, b: str) -> None:
    assert cosine_distance(a, b) < 0.3


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The server listens on port 8080", "My sister lives in Berlin with two cats"),
        ("I like hiking in the mountains", "The database migration failed yesterday"),
        ("favourite editor neovim", "allergic to peanuts"),
    ],
)
def test_unrelated_texts_are_farther_than_0_6(a: str, b: str) -> None:
    assert cosine_distance(a, b) > 0.6


def test_spelling_variants_are_nearer_than_unrelated_words() -> None:
    assert cosine_distance("colour", "color") < cosine_distance("colour", "banana")
    assert cosine_distance("my favourite colour is blue", "my favorite color is blue") < 0.45


def test_text_without_words_maps_to_one_fixed_unit_vector() -> None:
    empty = hashed_embedding("")
    assert hashed_embedding("  ...!? ") == empty
    assert hashed_embedding("search_query: ") == empty
    assert sorted(empty, reverse=True)[:2] == [1.0, 0.0]


def test_vectors_are_the_same_in_another_process() -> None:
    """blake2b, never hash(): a new interpreter (new hash seed) computes the same vector."""
    code = "from navi_memory.testing import hashed_embedding as h; print(repr(h('stable words 7')))"
    env = os.environ | {"PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert ast.literal_eval(out) == hashed_embedding("stable words 7")
