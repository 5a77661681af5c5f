"""Tenancy rules of DESIGN.md: who a user_id=None call means, and what needs read_all."""

from __future__ import annotations

import uuid

import pytest

from navi_memory import PERMISSION_READ_ALL, PermissionDeniedError, request_context
from navi_memory.errors import InvalidTypeError
from navi_memory.request_context import current_user_id, read_scope, write_scope

ALICE, BOB = uuid.uuid4(), uuid.uuid4()


def test_none_means_the_current_user_for_reads_and_writes() -> None:
    with request_context(user_id=ALICE):
        assert read_scope(None) == ALICE
        assert write_scope(None) == ALICE
    assert current_user_id() is None


def test_a_write_without_any_user_is_refused() -> None:
    with pytest.raises(PermissionDeniedError, match="no user for this write"):
        write_scope(None)


def test_a_global_read_needs_read_all() -> None:
    with pytest.raises(PermissionDeniedError, match=PERMISSION_READ_ALL):
        read_scope(None)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert read_scope(None) is None


def test_acting_for_one_user_never_reads_or_writes_another() -> None:
    with request_context(user_id=ALICE):
        with pytest.raises(PermissionDeniedError):
            read_scope(BOB)
        with pytest.raises(PermissionDeniedError):
            write_scope(BOB)
    with request_context(user_id=ALICE, permissions=[PERMISSION_READ_ALL]):
        assert read_scope(BOB) == BOB


def test_user_ids_must_be_uuids() -> None:
    assert read_scope(str(ALICE)) == ALICE
    with pytest.raises(InvalidTypeError, match="UUID"):
        read_scope("alice")
    with pytest.raises(InvalidTypeError, match="UUID"):
        write_scope(42)  # type: ignore[arg-type]
