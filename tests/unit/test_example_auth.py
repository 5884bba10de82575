"""The example server's auth handlers, called as the LangGraph server calls them.

The integration test `test_langgraph_server.py` checks the same through a real server;
this one runs everywhere, fast.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from langgraph_sdk import Auth

EXAMPLE = Path(__file__).parents[2] / "examples" / "langgraph_server" / "auth.py"


def example_auth() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_server_auth", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_user(user: str) -> Any:
    return SimpleNamespace(user=SimpleNamespace(identity=user))


def test_an_update_cannot_change_a_threads_owner() -> None:
    auth = example_auth()
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(auth.keep_the_owner(as_user("alice"), {"metadata": {"owner": "bob"}}))
    assert refused.value.status_code == 403


@pytest.mark.parametrize(
    "value", [{}, {"metadata": {"topic": "trips"}}, {"metadata": {"owner": "alice"}}]
)
def test_an_update_of_other_metadata_is_held_to_the_callers_threads(
    value: dict[str, Any],
) -> None:
    auth = example_auth()
    assert asyncio.run(auth.keep_the_owner(as_user("alice"), value)) == {"owner": "alice"}
