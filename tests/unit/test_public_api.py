"""The public surface: what `import navi_memory` gives, and the error tree's built-in bases."""

from __future__ import annotations
import __future__

import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import get_type_hints

import navi_memory
import navi_memory.facades
from navi_memory import errors


def _public_names(module: ModuleType) -> set[str]:
    """The names a module's namespace offers: not private, not a module, not a __future__ flag."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and not isinstance(value, __future__._Feature)
    }


def test_all_is_exactly_the_public_namespace() -> None:
    """__all__ lists every public name of the package namespace, each once, and nothing else."""
    assert len(navi_memory.__all__) == len(set(navi_memory.__all__))
    assert set(navi_memory.__all__) == _public_names(navi_memory)


def test_every_exported_name_imports() -> None:
    """`from navi_memory import X` works for every X in __all__."""
    namespace: dict[str, object] = {}
    exec(f"from navi_memory import {', '.join(navi_memory.__all__)}", namespace)
    assert all(namespace[name] is getattr(navi_memory, name) for name in navi_memory.__all__)


def _facade_modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"navi_memory.facades.{info.name}")
        for info in pkgutil.iter_modules(navi_memory.facades.__path__)
    ]


def test_every_facade_is_reachable_from_the_package() -> None:
    """Each public class or function of facades/ is exported by navi_memory or is the type of a
    Memory attribute: a caller never imports a facade module."""
    reachable = {id(getattr(navi_memory, name)) for name in navi_memory.__all__}
    reachable |= {id(kind) for kind in get_type_hints(navi_memory.Memory).values()}
    modules = _facade_modules()
    assert {m.__name__.rsplit(".", 1)[-1] for m in modules} >= {"kv", "sessions", "store", "users"}
    unreachable = [
        f"{module.__name__}.{name}"
        for module in modules
        for name in module.__all__
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and id(obj) not in reachable
    ]
    assert unreachable == []


def test_each_facade_module_exports_what_it_defines() -> None:
    """A facade module's __all__ names exactly the public classes and functions defined in it."""
    for module in _facade_modules():
        defined = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and (inspect.isclass(value) or inspect.isfunction(value))
            and value.__module__ == module.__name__
        }
        assert set(module.__all__) == defined, module.__name__


def test_every_error_is_a_navi_memory_error_with_the_matching_builtin() -> None:
    """Each error subclasses NaviMemoryError, and the leaves also their built-in kin."""
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.NaviMemoryError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.InvalidTypeError, TypeError)
    assert issubclass(errors.PermissionDeniedError, PermissionError)
    assert issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.ConnectionLostError, ConnectionError)


def test_extractor_is_public_with_the_calls_the_spec_names() -> None:
    """memory.extractor is an Extractor offering process_stale_sessions(user_id=None, *,
    limit=None) and extract_session(session_id); its report type is exported."""
    assert get_type_hints(navi_memory.Memory)["extractor"] is navi_memory.Extractor
    sweep = inspect.signature(navi_memory.Extractor.process_stale_sessions).parameters
    assert sweep["user_id"].default is None
    assert sweep["user_id"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert (sweep["limit"].default, sweep["limit"].kind) == (None, inspect.Parameter.KEYWORD_ONLY)
    one = inspect.signature(navi_memory.Extractor.extract_session).parameters
    assert list(one)[:2] == ["self", "session_id"]
    assert set(navi_memory.ExtractionReport.model_fields) >= {
        "sessions_seen",
        "sessions_extracted",
        "facts_written",
        "facts_merged",
        "facts_skipped",
        "failures",
    }


def test_an_agent_loop_needs_nothing_beyond_the_package() -> None:
    """The names docs/memory.md's agent loop imports are all public (DESIGN: a host's whole
    agent loop needs nothing else)."""
    needed = {
        "MEMORY_USAGE_GUIDELINES",
        "ChatTurn",
        "ChatReply",
        "ToolCall",
        "ToolChatModel",
        "OllamaChatModel",
        "ToolContext",
        "MemoryTools",
        "ContextBuilder",
        "ContextPrompt",
        "Memory",
        "open_memory",
        "request_context",
    }
    assert needed <= set(navi_memory.__all__)
