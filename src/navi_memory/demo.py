"""``make demo``: the embedded default brought up, migrated, and navi-memory shown at work.

It talks to the package's fake Ollama (navi_memory.testing) so it runs on any machine;
pass ``--ollama`` to use the OLLAMA_HOST / EMBEDDING_OLLAMA_HOST of your settings instead.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Sequence

from navi_memory.cli import describe
from navi_memory.config import Settings
from navi_memory.errors import NaviMemoryError
from navi_memory.memory import open_memory
from navi_memory.testing import FakeOllama

DEMO_USER = uuid.UUID("00000000-0000-4000-8000-00000000d3e0")


async def run(settings: Settings) -> None:
    async with open_memory(settings) as memory:
        print("== the database")
        for line in await describe(memory):
            print("  " + line)

        print("\n== a user")
        created = await memory.users.ensure(DEMO_USER, "Demo User")
        print(f"  {DEMO_USER} {'created' if created else 'already there'}")

        where = (
            settings.navi_memory_data_dir
            if settings.database_url is None
            else "the server at DATABASE_URL"
        )
        print(f"\nThe data lives in {where}; run `make demo` again and it is reattached.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m navi_memory.demo", description=__doc__)
    parser.add_argument("--ollama", action="store_true", help="use the configured Ollama")
    args = parser.parse_args(argv)
    try:
        if args.ollama:
            asyncio.run(run(Settings()))
        else:
            with FakeOllama() as fake:
                settings = Settings(ollama_host=fake.url, embedding_ollama_host="")
                asyncio.run(run(settings))
    except NaviMemoryError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
