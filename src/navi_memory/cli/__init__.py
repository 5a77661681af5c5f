"""The ``navi-memory`` command: the operator's tool (docs/operations.md shows every command).

Exit codes: 0 done; 1 findings (``doctor``) or a failed operation; 2 a usage or configuration
error, reported as one line on stderr; 130 interrupted; 141 the reader closed stdout.
"""

from __future__ import annotations

from navi_memory.cli.app import app, main

__all__ = ["app", "main"]
