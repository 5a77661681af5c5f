"""Fake standard outputs for the CLI's output-failure tests."""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Iterable


class FullDisk(io.StringIO):
    """A stdout on a full disk (`> /dev/full`): every write fails with ENOSPC."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writelines(self, lines: Iterable[str], /) -> None:  # type: ignore[override]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class ClosedPipe(io.StringIO):
    """A stdout whose reader has gone (`| head -1` after its line): every write fails with
    EPIPE."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    def writelines(self, lines: Iterable[str], /) -> None:  # type: ignore[override]
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
