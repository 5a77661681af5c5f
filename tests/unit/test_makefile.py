"""The docs promise `make X` for some operator commands: the Makefile must have those targets,
and each must run the command the docs name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _recipes() -> dict[str, list[str]]:
    recipes: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("\t") and current is not None:
            current.append(line.strip())
            continue
        match = re.match(r"^([A-Za-z_-]+):(?!=)", line)
        current = recipes.setdefault(match.group(1), []) if match else None
    return recipes


def _documented() -> set[tuple[str, str]]:
    """(command, target) for every `navi-memory CMD ... # = make TARGET` and
    "`navi-memory CMD ...` (= `make TARGET`)" in docs/."""
    pairs: set[tuple[str, str]] = set()
    for page in (ROOT / "docs").glob("*.md"):
        text = page.read_text()
        for cmd, target in re.findall(r"navi-memory (\w[\w-]*)[^\n]*?# = make (\w[\w-]*)", text):
            pairs.add((cmd, target))
        for cmd, target in re.findall(
            r"`navi-memory (\w[\w-]*)[^`]*` \(= `make (\w[\w-]*)`\)", text
        ):
            pairs.add((cmd, target))
    return pairs


def test_the_documented_make_targets_exist_and_run_their_command() -> None:
    recipes = _recipes()
    documented = _documented()
    assert ("reembed", "reembed") in documented  # the embedding-model change procedure
    for cmd, target in sorted(documented):
        assert target in recipes, f"docs name `make {target}`, the Makefile has no such target"
        assert f"$(BIN)/navi-memory {cmd}" in recipes[target], (target, recipes[target])


def test_every_operator_job_has_a_make_target() -> None:
    recipes = _recipes()
    for cmd in ("backfill", "reembed", "extract", "doctor"):
        assert recipes.get(cmd) == [f"$(BIN)/navi-memory {cmd}"], cmd
