"""doctor's model checks word their fix sensibly when a setting is empty (an empty
OLLAMA_HOST is the default: tests/unit/test_load_settings.py)."""

from __future__ import annotations

from typing import Any

import pytest

from navi_memory.cli.doctor import _chat_check, _embedding_check
from navi_memory.config import Settings


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"embedding_model": ""}, "set EMBEDDING_MODEL to "),
        ({"memory_llm_model": ""}, "set MEMORY_LLM_MODEL to "),
    ],
)
async def test_an_empty_host_or_model_is_named_in_the_fix_not_left_blank(
    overrides: dict[str, Any], named: str
) -> None:
    settings = Settings(
        _env_file=None,
        embedding_ollama_host="",
        embedding_timeout_seconds=0.5,
        memory_llm_timeout_seconds=0.5,
        **overrides,
    )
    checks = [await _embedding_check(settings), await _chat_check(settings)]
    fixes = [check.fix or "" for check in checks if check.status == "finding"]
    assert any(named in fix for fix in fixes), fixes
    for fix in fixes:
        assert "at  " not in fix and "pull `" not in fix and "``" not in fix


def test_doctor_shows_the_embedded_data_directory_expanded() -> None:
    """A '~' reaches the settings unexpanded from a .env file: doctor printed "data in
    ~/nm data/pgdata" where `navi-memory server status` printed the expanded path."""
    from pathlib import Path

    from navi_memory.cli.doctor import _where

    settings = Settings(_env_file=None, navi_memory_data_dir="~/nm data")
    assert _where(settings) == f"embedded, data in {Path.home() / 'nm data' / 'pgdata'}"
