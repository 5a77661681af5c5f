"""Database faults on demand: backends terminated at random moments, a connection killed while
the pool opens it, and a server restart. Each acts from outside, as an operator or a crash would."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Iterator
from typing import Final

from tests.dbtools import EmbeddedServer

APPLICATION_NAME: Final = "navi-memory"
"""What every connection of a navi-memory engine reports in pg_stat_activity."""

_OURS: Final = (
    "SELECT pid FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()"
)


class BackendKiller:
    """Terminates navi-memory's backends of one database, one at a time, at random moments.

    A thread of its own, so the kills land wherever the event loop happens to be: in a
    statement, between two, during a commit or while the pool is opening a connection.
    ``pause`` is the longest wait between two kills (drawn uniformly from 0 to it)."""

    def __init__(
        self, server: EmbeddedServer, dbname: str, *, seed: int, pause: float = 0.02
    ) -> None:
        self._server = server
        self._dbname = dbname
        self._random = random.Random(seed)
        self._pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backend-killer", daemon=True)
        self.kills = 0

    def __enter__(self) -> BackendKiller:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    async def __aenter__(self) -> BackendKiller:
        return self.__enter__()

    async def __aexit__(self, *_exc: object) -> None:
        """Stop without blocking the event loop, then let it run a moment: a backend killed
        while its connection sat idle in the pool is then known closed and replaced at the next
        checkout. (``with`` joined the thread on the loop itself: the next call could check out
        a connection whose end the loop had not yet read, and fail once — a ConnectionLostError
        the package documents as safe to retry, not the fault the test is after.)"""
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
        await asyncio.sleep(0.1)

    def _run(self) -> None:
        with self._server.admin(self._dbname) as conn:
            while not self._stop.wait(self._random.uniform(0, self._pause)):
                pids = [row[0] for row in conn.execute(_OURS, (APPLICATION_NAME,)).fetchall()]
                if pids:
                    victim = self._random.choice(pids)
                    conn.execute("SELECT pg_terminate_backend(%s)", (victim,))
                    self.kills += 1


@contextlib.contextmanager
def kill_while_connecting(server: EmbeddedServer, dbname: str) -> Iterator[list[str]]:
    """Kill the next navi-memory connection while it is being set up by the pool.

    Holds an exclusive lock on pg_extension, which the vector-codec registration of every new
    connection reads: the new backend waits on it, and is terminated while it waits. Yields a
    list that receives the statement the victim was running."""
    victims: list[str] = []
    holder = server.admin(dbname)
    holder.autocommit = False
    holder.execute("LOCK TABLE pg_catalog.pg_extension IN ACCESS EXCLUSIVE MODE")
    done = threading.Event()

    def kill() -> None:
        with server.admin(dbname) as conn:
            while not done.wait(0.005):
                row = conn.execute(
                    "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = %s AND wait_event_type = 'Lock'",
                    (APPLICATION_NAME,),
                ).fetchone()
                if row is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    victims.append(row[1])
                    return

    thread = threading.Thread(target=kill, name="connect-killer", daemon=True)
    thread.start()
    try:
        yield victims
    finally:
        done.set()
        thread.join()
        holder.rollback()
        holder.close()


def terminate_all(server: EmbeddedServer, dbname: str) -> int:
    """Terminate every navi-memory backend of ``dbname`` now; returns how many."""
    with server.admin(dbname) as conn:
        pids = [row[0] for row in conn.execute(_OURS, (APPLICATION_NAME,)).fetchall()]
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(pids)
