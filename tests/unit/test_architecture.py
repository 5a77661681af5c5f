"""The layer rules of docs/architecture.md: the import contracts in pyproject.toml hold, they
break on a violating import, no service opens a transaction, and nothing above the repositories
(services, facades, jobs, tools) writes or runs SQL."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "navi_memory"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

SQL_LAYERS = ("services", "facades", "jobs", "tools")
"""The folders above the repositories: none of them writes or runs SQL."""

SQLALCHEMY_ALLOWED = frozenset({"sqlalchemy.ext.asyncio", "sqlalchemy.exc"})
"""What of SQLAlchemy a module above the repositories may import: the session, connection and
engine types it passes down (and async_sessionmaker, for a facade's own unit of work), and the
exceptions. The rest of SQLAlchemy (``sqlalchemy`` itself, ``sqlalchemy.sql``, ``func``,
``text``, ``literal_column``, the dialects, the ORM) builds SQL."""

DRIVER_PACKAGES = frozenset({"sqlalchemy", "asyncpg", "psycopg", "psycopg2", "pgvector"})
"""The database packages: above the repositories, only SQLALCHEMY_ALLOWED of them is imported."""

SQL_HELPERS = frozenset({"statement", "fetch_rows", "queue_pop", "owner_where"})
"""What repositories/statements.py builds or runs SQL with (its types, ``Reads`` and
``FetchedRow``, may be imported)."""

RUNS_SQL_METHODS = frozenset(
    {
        "execute",
        "executemany",
        "exec_driver_sql",
        "scalar",
        "scalars",
        "stream",
        "stream_scalars",
        "fetch",
        "fetchrow",
        "fetchval",
        "fetch_rows",
    }
)
"""Running a statement: on a session, a connection, PooledStatements (``reads.fetch(sql)``) or
an asyncpg connection. Repositories run the SQL."""

ORM_METHODS = frozenset(
    {"add", "add_all", "flush", "delete", "merge", "refresh", "run_sync", "get", "get_one"}
)
"""The ORM's ways to write or read rows, on a session or connection (``session.add(row)``,
``session.get(FactRow, 1)``, ``conn.run_sync(fn)``): SQL all the same."""

SESSION_NAMES = frozenset({"session", "sess", "conn", "connection"})
"""What a session or a connection is called where it is passed in: the receivers ORM_METHODS
are looked for on (``dict.get`` and ``list.add`` elsewhere are not SQL)."""

SQL_TEXT = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\S+\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s*\("
    r"|MERGE\s+INTO\s|CREATE\s|DROP\s|ALTER\s|TRUNCATE\s|LOCK\s+TABLE\s|SET\s+(LOCAL\s+)?\w+)"
)
"""A string that is an SQL statement (upper-case keywords, as the repositories write them)."""

FORBIDDEN_NAMES = frozenset(
    {
        "unit_of_work",
        "single_statement",
        "statement_or_transaction",
        "LaneEngines",
        "PooledStatements",
        "engine_of",
    }
)
"""What opens a unit of work or a connection: a service is given its session or connection
instead."""

FORBIDDEN_MODULES = frozenset({"unit_of_work", "db"})
"""navi_memory's modules that open transactions and connections: no service imports them."""

FORBIDDEN_METHODS = frozenset(
    {
        "commit",
        "begin",
        "begin_nested",
        "begin_twophase",
        "rollback",
        "connect",
        "execution_options",
    }
)
"""Transaction control and opening a connection: a service runs inside what it is given."""

CONNECTION_FACTORIES = frozenset(
    {
        "PooledStatements",
        "AsyncSession",
        "AsyncConnection",
        "async_sessionmaker",
        "sessionmaker",
        "create_async_engine",
        "create_engine",
        "create_sessionmaker",
    }
)
"""Constructors of a session, a connection, an engine or pooled statements."""


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain on a name (``?`` for what is not a name)."""
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return "?"


def _string_text(node: ast.Constant | ast.JoinedStr) -> str | None:
    """The text of a string literal; an f-string's with ``x`` for each placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(part.value) if isinstance(part, ast.Constant) else "x" for part in node.values
        )
    return None


def _is_driver_module(module: str) -> bool:
    """Whether ``module`` (or ``module.name`` of a from-import) is a database package's, other
    than what SQLALCHEMY_ALLOWED lets through."""
    return module.split(".", 1)[0] in DRIVER_PACKAGES and not any(
        module == allowed or module.startswith(f"{allowed}.") for allowed in SQLALCHEMY_ALLOWED
    )


def sql_violations(source: str) -> list[str]:
    """Where ``source`` (a module of services/, facades/, jobs/ or tools/) writes or runs SQL,
    one line each: SQLAlchemy's statement builders or a driver imported, a call on them, a
    statement run on a session, connection or PooledStatements, the SQL helpers of
    repositories/statements.py, an SQL string, or a dynamic import (which no check could see)."""
    tree = ast.parse(source)
    found: list[str] = []
    sql_roots = {"sqlalchemy", "sa", "asyncpg"} | (SQL_HELPERS - {"statement"})
    statements_modules: set[str] = set()
    bare_strings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_driver_module(alias.name):
                    found.append(f"line {node.lineno}: imports {alias.name}")
                    sql_roots.add(alias.asname or alias.name.split(".", 1)[0])
                if alias.name.endswith("repositories.statements"):
                    statements_modules.add(alias.asname or alias.name)
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                bound = alias.asname or alias.name
                if _is_driver_module(f"{module}.{alias.name}" if module else alias.name):
                    found.append(f"line {node.lineno}: imports {module}'s {alias.name}")
                    sql_roots.add(bound)
                elif module.endswith("statements") and alias.name in SQL_HELPERS:
                    found.append(f"line {node.lineno}: imports the SQL helper {alias.name}")
                    sql_roots.add(bound)
                elif module.endswith("repositories") and alias.name == "statements":
                    statements_modules.add(bound)
        if isinstance(node, ast.Call):
            func = node.func
            name = _dotted(func)
            if isinstance(func, ast.Attribute) and func.attr in RUNS_SQL_METHODS:
                found.append(f"line {node.lineno}: runs a statement with .{func.attr}(")
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in ORM_METHODS
                and _dotted(func.value).rsplit(".", 1)[-1] in SESSION_NAMES
            ):
                found.append(f"line {node.lineno}: uses the ORM with {name}(")
            elif name.split(".", 1)[0] in sql_roots:
                found.append(f"line {node.lineno}: builds SQL with {name}(")
            elif isinstance(func, ast.Attribute) and func.attr in SQL_HELPERS:
                owner = _dotted(func.value)
                if owner in statements_modules or owner.endswith("repositories.statements"):
                    found.append(f"line {node.lineno}: builds SQL with {name}(")
            if name in {"__import__", "import_module", "importlib.import_module"}:
                found.append(f"line {node.lineno}: imports dynamically with {name}(")
        if isinstance(node, ast.Constant | ast.JoinedStr) and id(node) not in bare_strings:
            text = _string_text(node)
            if text is not None and SQL_TEXT.match(text):
                found.append(f"line {node.lineno}: holds SQL text {text.strip()[:30]!r}")
    return found


def transaction_violations(source: str) -> list[str]:
    """Where ``source`` (a module of services/) opens a unit of work, a transaction or a
    connection, or imports what does, one line each. Facades and jobs may: they open the units
    of work."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                last = alias.name.rsplit(".", 1)[-1]
                own = alias.name.startswith("navi_memory.")
                if last in FORBIDDEN_NAMES or (own and last in FORBIDDEN_MODULES):
                    found.append(f"line {node.lineno}: imports {alias.name}")
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            own = node.level > 0 or module.startswith("navi_memory")
            if own and module.rsplit(".", 1)[-1] in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: imports from {module}")
            for alias in node.names:
                if alias.name in FORBIDDEN_NAMES or (own and alias.name in FORBIDDEN_MODULES):
                    found.append(f"line {node.lineno}: imports {alias.name}")
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(f"line {node.lineno}: uses {node.id}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS:
                found.append(f"line {node.lineno}: calls .{func.attr}(")
            called = func.attr if isinstance(func, ast.Attribute) else _dotted(func)
            if called in CONNECTION_FACTORIES:
                found.append(f"line {node.lineno}: opens a connection with {called}(")
    return found


def service_violations(source: str) -> list[str]:
    """What in ``source`` (a module of services/) breaks the services rule, one line each."""
    return transaction_violations(source) + sql_violations(source)


def _modules_of(folder: str) -> list[Path]:
    """The modules of ``folder`` (of the package), its subpackages' included."""
    return sorted((PACKAGE / folder).rglob("*.py"))


def test_no_service_opens_a_transaction_or_writes_sql() -> None:
    """Every module of services/ passes the AST check (its findings are listed otherwise)."""
    modules = _modules_of("services")
    assert len(modules) >= 5
    found = {
        path.name: problems
        for path in modules
        if (problems := service_violations(path.read_text(encoding="utf-8")))
    }
    assert found == {}


@pytest.mark.parametrize("folder", SQL_LAYERS)
def test_no_layer_above_the_repositories_writes_sql(folder: str) -> None:
    """Every module of services/, facades/, jobs/ and tools/ passes the SQL part of the check."""
    modules = _modules_of(folder)
    assert len(modules) >= 3
    found = {
        str(path.relative_to(PACKAGE)): problems
        for path in modules
        if (problems := sql_violations(path.read_text(encoding="utf-8")))
    }
    assert found == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from navi_memory.unit_of_work import unit_of_work\n", "imports"),
        ("import navi_memory.unit_of_work\n", "imports navi_memory.unit_of_work"),
        ("from navi_memory import db\n", "imports db"),
        ("from navi_memory.db import PooledStatements\n", "imports PooledStatements"),
        ("from navi_memory.db import vector_binary\n", "imports from navi_memory.db"),
        ("from ..db import vector_binary\n", "imports from db"),
        ("import navi_memory.db as database\n", "imports navi_memory.db"),
        ("async def f(sm):\n    async with unit_of_work(sm) as s:\n        pass\n", "uses"),
        ("async def f(engine):\n    async with single_statement(engine):\n        pass\n", "uses"),
        ("async def f(session):\n    await session.commit()\n", ".commit("),
        ("async def f(session):\n    async with session.begin():\n        pass\n", ".begin("),
        ("async def f(s):\n    async with s.begin_nested():\n        pass\n", ".begin_nested("),
        (
            "async def f(engine):\n    async with engine.connect() as c:\n        pass\n",
            ".connect(",
        ),
        ("async def f(engine):\n    reads = PooledStatements(engine)\n", "PooledStatements("),
        ("async def f(e):\n    s = db.PooledStatements(e, hold=True)\n", "PooledStatements("),
        ("def f(e):\n    return async_sessionmaker(e)\n", "async_sessionmaker("),
        ("def f(e):\n    return e.execution_options(isolation_level='SERIALIZABLE')\n", "options("),
        ("from sqlalchemy import func, select\nq = select(func.now())\n", "select"),
        ("from sqlalchemy import text as sql\nq = sql('SELECT 1')\n", "text"),
        ("import sqlalchemy\nq = sqlalchemy.update(object)\n", "sqlalchemy.update("),
        ("async def f(session, stmt):\n    await session.execute(stmt)\n", ".execute("),
    ],
)
def test_the_service_check_catches_each_kind_of_violation(source: str, expected: str) -> None:
    """A service module that opens a transaction or builds SQL is reported by the AST check."""
    problems = service_violations(source)
    assert problems and any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("async def f(conn):\n    await conn.exec_driver_sql('SELECT 1')\n", ".exec_driver_sql("),
        ("async def f(session, row):\n    session.add(row)\n", "session.add("),
        ("async def f(self):\n    await self.session.flush()\n", "self.session.flush("),
        ("async def f(session, M):\n    return await session.get(M, 1)\n", "session.get("),
        ("async def f(session, row):\n    await session.delete(row)\n", "session.delete("),
        ("async def f(conn, fn):\n    await conn.run_sync(fn)\n", "conn.run_sync("),
        ("import sqlalchemy as sql\nq = sql.text('SELECT 1')\n", "sql.text("),
        ("import sqlalchemy as sql\n", "imports sqlalchemy"),
        ("from sqlalchemy import sql\nq = sql.text('x')\n", "sql.text("),
        ("from sqlalchemy import sql\n", "imports sqlalchemy's sql"),
        ("from sqlalchemy.sql.expression import text\n", "sqlalchemy.sql.expression's text"),
        ("from sqlalchemy.sql import expression\nq = expression.true()\n", "expression.true("),
        ("from sqlalchemy import literal_column\nc = literal_column('1')\n", "literal_column("),
        ("from sqlalchemy import func\nnow = func.now()\n", "func.now("),
        ("from sqlalchemy import event\n", "imports sqlalchemy's event"),
        ("from sqlalchemy.orm import Session\n", "imports sqlalchemy.orm's Session"),
        ("from sqlalchemy.dialects.postgresql import insert\n", "postgresql's insert"),
        ("import asyncpg\n", "imports asyncpg"),
        ("async def f(reads):\n    return await reads.fetch('SELECT 1', [])\n", ".fetch("),
        ("async def f(conn):\n    return await conn.fetchrow('SELECT 1')\n", ".fetchrow("),
        ("async def f(s, q):\n    return await s.scalars(q)\n", ".scalars("),
        ("from navi_memory.repositories.statements import fetch_rows\n", "helper fetch_rows"),
        ("from navi_memory.repositories.statements import statement\n", "helper statement"),
        ("from .statements import queue_pop as pop\nsql = pop('q', 'id', 'p')\n", "pop("),
        ("async def f(reads, q):\n    return await fetch_rows(reads, q, {})\n", "fetch_rows("),
        (
            "from navi_memory.repositories import statements as st\nq = st.statement('x')\n",
            "st.statement(",
        ),
        (
            "import navi_memory.repositories.statements as st\nq = st.owner_where('f', 1, 2, {})\n",
            "st.owner_where(",
        ),
        ("Q = 'SELECT id FROM memory_facts'\n", "SQL text"),
        ("def f(x):\n    return g(x, 'DELETE FROM kv_store WHERE id = :id')\n", "SQL text"),
        ("def f(x, t):\n    return g(x, f'UPDATE {t} SET value = :v')\n", "SQL text"),
        ("import importlib\nm = importlib.import_module('sqlalchemy')\n", "dynamically"),
        ("m = __import__('sqlalchemy')\n", "dynamically"),
    ],
)
def test_the_sql_check_catches_each_kind_of_sql(source: str, expected: str) -> None:
    """SQL written or run in services/, facades/, jobs/ or tools/ is reported, by the SQL check
    and by the services check."""
    for problems in (sql_violations(source), service_violations(source)):
        assert problems and any(expected in problem for problem in problems), problems


FACADE_SOURCE = '''
"""A facade: SELECT is a word its docstrings may use."""
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.repositories.statements import FetchedRow, Reads
from navi_memory.unit_of_work import LaneEngines, engine_of, statement_or_transaction, unit_of_work

SNAPSHOT = "REPEATABLE READ"
"""SELECT ... FOR UPDATE in an attribute docstring is prose too."""


class Store:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker
        self._snapshot = async_sessionmaker(
            engine_of(sessionmaker).execution_options(isolation_level=SNAPSHOT)
        )
        self._engines = LaneEngines(engine_of(sessionmaker), False)

    async def delete(self, key: str) -> bool:
        async with unit_of_work(self._sessionmaker) as session:
            return await self._facts.delete(session, key)

    async def add(self, key: str) -> None:
        async with statement_or_transaction(self._sessionmaker, True) as reads:
            await self._facts.add(reads, key)
        self._counts.update({key: 1})
'''
"""What a facade or a job does: open units of work and snapshots, hold the session types."""


def test_a_dict_get_or_a_set_add_is_not_the_orm() -> None:
    """ORM_METHODS are looked for on sessions and connections only."""
    source = "def f(rows, seen):\n    seen.add(1)\n    return rows.get('k')\n"
    assert sql_violations(source) == []


def test_the_sql_check_finds_the_sql_of_the_repositories() -> None:
    """The SQL check, run where SQL belongs, finds it: it is not blind to the project's SQL."""
    for name in ("facts.py", "chunks.py", "sessions.py", "statements.py", "vectors.py"):
        source = (PACKAGE / "repositories" / name).read_text(encoding="utf-8")
        assert sql_violations(source), name


def test_opening_units_of_work_is_not_sql() -> None:
    """The SQL check passes what facades and jobs do, which the services rule refuses."""
    assert sql_violations(FACADE_SOURCE) == []
    assert len(transaction_violations(FACADE_SOURCE)) >= 5


def test_the_independence_contract_takes_every_facade() -> None:
    """facades-independent names facades/ by a wildcard, not by a list to keep up to date."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {
        contract["id"]: contract for contract in config["tool"]["importlinter"]["contracts"]
    }
    assert contracts["facades-independent"]["modules"] == ["navi_memory.facades.*"]


def _lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    args = [str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"]
    for contract in contracts:
        args += ["--contract", contract]
    # The package under check is the first navi_memory on the path: the copy in cwd, if any.
    env = {"PYTHONPATH": str(cwd), "PATH": str(Path(sys.executable).parent)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_the_import_contracts_hold() -> None:
    """lint-imports keeps every contract of pyproject.toml on the package as it is."""
    result = _lint_imports(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


TOOLS_CONTRACT = "tools-on-facades-and-services"


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        ("facades/kv.py", "import navi_memory.repositories.kv", "facades-not-sql"),
        ("facades/store.py", "import navi_memory.models", "facades-not-sql"),
        ("facades/kv.py", "import navi_memory.facades.sessions", "facades-independent"),
        ("services/facts.py", "import navi_memory.unit_of_work", "services-no-transactions"),
        ("services/chunks.py", "import navi_memory.facades.store", "layers"),
        ("services/kv.py", "import navi_memory.jobs.backfill", "layers"),
        ("repositories/users.py", "import navi_memory.services.users", "layers"),
        ("schemas.py", "import navi_memory.memory", "nothing-imports-memory"),
        # A facade module added later is covered too (facades/notes.py does not exist).
        ("facades/notes.py", "import navi_memory.facades.store", "facades-independent"),
        ("facades/notes.py", "from navi_memory.facades import kv", "facades-independent"),
        ("services/facts.py", "import navi_memory.db", "services-no-db"),
        ("services/search.py", "from navi_memory.db import PooledStatements", "services-no-db"),
        ("services/kv.py", "from navi_memory import db", "services-no-db"),
        (
            "tools/memory.py",
            "import navi_memory.repositories.facts",
            "tools-on-facades-and-services",
        ),
        ("tools/memory.py", "import navi_memory.models", "tools-on-facades-and-services"),
        ("tools/memory.py", "import navi_memory.unit_of_work", "tools-on-facades-and-services"),
        ("tools/base.py", "import navi_memory.db", "tools-on-facades-and-services"),
        ("text/hits.py", "import navi_memory.services.search", "side-modules-import-no-layer"),
        ("schemas.py", "import navi_memory.repositories.facts", "side-modules-import-no-layer"),
        ("llm/chat.py", "import navi_memory.facades.store", "side-modules-import-no-layer"),
        ("constants.py", "import navi_memory.jobs.backfill", "side-modules-import-no-layer"),
        ("errors.py", "import navi_memory.models", "side-modules-import-no-layer"),
        ("validation.py", "import navi_memory.tools", "side-modules-import-no-layer"),
        ("config.py", "import navi_memory.cli", "side-modules-import-no-layer"),
        ("request_context.py", "import navi_memory.demo", "side-modules-import-no-layer"),
        ("embedded.py", "import navi_memory.services", "side-modules-import-no-layer"),
        # Indirect imports count: memory.py is not forbidden here, but the facades it imports are.
        ("constants.py", "import navi_memory.memory", "side-modules-import-no-layer"),
        ("unit_of_work.py", "import navi_memory.jobs.backfill", "transactions-import-no-layer"),
        ("unit_of_work.py", "import navi_memory.tools", "transactions-import-no-layer"),
        ("db.py", "import navi_memory.services.facts", "transactions-import-no-layer"),
        ("db.py", "import navi_memory.facades.admin", "transactions-import-no-layer"),
    ],
)
def test_a_violating_import_breaks_its_contract(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    """A copy of the package with one import that breaks a rule fails that contract."""
    copy = tmp_path / "navi_memory"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    original = target.read_text(encoding="utf-8") if target.exists() else '"""A new module."""\n'
    target.write_text(original + f"\n{bad_import}  # noqa\n", encoding="utf-8")
    result = _lint_imports(tmp_path, contract)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
