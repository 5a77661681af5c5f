"""navi_memory.text: the curated public names are exactly what the package re-exports."""

from __future__ import annotations

from types import ModuleType

import navi_memory.text as text


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(text).items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and name != "annotations"
    }
    assert set(text.__all__) == public
    assert sorted(text.__all__) == text.__all__


def test_every_exported_name_resolves() -> None:
    assert all(getattr(text, name) is not None for name in text.__all__)
