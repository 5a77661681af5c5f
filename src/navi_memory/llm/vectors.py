"""Checking what an embedder answered: the one place that decides whether a vector can be stored.

A storable vector is ``EMBEDDING_DIM`` finite float32 values, not all zero; anything else is junk.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Set
from typing import Final, cast

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import EmbeddingError
from navi_memory.llm._ollama import shorten, type_phrase

__all__ = ["storable_vector", "storable_vectors"]

_DEFAULT_SUBJECT: Final = "the embedder"
_NOT_A_LIST: Final = (str, bytes, bytearray, memoryview, Mapping, Set)
"""Iterable, but never a vector or a list of vectors: text, raw bytes, keys, unordered values."""


def storable_vector(
    vector: object, *, dim: int = EMBEDDING_DIM, subject: str = _DEFAULT_SUBJECT
) -> array[float]:
    """``vector`` as float32 (``array('f')``, what pgvector stores), checked; else EmbeddingError.

    Accepts any ordered iterable of numbers (a list, a tuple, an ``array``, a numpy row). Refused,
    with a message that starts with ``subject``: something that is not such an iterable, a length
    other than ``dim``, a value that is not a number, NaN, an infinity, a value beyond float32's
    range, and the all-zero vector (it has no direction, so no cosine distance).
    """
    return _checked(vector, dim=dim, subject=subject, where="")


def storable_vectors(
    vectors: object, expected: int, *, dim: int = EMBEDDING_DIM, subject: str = _DEFAULT_SUBJECT
) -> list[array[float]]:
    """``expected`` vectors, each as ``storable_vector`` checks it; else EmbeddingError.

    ``vectors`` must be an ordered iterable holding exactly ``expected`` vectors.
    """
    items = _as_list(vectors, f"{subject} returned {{kind}} instead of a list of embeddings")
    if len(items) != expected:
        raise EmbeddingError(f"{subject} returned {len(items)} embeddings for {expected} inputs")
    return [
        _checked(item, dim=dim, subject=subject, where=f" (#{index})")
        for index, item in enumerate(items)
    ]


def _checked(vector: object, *, dim: int, subject: str, where: str) -> array[float]:
    if type(vector) is array and vector.typecode == "f" and len(vector) == dim:
        # Already float32 (the local embedder's answer; a guard's, when a bare EmbeddingService
        # or a guard around a guard checks it): a copy in one memcpy instead of a list of 768
        # floats and back (~25 µs a vector).
        return _finite_with_direction(array("f", vector), subject=subject, where=where)
    items = (
        vector
        if type(vector) is list
        else _as_list(vector, f"{subject} returned {{kind}} instead of a vector{where}")
    )
    if len(items) != dim:
        if len(items) == 1 and not isinstance(items[0], (int, float)):
            # [[…768 numbers]]: the model (or an adapter) answered a batch of one where one
            # vector was asked for; "1-dimensional, use another model" would send the reader
            # the wrong way.
            raise EmbeddingError(
                f"{subject} returned a list holding {type_phrase(items[0])} where one vector "
                f"of {dim} numbers was expected{where}: an embed_query must return the vector "
                "itself, an embed_documents one vector per input"
            )
        raise EmbeddingError(
            f"{subject} returned {len(items)}-dimensional embeddings, expected {dim}{where}: "
            f"use a {dim}-dimensional model (with Ollama: set EMBEDDING_MODEL to one, such as "
            f"nomic-embed-text): the columns are vector({dim}), whatever the model"
        )
    if type(items[0]) is bool or type(items[-1]) is bool:
        # array("f") takes True and False for 1.0 and 0.0: a list of flags (an adapter's
        # mistake) would be stored as a vector. Its ends are looked at, not every value: a
        # list of flags has them everywhere, and a full pass costs ~13 µs a vector.
        raise EmbeddingError(
            f"{subject} returned a vector of booleans{where}, not of numbers: check the "
            "embedder (or its adapter) returns the model's floats"
        )
    try:
        # Converted and type-checked in C, to float32 as pgvector stores it; a value beyond
        # float32's range becomes an infinity here, caught with NaN below.
        values = array("f", cast("list[float]", items))
    except (TypeError, ValueError, OverflowError) as exc:
        raise EmbeddingError(
            f"{subject} returned a vector of non-numbers{where}: {shorten(str(exc))}"
        ) from exc
    return _finite_with_direction(values, subject=subject, where=where)


def _finite_with_direction(values: array[float], *, subject: str, where: str) -> array[float]:
    # A NaN or an infinity makes the sum non-finite; dim finite float32 values cannot overflow
    # a double. One C-speed pass instead of a Python loop over every value.
    if not math.isfinite(sum(values)):
        raise EmbeddingError(
            f"{subject} returned a non-finite or out-of-range value{where} (NaN, infinity, or "
            "beyond float32: pgvector cannot store it)"
        )
    if not any(values):
        raise EmbeddingError(
            f"{subject} returned an all-zero vector{where}, which has no direction"
        )
    return values


def _as_list(value: object, message: str) -> list[object]:
    """The items of an ordered iterable, else EmbeddingError(``message`` naming the ``{kind}``)."""
    if isinstance(value, _NOT_A_LIST) or not isinstance(value, Iterable):
        raise EmbeddingError(message.replace("{kind}", type_phrase(value)))
    try:
        return list(value)
    except Exception as exc:  # a custom iterable that breaks half-way is junk like any other
        kind = type_phrase(value)
        raise EmbeddingError(f"{message.replace('{kind}', kind)}: {shorten(repr(exc))}") from exc
