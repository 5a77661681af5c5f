"""db.translate_driver_error: which driver errors mean "connection lost, safe to call again",
which mean "the outcome is unknown", and which are the server refusing a statement."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError

from navi_memory.db import is_connection_lost, translate_driver_error
from navi_memory.errors import ConnectionLostError, NotFoundError, StorageError

LOST = [
    asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation"),
    asyncpg.exceptions.InterfaceError("connection is closed"),
    ConnectionRefusedError(111, "Connection refused"),
    FileNotFoundError(2, "No such file or directory: '/tmp/.s.PGSQL.5432'"),
    TimeoutError(),
]
REFUSED = [
    asyncpg.exceptions.DataError("invalid input for query argument $1 (value out of range)"),
    asyncpg.exceptions.UniqueViolationError("duplicate key value"),
    asyncpg.exceptions.InterfaceError("cannot perform operation: another operation is in progress"),
]


@pytest.mark.parametrize("error", LOST, ids=lambda e: type(e).__name__)
def test_a_lost_connection_before_the_commit_is_safe_to_call_again(error: Exception) -> None:
    """Killed, reset, refused, not there yet, timed out: ConnectionLostError, a StorageError."""
    assert is_connection_lost(error)
    translated = translate_driver_error(error, None, committing=False)
    assert isinstance(translated, ConnectionLostError)
    assert isinstance(translated, StorageError)
    assert isinstance(translated, ConnectionError)  # `except ConnectionError` catches it
    assert str(translated) and translated.errno is None


@pytest.mark.parametrize("error", LOST, ids=lambda e: type(e).__name__)
def test_a_lost_connection_during_the_commit_says_the_outcome_is_unknown(error: Exception) -> None:
    """The COMMIT was in flight: a plain StorageError, never "safe to retry"."""
    translated = translate_driver_error(error, None, committing=True)
    assert type(translated) is StorageError
    assert "may or may not have taken effect" in str(translated)


@pytest.mark.parametrize("error", REFUSED, ids=lambda e: type(e).__name__)
def test_a_refused_statement_is_a_storage_error_not_a_lost_connection(error: Exception) -> None:
    """The server (or the driver) refused the statement on a healthy connection."""
    assert not is_connection_lost(error)
    assert type(translate_driver_error(error, None, committing=False)) is StorageError


def test_a_wrapped_error_is_classified_by_what_it_wraps() -> None:
    """SQLAlchemy's DBAPIError around a killed connection is a lost connection too."""
    orig = asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")
    wrapped = DBAPIError("SELECT 1", {}, orig)
    assert isinstance(translate_driver_error(wrapped, None, committing=False), ConnectionLostError)


def test_a_missing_user_is_not_found() -> None:
    """A foreign-key violation on user_id names the missing user, not the database."""
    orig = asyncpg.exceptions.ForeignKeyViolationError(
        'insert violates foreign key constraint "fk_user_id"'
    )
    orig.sqlstate = "23503"
    error = IntegrityError("INSERT", {}, orig)
    assert isinstance(translate_driver_error(error, None, committing=False), NotFoundError)


def test_a_missing_user_raised_by_the_driver_itself_is_not_found() -> None:
    """upsert_fact's statement runs straight on asyncpg: its own error, unwrapped, is the
    missing user's NotFoundError as well."""
    error = asyncpg.exceptions.ForeignKeyViolationError(
        'insert or update on table "memory_facts" violates foreign key constraint '
        '"fk_memory_facts_user_id_users"'
    )
    error.sqlstate = "23503"
    assert isinstance(translate_driver_error(error, None, committing=False), NotFoundError)


def test_another_foreign_key_in_a_statement_naming_user_id_is_not_a_missing_user() -> None:
    """Only the driver's message counts: SQLAlchemy's wrapper carries the statement's text,
    which may name user_id where the violated key is another one."""
    orig = asyncpg.exceptions.ForeignKeyViolationError(
        'insert or update on table "session_messages" violates foreign key constraint '
        '"fk_session_messages_session_id_sessions"'
    )
    orig.sqlstate = "23503"
    error = IntegrityError(
        "INSERT INTO session_messages (session_id, seq) SELECT :sid, 1 WHERE :user_id IS NOT NULL",
        {"user_id": "u"},
        orig,
    )
    assert type(translate_driver_error(error, None, committing=False)) is StorageError


@pytest.mark.parametrize("error", LOST, ids=lambda e: type(e).__name__)
def test_a_lost_connection_during_the_commit_of_a_read_is_safe_to_call_again(
    error: Exception,
) -> None:
    """A transaction that only read (unit_of_work(..., read_only=True)) wrote nothing: whether
    its COMMIT landed does not matter, so a loss there is a ConnectionLostError too."""
    translated = translate_driver_error(error, None, committing=True, read_only=True)
    assert isinstance(translated, ConnectionLostError)
    assert "nothing was written" in str(translated)
    wrapped = DBAPIError("COMMIT", {}, error)
    assert isinstance(
        translate_driver_error(wrapped, None, committing=True, read_only=True),
        ConnectionLostError,
    )
