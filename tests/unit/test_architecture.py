"""The layer rules of docs/architecture.md: the import contracts in pyproject.toml hold, they
break on a violating import, and no service opens a transaction or writes SQL."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "navi_memory"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

FORBIDDEN_NAMES = frozenset({"unit_of_work", "single_statement", "statement_or_transaction"})
"""What opens a unit of work: a service is given its session or connection instead."""

FORBIDDEN_METHODS = frozenset({"commit", "begin", "rollback", "execute", "scalar", "scalars"})
"""Transaction control, and running a statement of its own: repositories run the SQL."""

SQL_BUILDERS = frozenset({"select", "insert", "update", "delete", "text"})
"""SQLAlchemy's statement builders: SQL is written in repositories only."""


def service_violations(source: str) -> list[str]:
    """What in ``source`` (a module of services/) breaks the services rule, one line each."""
    tree = ast.parse(source)
    found: list[str] = []
    sql_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            for alias in node.names:
                if alias.name in SQL_BUILDERS:
                    sql_aliases.add(alias.asname or alias.name)
                    found.append(f"line {node.lineno}: imports sqlalchemy's {alias.name}")
        if isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                if alias.name.rsplit(".", 1)[-1] in FORBIDDEN_NAMES | {"unit_of_work"}:
                    found.append(f"line {node.lineno}: imports {alias.name}")
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(f"line {node.lineno}: uses {node.id}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS:
                found.append(f"line {node.lineno}: calls .{func.attr}(")
            if isinstance(func, ast.Attribute) and func.attr in SQL_BUILDERS:
                owner = func.value
                if isinstance(owner, ast.Name) and owner.id in {"sqlalchemy", "sa"}:
                    found.append(f"line {node.lineno}: builds SQL with {owner.id}.{func.attr}(")
            if isinstance(func, ast.Name) and func.id in sql_aliases:
                found.append(f"line {node.lineno}: builds SQL with {func.id}(")
    return found


def test_no_service_opens_a_transaction_or_writes_sql() -> None:
    """Every module of services/ passes the AST check (its findings are listed otherwise)."""
    modules = sorted((PACKAGE / "services").glob("*.py"))
    assert len(modules) >= 5
    found = {
        path.name: problems
        for path in modules
        if (problems := service_violations(path.read_text(encoding="utf-8")))
    }
    assert found == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from navi_memory.unit_of_work import unit_of_work\n", "imports"),
        ("async def f(sm):\n    async with unit_of_work(sm) as s:\n        pass\n", "uses"),
        ("async def f(engine):\n    async with single_statement(engine):\n        pass\n", "uses"),
        ("async def f(session):\n    await session.commit()\n", ".commit("),
        ("async def f(session):\n    async with session.begin():\n        pass\n", ".begin("),
        ("from sqlalchemy import func, select\nq = select(func.now())\n", "select"),
        ("from sqlalchemy import text as sql\nq = sql('SELECT 1')\n", "text"),
        ("import sqlalchemy\nq = sqlalchemy.update(object)\n", "sqlalchemy.update("),
        ("async def f(session, stmt):\n    await session.execute(stmt)\n", ".execute("),
    ],
)
def test_the_service_check_catches_each_kind_of_violation(source: str, expected: str) -> None:
    """A service module that opens a transaction or builds SQL is reported by the AST check."""
    problems = service_violations(source)
    assert problems and any(expected in problem for problem in problems)


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
    ],
)
def test_a_violating_import_breaks_its_contract(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    """A copy of the package with one import that breaks a rule fails that contract."""
    copy = tmp_path / "navi_memory"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(
        target.read_text(encoding="utf-8") + f"\n{bad_import}  # noqa\n", encoding="utf-8"
    )
    result = _lint_imports(tmp_path, contract)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
