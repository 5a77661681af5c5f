"""`make bench` (and `make bench-large`): start a throw-away embedded PostgreSQL, run each
section on a database of its own, print the figures and write them into docs/benchmarks.md.

    python -m benchmarks.run                 # every section at its documented size
    python -m benchmarks.run --only facts    # one section
    python -m benchmarks.run --quick         # 1/20 of the sizes, a smoke run; docs untouched
    python -m benchmarks.run --large         # the sections that have a large mode (1M rows)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import chunks, facts, search
from benchmarks.harness import (
    ROOT,
    BenchContext,
    BenchServer,
    Section,
    SectionReport,
    ServerInfo,
    describe_code,
    describe_machine,
    describe_server,
)
from benchmarks.report import machine_markdown, section_markdown, section_text, update_docs

SECTIONS: dict[str, Section] = {
    section.name: section for section in (facts.SECTION, chunks.SECTION, search.SECTION)
}
"""Every section, in the order they run; a new one (chunks) is one more module listed here."""

DOCS = ROOT / "docs" / "benchmarks.md"
QUICK_SCALE = 0.05


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--large", action="store_true", help="run the sections that have a large mode, at that size"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(SECTIONS),
        metavar="SECTION",
        help=f"run only this section (repeatable): {', '.join(SECTIONS)}",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"scale every size by {QUICK_SCALE} (smoke run; docs not written)",
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not write {DOCS}")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the page to write")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the temporary server lives (default: the system temp dir)",
    )
    parser.add_argument("--seed", type=int, default=20_240_601, help="seed of the data and calls")
    parser.add_argument(
        "--pg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server parameter for the run (repeatable), e.g. --pg shared_buffers=4GB; "
        "the header prints the parameters in effect",
    )
    return parser.parse_args(argv)


def chosen_sections(args: argparse.Namespace) -> list[Section]:
    names = args.only or list(SECTIONS)
    sections = [SECTIONS[name] for name in names]
    if args.large:
        sections = [section for section in sections if section.supports_large]
    return sections


async def run_sections(
    server: BenchServer, sections: Sequence[Section], args: argparse.Namespace
) -> list[SectionReport]:
    ctx = BenchContext(
        server=server, large=args.large, scale=QUICK_SCALE if args.quick else 1.0, seed=args.seed
    )
    reports = []
    for section in sections:
        report = await section.run(ctx)
        print(section_text(report), flush=True)
        print(flush=True)
        reports.append(report)
    return reports


async def server_info(server: BenchServer) -> ServerInfo:
    conn = await server.connect()
    try:
        return await describe_server(conn)
    finally:
        await conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sections = chosen_sections(args)
    if not sections:
        print(
            "no chosen section has a --large mode yet (the raw-chunks section, 1M chunks over "
            "10k users, is the one meant to)",
            file=sys.stderr,
        )
        return 2
    machine = describe_machine()
    code = describe_code()
    server = BenchServer(args.data_dir, args.pg)
    try:
        info = asyncio.run(server_info(server))
        print(f"machine: {machine.describe()}")
        print(f"server:  {info.describe()}")
        print(f"code:    {code}")
        print(flush=True)
        reports = asyncio.run(run_sections(server, sections, args))
    finally:
        server.stop()
    if args.quick or args.no_docs:
        return 0
    command = "python -m benchmarks.run" + (" --large" if args.large else "")
    blocks = {"machine": ("Machine", machine_markdown(machine, info, command, code))}
    for report in reports:
        blocks[report.name + ("-large" if args.large else "")] = (
            report.title,
            section_markdown(report),
        )
    update_docs(args.docs, blocks)
    print(f"wrote {args.docs.relative_to(ROOT) if args.docs.is_relative_to(ROOT) else args.docs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
