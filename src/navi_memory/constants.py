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

FACT_SCAN_HEAD: Final = 4
"""A fact search (a user's, or everyone's) sorts the fact vectors by distance but checks
visibility (merged, expired, queued for the indexer) only on the nearest ``FACT_SCAN_HEAD x
limit``; it checks the rest only when too few of those are visible. Hidden facts are a few
percent: one look nearly always does."""

CHUNK_MAX_DISTANCE: Final = 0.45
"""search_chunks: a vector hit must lie closer than this cosine distance (the default of the
CHUNK_MAX_DISTANCE setting: the spec's value for nomic-embed-text)."""

CHUNK_BM25_K1: Final = 1.5
"""search_chunks' BM25: term-frequency saturation (Okapi's usual value)."""

CHUNK_BM25_B: Final = 0.75
"""search_chunks' BM25: how much a chunk's length normalises its score (Okapi's usual value)."""

CHUNK_BM25_PRUNE_FROM: Final = 1_000
"""search_chunks prunes its BM25 text list (reads only the chunks that can reach the top, see
docs/raw-history.md, "Pruning") for a user of this many indexed chunks or more; a smaller user's
chunks holding a query word are all read, which costs less than finding which to skip."""

CHUNK_GRAPH_FROM: Final = 2_000
"""The default of the CHUNK_GRAPH_FROM setting: a user's chunk vectors go into the HNSW graph
once the user holds this many indexed chunks; a smaller user's are searched exactly, which
costs a few microseconds a chunk and finds every nearest one (docs/raw-history.md, "Vector
index"; the crossover is measured in docs/benchmarks.md)."""

CHUNK_GRAPH_SWEEP_SECONDS: Final = 60.0
"""How often at most the chunk indexer looks at every user past CHUNK_GRAPH_FROM for vectors
still beside the graph (jobs.chunk_indexer): a user is moved by the batch that takes them past
it; the look is for what a batch, or another process, left unfinished."""

CHUNK_GRAPH_CANDIDATES: Final = 40
"""A search takes at least this many of a user's nearest rows from the HNSW graph, then keeps
the best ``limit`` of them by distance: with ``hnsw.iterative_scan = relaxed_order`` the first
rows the scan yields are not quite the nearest, and reading on finds the ones it passed over
(recall@10 at 1M on a graph built with ef_construction 64: 0.92-0.99 for the first 10,
0.955-0.99 for the best 10 of 40; 1.000 on revision 0012's graph, built with 128; see
docs/benchmarks.md)."""

PRUNE_HINTS_CAPACITY: Final = 100_000
"""How many users a process remembers as below CHUNK_BM25_PRUNE_FROM (services.chunks.PruneHints:
a few MB); one it forgot takes the pruned statement again, which is exact for every user."""

CHUNK_BM25_SEED_ROWS: Final = 200
"""Pruning's seed: the chunks holding the query's rarest words, up to this many in all."""

CHUNK_BM25_SEED_EVERY: Final = 10
"""Pruning's seed: besides, up to this many times the limit of the chunks holding every word."""

CHUNK_FUSION_VECTOR_WEIGHT: Final = 0.3
"""search_chunks (bm25): a candidate scores its BM25 score relative to the best text hit's
(0-1) plus this weight times its cosine similarity to the query (docs/raw-history.md). Chosen
on the LoCoMo dev split with all-MiniLM-L6-v2 (make bench-quality): 0.25-0.35 led; from 0.4
a weak model's similarity displaced as many right first places as it found. A stronger model
(nomic-embed-text) was not measurable here; see docs/benchmarks.md."""

MAX_BREADCRUMBS: Final = 40
"""Breadcrumbs attached to the chunks of one compression, most important first."""

SUMMARY_MAX_KEYS: Final = 30
"""What the summary prompt asks for on its KEYS: line."""

INJECTED_LEDGER_MAX: Final = 100
"""Automatic recall remembers this many delivered chunk ids per session."""

MIN_POSTGRES_MAJOR: Final = 15
"""The oldest PostgreSQL navi-memory is built for (``navi-memory doctor`` reports older ones)."""

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
"""Largest ``limit`` a search accepts (search_facts, search_chunks, search_values), and the
most sessions one process_stale_sessions call takes when given a limit."""

INT32_MAX: Final = 2**31 - 1
"""Largest value of an ``integer`` column (message and chunk seqs): no seq or count beyond it is
accepted at the edge, rather than PostgreSQL refusing it as out of range."""
BIGINT_MAX: Final = 2**63 - 1
"""Largest ``bigint`` (row ids) and the largest LIMIT or OFFSET PostgreSQL takes."""

BACKFILL_PAUSE_MAX_SECONDS: Final = 3600.0
"""Longest pause between backfill batches a caller may ask for (an hour; more is a mistake)."""

FACT_CATEGORY_MAX_CHARS: Final = 100
FACT_KEY_MAX_CHARS: Final = 200
FACT_EXPIRES_MAX_DAYS: Final = 36_500
"""``expires_days`` may reach a hundred years; beyond that a fact should not expire at all."""
TOOL_EXPIRES_MIN_DAYS: Final = 0.001
"""The memory tool's shortest ``expires_days`` (86.4 seconds): less, and the fact a model asked
to save would have expired by the time the tool says "saved" (the API itself takes any
positive number)."""

EXTRACTED_MARK_MAX_AHEAD_SECONDS: Final = 300
"""How far ahead of this host's clock ``mark_session_extracted(at=...)`` may be: a clock (the
database's, another host's) a little ahead; more, and the session's later activity would go
unextracted until the clock passed the mark."""

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
KV_ENTRY_NAME_MAX_BYTES: Final = 2_600
"""An entry's scope, session id and key together, in UTF-8: they form one row of the unique
btree index, which holds at most 2,704 bytes (the character limits allow 3,200 bytes of
4-byte characters)."""
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

DROPPED_HISTORY_SETTLE: Final = timedelta(0)
"""index_dropped_history leaves alone sessions compressed more recently than this: none, since
a compression writes its chunks in the transaction that demotes the messages (no indexing of a
committed demotion is ever still to come)."""
DROPPED_HISTORY_MAX_SETTLE: Final = timedelta(days=36_500)
"""The longest ``settled_for`` index_dropped_history accepts (beyond it ``now() - settle`` leaves
PostgreSQL's timestamp range)."""

CHUNK_CHARS_MIN: Final = 200
"""Smallest CHUNK_MAX_CHARS / CHUNK_MESSAGE_MAX_CHARS a deployment may set."""

DEFAULT_CHUNK_MAX_CHARS: Final = 4000
"""CHUNK_MAX_CHARS: messages are packed into chunks of up to this many characters (spec)."""

DEFAULT_MESSAGE_MAX_CHARS: Final = 12000
"""CHUNK_MESSAGE_MAX_CHARS: one rendered message is capped here, its middle elided (spec)."""

MAX_QUERY_TERMS: Final = 16
"""A search query's terms beyond this many are left out: more add SQL, not recall."""

# --- unified search (memory.search, the memory_search tool) -----------------------------------

SEARCH_K_MIN: Final = 1
SEARCH_K_MAX: Final = 20
"""Hits per store in unified search; ``k`` outside this range is clamped, never refused."""

SEARCH_K_DEFAULT: Final = 5

SKETCH_SCOPE: Final = "scratchpad"
"""The kv_store scope unified search reads sketches from (the scratchpad's)."""

FRESHNESS_MIN_SHARED_WORDS: Final = 2
"""A raw excerpt is superseded by a newer fact sharing at least this many content words."""

FRESHNESS_EXCERPT_WORDS: Final = 50_000
"""Content words of raw excerpts each search service keeps (text.freshness.ExcerptWords), in
all: about 100 bytes a word (measured: 10 KB for the benchmark's 1-4 KB chunks, ~100 words
each), so about 5 MB, some 500 such excerpts. Tokenizing a 1-4 KB excerpt is about 50 µs,
and recall marks the current session's excerpts again every turn."""

FRESHNESS_FACTS: Final = 10
"""How many of the facts matching the query (the best-ranked; ``k`` when more) the freshness
rule compares raw excerpts with. More costs the fact search its early exit: with this many
vector hits it skips the text pass."""

HIT_TEXT_MAX_CHARS: Final = 1500
"""format_hits cuts a hit's text (a chunk's verbatim text, a long value) here, marking the cut."""

QUERY_ECHO_MAX_CHARS: Final = 200
"""format_hits echoes at most this much of the query in its header."""

# --- extraction ---------------------------------------------------------------------------------

TRANSCRIPT_MAX_CHARS: Final = 12_000
"""The extractor's transcript is cut to this many characters, its middle dropped (spec)."""

TRANSCRIPT_TOOL_OUTPUT_MAX_CHARS: Final = 500
"""A tool result in the transcript is cut to this many characters (spec); so are a tool call's
arguments, which can be a whole file as easily as a result can."""

EXTRACTION_MAX_FACTS: Final = 100
"""Facts taken from one session's reply; more are skipped (a runaway reply must not write, and
embed, thousands of rows)."""

SUMMARY_MAX_FACTS: Final = 200
"""The user's summary is written from at most this many facts, the most recently verified."""

SUMMARY_FACT_MAX_CHARS: Final = 300
"""A fact's value is cut to this in the summary prompt (its middle elided)."""

FACT_SUMMARY_MAX_CHARS: Final = 4_000
"""A longer summary reply is cut in the middle: the user's summary rides in every prompt."""

EXTRACTION_BACKGROUND_CONCURRENCY: Final = 2
"""Background sweeps (started by sessions.create) that run at once in one Memory; more users
wait their turn. Each holds a pooled connection for its claim, and one model server answers
them in turn anyway."""

EXTRACTION_RETRY_BASE_SECONDS: Final = 300
"""A session whose extraction failed for its own sake (a reply with no usable JSON, a row that
cannot be read) is left by sweeps for this long after its first failure, twice as long after
each further one (revision 0030), up to EXTRACTION_RETRY_MAX_SECONDS; new activity in it, or
a call naming it (extract_session), tries it at once."""

EXTRACTION_RETRY_MAX_SECONDS: Final = 86_400
"""The longest a failing session is left between two attempts: once a day."""

EMBEDDING_FAILURE_LOG_INTERVAL_SECONDS: Final = 60.0
"""A failing embedding model is reported at most once per this many seconds, with the number of
failures since the last report (one warning per call would drown the log)."""

MEMORY_CLOSE_GRACE_SECONDS: Final = 5.0
"""A Memory that closes gives the calls still in flight this long to give their connections
back before its pools are disposed (a connection still out then is closed by the garbage
collector)."""

EMBEDDING_MODEL_RECHECK_SECONDS: Final = 10.0
"""A Memory reads the embedding model of record again at most this often (one tiny query, when
it next makes a vector): a process started before a ``reembed`` with another model stops making
its model's vectors at most this long after it."""

EMBEDDING_MODEL_CLAIM_AFTER_SECONDS: Final = 3600.0
"""Another model's record with no vector stored is taken over by a process's first vectors
only when it was recorded at least this long before that process first looked: a leftover
(its users deleted), not a reembed's record waiting for its first batch, nor another process's
a moment before its first vectors."""

OLLAMA_DEFAULT_TAG: Final = "latest"
"""The tag Ollama gives a model named without one: ``nomic-embed-text`` is
``nomic-embed-text:latest``."""

OLLAMA_DEFAULT_REGISTRY: Final = "registry.ollama.ai"
OLLAMA_DEFAULT_NAMESPACE: Final = "library"
"""The registry and namespace Ollama gives a model named without them:
``registry.ollama.ai/library/nomic-embed-text`` is ``nomic-embed-text``."""

TEXT_ONLY_EMBEDDING_MODEL: Final = "none"
"""EMBEDDING_MODEL=none: text-only mode, no embedding model at all."""

INJECTED_LEDGER_KEY: Final = "injected_chunk_ids"
"""The key of a session's session_metadata holding the recall ledger (chunk ids, spec)."""

EXPORT_FORMAT: Final = "navi-memory-export"
"""The first record of an export names the format and its version (EXPORT_FORMAT_VERSION)."""

EXPORT_FORMAT_VERSION: Final = 1

STATS_USERS_DEFAULT: Final = 20
"""memory.admin.stats() breaks the counts down for this many users, the largest first."""

EMBEDDED_STOP_TIMEOUT_SECONDS: Final = 60
"""How long ``navi-memory server stop`` waits for the embedded server's shutdown checkpoint."""
