"""``MEMORY_USAGE_GUIDELINES``: the spec's persona guidance on the memory tools, as the text a host
puts in its agent's system prompt (spec: "Memory usage guidelines", "memory vs memory_search").
"""

from __future__ import annotations

from typing import Final

__all__ = ["MEMORY_USAGE_GUIDELINES"]

MEMORY_USAGE_GUIDELINES: Final = """\
## Memory

You have two memory tools. `memory` writes: save, forget and list facts about the user, and \
search only the curated facts. `memory_search` reads everything: curated facts, the verbatim \
history that dropped out of your conversations with the user (this one and earlier ones), and \
the scratchpad sketches (this session's first).

Call memory_search when:
- The user refers back to something you can no longer see — "as we discussed", "the port we \
picked", "that file", a name, a number, a link, a decision — before saying you do not remember.
- The user mentions something personal (location, project, preference, recurring task) and you \
need the fact behind it.
- You are about to make an assumption about the user's environment or preferences — verify \
first.

Prefer a newer curated fact over an older raw excerpt; when they disagree, memory_search says \
which one is outdated.

Do NOT call memory_search reflexively at the start of every session — only when context \
warrants it (automatic recall already covers the compressed-history case).

Call memory with action="forget" only when the user explicitly asks, or when a stored fact is \
clearly wrong or outdated.
"""
