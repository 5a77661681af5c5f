"""Numbers the spec fixes: one constant, one place.

Tunables a deployment may change live in ``config.Settings``; these are part of the contract.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

EMBEDDING_DIM: Final = 768
"""Width of every ``vector`` column (nomic-embed-text)."""

FACT_MAX_DISTANCE: Final = 0.3
"""search_facts: a vector hit must lie closer than this cosine distance."""

CHUNK_MAX_DISTANCE: Final = 0.45
"""search_chunks: a vector hit must lie closer than this cosine distance (the default of the
CHUNK_MAX_DISTANCE setting: the spec's value for nomic-embed-text)."""

CHUNK_BM25_K1: Final = 1.5
"""search_chunks' BM25: term-frequency saturation (Okapi's usual value)."""

CHUNK_BM25_B: Final = 0.75
"""search_chunks' BM25: how much a chunk's length normalises its score (Okapi's usual value)."""

CHUNK_FUSION_K: Final = 60
"""search_chunks: the reciprocal-rank fusion constant, 1 / (k + rank) per list a hit is in (the
usual 60; to be tuned on the LoCoMo dev split once make bench-quality has a real embedder)."""

CHUNK_FUSION_VECTOR_WEIGHT: Final = 1.0
"""search_chunks: the weight of the vector list in the fusion (the text list's is 1)."""

MAX_BREADCRUMBS: Final = 40
"""Breadcrumbs attached to the chunks of one compression, most important first."""

SUMMARY_MAX_KEYS: Final = 30
"""What the summary prompt asks for on its KEYS: line."""

INJECTED_LEDGER_MAX: Final = 100
"""Automatic recall remembers this many delivered chunk ids per session."""

MIN_PGVECTOR: Final = (0, 8, 0)
"""Iterative index scans (hnsw.iterative_scan) arrived in pgvector 0.8.0."""

PERMISSION_READ_ALL: Final = "navi.memory.read_all"
"""The permission a global (all users) read needs."""

PERMISSION_MAX_CHARS: Final = 200
"""Longest permission name request_context accepts."""

MAX_TEXT_CHARS: Final = 100_000
"""Longest category/key/value/query text accepted; longer input is refused, not truncated."""

FLOAT32_MAX: Final = 3.4028234663852886e38
"""pgvector stores single-precision floats: a larger value cannot be written."""

# --- limits at the API edge (validation refuses more; nothing is truncated) ---------------------

MAX_LIMIT: Final = 1000
"""Largest ``limit`` a search accepts (search_facts, search_chunks, search_values)."""

FACT_CATEGORY_MAX_CHARS: Final = 100
FACT_KEY_MAX_CHARS: Final = 200
FACT_EXPIRES_MAX_DAYS: Final = 36_500
"""``expires_days`` may reach a hundred years; beyond that a fact should not expire at all."""

DEFAULT_CONFIDENCE: Final = 70
"""A fact's confidence when the caller gives none and its source has no default of its own."""

SESSION_ID_MAX_CHARS: Final = 200
"""Longest session id accepted anywhere (a session id is caller-chosen text)."""
SESSION_TITLE_MAX_CHARS: Final = 1_000
TOOL_NAME_MAX_CHARS: Final = 200
MESSAGE_MAX_CHARS: Final = 1_000_000
"""Longest message content (and serialised tool_args) accepted; a tool may return a whole file,
but more than this is a bug upstream, refused rather than truncated."""

KV_SCOPE_MAX_CHARS: Final = 100
KV_KEY_MAX_CHARS: Final = 500
KV_TERM_MAX_CHARS: Final = 500

# --- batches ------------------------------------------------------------------------------------

BATCH_SIZE_MAX: Final = 1024
"""Largest batch a model call or a backfill batch may take (Settings and backfill_embeddings)."""

BACKFILL_BATCH_SIZE: Final = 8
"""Rows embedded per backfill batch when neither the caller nor BACKFILL_BATCH_SIZE says."""

CHUNK_INSERT_BATCH: Final = 1000
"""Chunks per INSERT statement (bounds one statement's arrays); add_chunks of at most this many
chunks is one autocommit statement, more take one transaction."""

# --- compression --------------------------------------------------------------------------------

SUMMARY_INPUT_MAX_CHARS: Final = 24_000
"""What the summarizer is shown at most; a longer transcript loses its middle (the demoted
messages are still indexed whole)."""

SUMMARY_MAX_CHARS: Final = 12_000
"""A longer summary is cut in the middle: it rides in every prompt from now on."""

DROPPED_HISTORY_SETTLE: Final = timedelta(minutes=10)
"""index_dropped_history leaves alone sessions compressed more recently than this: a compression
indexes its messages seconds after its commit."""

CHUNK_CHARS_MIN: Final = 200
"""Smallest CHUNK_MAX_CHARS / CHUNK_MESSAGE_MAX_CHARS a deployment may set."""
