"""Both base classes keep one contract, and docs/writing-a-backend.md states it truly."""

from __future__ import annotations

import inspect
import math
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_semantic_recall import InMemoryStorage
from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.hooks import StorageHooks
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.hooks import VectorHooks
from tests.conformance.storage_suite import make_thread

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


async def test_the_default_count_keeps_a_filter_and_a_time_range() -> None:
    """A backend that keeps the default `_count` still counts what its pages hold."""
    from datetime import UTC, datetime, timedelta

    from langchain_semantic_recall.records import MessageRecord, ScopeFilter
    from langchain_semantic_recall.storage.memory import InMemoryStorage
    from tests.fakes import RecordingStorage

    start = datetime(2025, 1, 1, tzinfo=UTC)
    inner = InMemoryStorage()
    inner.put(
        [
            MessageRecord(
                id=f"m{i}",
                thread_id="t",
                resource_id="u",
                role="user",
                text="x",
                created_at=start + timedelta(days=i),
                payload="{}",
            )
            for i in range(10)
        ]
    )
    wrapper = RecordingStorage(inner)  # keeps the base class's `_count` and `_count_up_to`
    recent = ScopeFilter(resource_id="u", since=start + timedelta(days=8))
    assert wrapper.count(recent) == inner.count(recent) == 2
    assert wrapper.count(recent, up_to=1) == 1
    assert await wrapper.acount(recent) == 2
    assert wrapper.count(ScopeFilter(resource_id="u")) == 10


class AsyncOnly(InMemoryStorage):
    """Like `PostgresStorage(async_pool=...)`: its sync driver refuses, its async one works."""

    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        raise RuntimeError("the sync driver was used")

    async def _aget_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        return InMemoryStorage._get_windows(
            self, message_ids, before=before, after=after, scope=scope
        )


async def test_the_default_ids_in_scope_keeps_a_native_async_backend_native() -> None:
    storage = AsyncOnly()
    await storage.aput(make_thread(3))
    scope = ScopeFilter("r1", since=datetime(2000, 1, 1, tzinfo=UTC))
    assert await storage.aids_in_scope(["t1-m1", "nope"], scope) == {"t1-m1"}


@pytest.mark.parametrize("estimate", [float("nan"), -0.1, 1.5, math.inf, True, "0.5"])
async def test_a_share_outside_zero_to_one_is_no_estimate(estimate: object) -> None:
    class Odd(InMemoryStorage):
        def _kept_share(self, scope: ScopeFilter) -> float | None:
            return estimate  # type: ignore[return-value]  # a backend's mistake

    scope = ScopeFilter("r1", metadata=(("project", ("apollo",)),))
    assert Odd().kept_share(scope) is None
    assert await Odd().akept_share(scope) is None
    assert Odd().kept_share(ScopeFilter("r1")) == 1.0  # no filter: all of it, unasked


def _hooks(hooks: type) -> set[str]:
    """The sync hooks of a hooks class: protected methods with an `_a` async twin."""
    return {
        name
        for name in vars(hooks)
        if name.startswith("_") and not name.startswith("__") and f"_a{name[1:]}" in vars(hooks)
    }


@pytest.mark.parametrize("section", list(BASES))
def test_the_doc_names_every_hook(section: str) -> None:
    """A hook added to `hooks.py` (abstract or not) gets its row in the doc's table."""
    _, hooks = BASES[section]
    assert _hooks(hooks) - set(_table(section)) == set()
    assert {"_put", "_adopt_thread"} <= _hooks(StorageHooks)
    assert "_aput" not in _hooks(StorageHooks)
    assert "_export" in _hooks(VectorHooks)
