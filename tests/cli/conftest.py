"""Running the installed ``navi-memory`` console script, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

CLI = Path(sys.executable).with_name("navi-memory")

Navi = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def navi(tmp_path: Path) -> Navi:
    """``navi("facts", "list", env={...})``: the console script in a clean environment (nothing
    from the developer's shell or a .env file), in a scratch working directory."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "OLLAMA", "EMBEDDING", "MEMORY_", "BACKFILL", "DB_"))
    }
    base["NAVI_MEMORY_DATA_DIR"] = str(tmp_path / "embedded")

    def run(
        *args: str, env: dict[str, str] | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLI), *args],
            env={**base, **(env or {})},
            cwd=tmp_path,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run
