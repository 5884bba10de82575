"""Both base classes keep one contract, and docs/writing-a-backend.md states it truly."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.hooks import StorageHooks
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.hooks import VectorHooks

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"
BASES = {
    "Message storage": (MessageStorage, StorageHooks),
    "Vector index": (VectorIndex, VectorHooks),
}


def _table(section: str) -> dict[str, str]:
    """Hook name -> its 'must?' cell, from the section's table in the doc."""
    text = DOC.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`_"):
            for hook in re.findall(r"`(_\w+)`", cells[0]):
                rows[hook] = cells[1]
    return rows


@pytest.mark.parametrize("section", list(BASES))
def test_the_doc_names_exactly_the_abstract_hooks(section: str) -> None:
    base, _ = BASES[section]
    documented = {hook for hook, must in _table(section).items() if must == "abstract"}
    assert documented == set(base.__abstractmethods__)


@pytest.mark.parametrize("section", list(BASES))
def test_every_documented_hook_exists_and_has_one_async_twin(section: str) -> None:
    _, hooks = BASES[section]
    for hook in _table(section):
        assert callable(getattr(hooks, hook, None)), f"{hook} is documented but missing"
        twin = getattr(hooks, f"_a{hook[1:]}", None)
        assert twin is not None, f"{hook} has no async twin _a{hook[1:]}"


@pytest.mark.parametrize("section", list(BASES))
def test_public_async_twins_await_hooks_instead_of_running_the_sync_method(section: str) -> None:
    """The one async rule: a public `ax` checks and awaits `_ax`, never runs `x` whole."""
    base, _ = BASES[section]
    for name, method in vars(base).items():
        if name.startswith("a") and inspect.iscoroutinefunction(method):
            source = inspect.getsource(method)
            assert "run_in_executor" not in source, f"{base.__name__}.{name} runs in an executor"
            assert f"self._a{name[1:]}(" in source, f"{base.__name__}.{name} awaits no hook"
