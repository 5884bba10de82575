"""The two drivers run one operation the same way: results in, errors thrown back in."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import (
    Backends,
    Background,
    Both,
    Op,
    Settle,
    Step,
    adrive,
    drive,
)
from tests.unit.test_contract import make_memory


@dataclass(frozen=True)
class Echo(Step):
    """Returns its value, or raises it when it is an exception; records what ran."""

    value: Any
    log: list[Any] = field(default_factory=list, compare=False)

    def run(self, backends: Backends) -> Any:
        self.log.append(self.value)
        if isinstance(self.value, Exception):
            raise self.value
        return self.value

    async def arun(self, backends: Backends) -> Any:
        return self.run(backends)


BACKENDS: Any = None  # the test steps never touch the backends


def run_both(make_op: Any) -> list[Any]:
    """The operation's answer (or error) with each driver."""
    answers: list[Any] = []
    for runner in (lambda op: drive(op, BACKENDS), lambda op: asyncio.run(adrive(op, BACKENDS))):
        try:
            answers.append(runner(make_op()))
        except Exception as error:
            answers.append(f"raised {type(error).__name__}: {error}")
    return answers


def test_results_go_in_and_errors_are_thrown_back_into_the_operation() -> None:
    def op() -> Op[list[Any]]:
        first = yield Echo(1)
        try:
            yield Echo(ValueError("boom"))
        except ValueError as error:
            caught = str(error)
        return [first, caught, (yield Echo(3))]

    assert run_both(op) == [[1, "boom", 3], [1, "boom", 3]]


def test_an_error_the_operation_does_not_catch_is_raised_by_both_drivers() -> None:
    def op() -> Op[None]:
        yield Echo(KeyError("missing"))

    assert run_both(op) == ["raised KeyError: 'missing'"] * 2


def test_a_background_failure_surfaces_at_settle_or_at_the_end() -> None:
    def settled() -> Op[str]:
        yield Background(Echo(RuntimeError("write failed")))
        yield Echo("embedding goes on meanwhile")
        try:
            yield Settle()
        except RuntimeError as error:
            return f"caught {error}"
        return "no error"

    def forgotten() -> Op[str]:  # never settles: the driver still reports the failure
        yield Background(Echo(RuntimeError("write failed")))
        return "finished"

    assert run_both(settled) == ["caught write failed"] * 2
    assert run_both(forgotten) == ["raised RuntimeError: write failed"] * 2


@dataclass(frozen=True)
class Where(Step):
    """Records the thread it ran on, then answers like `Echo`."""

    value: Any
    threads: list[int] = field(default_factory=list, compare=False)

    def run(self, backends: Backends) -> Any:
        self.threads.append(threading.get_ident())
        return Echo(self.value).run(backends)

    async def arun(self, backends: Backends) -> Any:
        return self.run(backends)


def test_both_runs_the_first_step_on_a_worker_and_the_second_here() -> None:
    first, second = Where("vectors"), Where("keywords")

    def op() -> Op[Any]:
        return (yield Both(first, second))

    assert drive(op(), BACKENDS) == ("vectors", "keywords")
    assert second.threads == [threading.get_ident()]
    assert first.threads != second.threads


@pytest.mark.parametrize(
    ("first", "second", "raised"),
    [
        (ValueError("vectors"), KeyError("keywords"), "ValueError: vectors"),
        (ValueError("vectors"), "ok", "ValueError: vectors"),
        ("ok", KeyError("keywords"), "KeyError: 'keywords'"),
    ],
)
def test_both_raises_the_first_steps_error_before_the_second_s(
    first: Any, second: Any, raised: str
) -> None:
    def op() -> Op[Any]:
        return (yield Both(Echo(first), Echo(second)))

    assert run_both(op) == [f"raised {raised}"] * 2


@dataclass(frozen=True)
class Interrupt(Step):
    """Raises KeyboardInterrupt, as a Ctrl-C in the middle of a step does."""

    def run(self, backends: Backends) -> Any:
        raise KeyboardInterrupt

    async def arun(self, backends: Backends) -> Any:
        raise KeyboardInterrupt


def test_both_lets_an_interrupt_on_the_caller_through_whatever_the_worker_raised() -> None:
    def op() -> Op[Any]:
        return (yield Both(Echo(ValueError("vectors")), Interrupt()))

    with pytest.raises(KeyboardInterrupt):
        drive(op(), BACKENDS)


def test_misspelt_ids_are_errors_not_ignored() -> None:
    memory = make_memory()
    question = [HumanMessage("dog?")]
    with pytest.raises(TypeError, match="thread"):
        memory.recall(question, thread="A", resource_id="alice")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="resource"):
        memory.index(question, thread_id="A", resource="alice")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="kk"):
        memory.search("dog", resource_id="alice", kk=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="batch"):
        memory.reindex(batch=3)  # type: ignore[call-arg]


class _WriteFails(steps.Step):
    """A background write that fails."""

    def run(self, backends: Any) -> Any:
        raise ConnectionError("vector store down")

    async def arun(self, backends: Any) -> Any:
        raise ConnectionError("vector store down")


def _raises_after_a_background_write() -> steps.Op[None]:
    yield steps.Background(_WriteFails())
    raise ValueError("the operation failed")


async def test_a_failed_background_write_is_attached_to_the_operations_error() -> None:
    with pytest.raises(ValueError, match="the operation failed") as raised:
        steps.drive(_raises_after_a_background_write(), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the operation failed") as araised:
        await steps.adrive(_raises_after_a_background_write(), None)  # type: ignore[arg-type]
    for error in (raised.value, araised.value):
        assert isinstance(error.__context__, ConnectionError)
        assert any("vector store down" in note for note in error.__notes__)


def test_backends_of_the_storage_alone_refuse_a_vector_step_loudly() -> None:
    """`cli stats` drives an operation on the storage alone: a vector step must fail."""
    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.records import ScopeFilter
    from langchain_semantic_recall.storage.memory import InMemoryStorage

    backends = Backends(InMemoryStorage())
    assert backends.storage is not None
    step = steps.NearestMessages(
        IndexInfo("idx", "model", 2), [1.0, 0.0], k=1, scope=ScopeFilter(resource_id="u")
    )
    with pytest.raises(RuntimeError, match="storage alone"):
        drive(_one(step), backends)


def _one(step: Step[Any]) -> Op[Any]:
    return (yield step)
