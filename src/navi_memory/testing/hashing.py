"""Deterministic text embeddings from hashed word and trigram features, for tests and benchmarks.

Stable across processes and machines (blake2b, never ``hash()``), and meaningful enough for the
spec's distance thresholds: shared words pull texts together, unrelated texts stay far apart.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from typing import Final

from navi_memory.constants import EMBEDDING_DIM

__all__ = ["KNOWN_TASK_PREFIXES", "hashed_embedding"]

KNOWN_TASK_PREFIXES: Final = ("search_document: ", "search_query: ")
"""nomic-embed-text's task prefixes; stripped so a query and a document of one text coincide."""

_WORD_BUCKETS: Final = 4
"""Signed buckets per word: more buckets make collisions between unrelated words average out."""

_WORD_WEIGHT: Final = 1.0
_TRIGRAM_WEIGHT: Final = 0.5
"""Trigrams weigh less than words: they only nudge spelling variants (colour/color) closer."""

_TOKEN = re.compile(r"[^\W_]+")
"""Runs of letters and digits (any script); everything else, underscore included, separates."""


def hashed_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """Embed ``text`` as an L2-normalised vector of length ``dim``.

    A known task prefix is stripped first, then the text is lower-cased and split on
    non-alphanumerics (digits are kept). Each word adds ``_WORD_BUCKETS`` signed features and
    each of its character trigrams (padded with ``#``) one lighter feature. Text without any word
    maps to a fixed unit vector, so every result is a valid, comparable embedding.
    """
    if dim < 1:
        raise ValueError(f"dim must be at least 1, got {dim}")
    for prefix in KNOWN_TASK_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    vector = [0.0] * dim
    for token in _TOKEN.findall(text.lower()):
        for index, value in _token_features(token, dim):
            vector[index] += value
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector = [0.0] * dim
        vector[0] = 1.0
        return vector
    return [v / norm for v in vector]


@functools.lru_cache(maxsize=65536)
def _token_features(token: str, dim: int) -> tuple[tuple[int, float], ...]:
    features = list(_buckets("w:" + token, _WORD_BUCKETS, _WORD_WEIGHT, dim))
    padded = f"#{token}#"
    for start in range(len(padded) - 2):
        features.extend(_buckets("t:" + padded[start : start + 3], 1, _TRIGRAM_WEIGHT, dim))
    return tuple(features)


def _buckets(feature: str, count: int, weight: float, dim: int) -> list[tuple[int, float]]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8 * count).digest()
    result = []
    for i in range(count):
        value = int.from_bytes(digest[8 * i : 8 * i + 8], "little")
        sign = 1.0 if value & 1 else -1.0
        result.append(((value >> 1) % dim, sign * weight))
    return result
