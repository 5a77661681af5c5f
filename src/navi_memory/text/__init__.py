"""Pure text logic for memory, with no database: raw chunks, breadcrumbs, key spelling and the
extractor's transcript.

Deterministic and free of I/O, so services call it inside a unit of work without a thought.
"""

from __future__ import annotations

from navi_memory.text.breadcrumbs import (
    BREADCRUMB_MAX_CHARS,
    extract_breadcrumbs,
    merge_breadcrumbs,
    split_keys_line,
)
from navi_memory.text.chunks import (
    DEFAULT_CHUNK_MAX_CHARS,
    DEFAULT_MESSAGE_MAX_CHARS,
    build_chunks,
    elide_middle,
    elided_parts,
    render_message,
)
from navi_memory.text.keys import normalize_key, same_key
from navi_memory.text.transcript import render_transcript, transcript_line

__all__ = [
    "BREADCRUMB_MAX_CHARS",
    "DEFAULT_CHUNK_MAX_CHARS",
    "DEFAULT_MESSAGE_MAX_CHARS",
    "build_chunks",
    "elide_middle",
    "elided_parts",
    "extract_breadcrumbs",
    "merge_breadcrumbs",
    "normalize_key",
    "render_message",
    "render_transcript",
    "same_key",
    "split_keys_line",
    "transcript_line",
]
