"""Background work yields the CPU: the server processes of the indexers' connections run at a
lower priority (a higher ``nice``) when the database server runs on this machine.

PostgreSQL has no CPU priorities of its own: every connection is a server process that the
kernel schedules like any other. On a small machine the chunk indexer's processes (HNSW and
GIN inserts, ~2 ms of CPU a chunk) then take as much CPU as a search's, and a burst of writes
multiplies search latency by the number of busy processes per core. Raising their ``nice``
makes the kernel give the searches and the writes the CPU first and the indexers what is left;
on an idle machine nothing changes. The same as the ``pg_prioritize`` extension's
``set_backend_priority``, from the client side.

Only a server process this process can prove is a backend of the server it connected to is
touched: the server's ``data_directory`` must exist here, and its ``postmaster.pid`` must name
the process's parent. A server elsewhere (another host, a container with its own process ids)
or a process this user may not renice is left as it is.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["lower_backend_priority"]

logger = logging.getLogger(__name__)

_warned: set[str] = set()


def lower_backend_priority(pid: int, data_directory: str | None, nice: int) -> bool:
    """Raise the niceness of server process ``pid`` to ``nice`` (never lower it) when it is a
    backend of the server whose data directory is ``data_directory`` on this machine; returns
    whether it now runs at ``nice`` or nicer. ``nice`` 0, another machine's server, or a
    process this user may not renice: False, and nothing is changed."""
    if nice <= 0 or not data_directory or not sys.platform.startswith("linux"):
        return False
    try:
        postmaster = int((Path(data_directory) / "postmaster.pid").read_text().split("\n", 1)[0])
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, the rest not.
        stat = Path(f"/proc/{pid}/stat").read_text()
        parent = int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False  # not this machine's server, or not readable by this user
    if parent != postmaster:
        return False
    try:
        if os.getpriority(os.PRIO_PROCESS, pid) < nice:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:
        if data_directory not in _warned:
            _warned.add(data_directory)
            logger.info(
                "db.indexer_nice_refused: cannot lower the CPU priority of the server's "
                "indexer processes (%s); they keep the searches' priority (INDEXER_NICE=0 "
                "silences this)",
                exc,
                extra={"event": "db.indexer_nice_refused"},
            )
        return False
    return True
