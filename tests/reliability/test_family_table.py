"""docs/reliability.md's input family × entry point table is what the code does (make soak)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from navi_memory import Memory
from tests.reliability.family_table import markdown, measure
from tests.reliability.world import World

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BLOCK = re.compile(r"(<!-- family-table -->\n)(.*?)(\n<!-- /family-table -->)", re.S)


@pytest.mark.soak
async def test_the_family_table_in_the_docs_is_measured(shared: tuple[Memory, World]) -> None:
    """Every cell of the committed table equals the outcomes measured now, and no outcome is
    anything but a navi_memory error or success."""
    memory, world = shared
    table = await measure(memory, world)
    assert not [cell for row in table.values() for cell in row.values() if "RAW" in cell]
    measured = markdown(table)
    text = DOC.read_text(encoding="utf-8")
    if os.environ.get("NAVI_WRITE_FAMILY_TABLE") == "1":
        DOC.write_text(BLOCK.sub(lambda m: m[1] + measured + m[3], text), encoding="utf-8")
    match = BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert match is not None, "docs/reliability.md lost its family-table markers"
    assert match[2] == measured
