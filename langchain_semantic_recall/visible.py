"""Visible recall: every recall is a named child run in LangChain's callback tree.

Each recall (`SemanticRecall.recall` / `invoke`, the graph's `RecallNode`, the agent
middleware) runs inside a child run named `semantic_recall` of the current run: its
inputs say who asked, its outputs are the `RecallReport` (`as_dict()`: message ids,
threads, scores, dates, characters). LangSmith, or any `BaseCallbackHandler` in the
run's config, shows it; with no handler, nothing is sent anywhere.

```python
class Shown(BaseCallbackHandler):
    def __init__(self):
        self.recalls = set()

    def on_chain_start(self, serialized, inputs, *, run_id, **kwargs):
        if kwargs.get("name") == "semantic_recall":
            self.recalls.add(run_id)

    def on_chain_end(self, outputs, *, run_id, **kwargs):
        if run_id in self.recalls:  # outputs: RecallReport.as_dict()
            print(outputs["message_ids"], outputs["injected_chars"])


memory.invoke(messages, {"configurable": ids, "callbacks": [Shown()]})
```
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
)

from langchain_semantic_recall.engine.call_options import Narrowed
from langchain_semantic_recall.engine.core import EngineCore
from langchain_semantic_recall.engine.identity import Identity
from langchain_semantic_recall.engine.narrowing import Narrowing
from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.messages import to_messages
from langchain_semantic_recall.recall_report import RUN_NAME, RecallReport

Recalled = tuple[list[BaseMessage], RecallReport]


def _inputs(who: Identity, messages: Sequence[BaseMessage], turn: bool) -> dict[str, Any]:
    return {
        "thread_id": who.thread_id,
        "resource_id": who.resource_id,
        "messages": len(messages),
        "per_turn": turn,
    }


def recall(
    core: EngineCore,
    messages: Any,
    who: Identity,
    *,
    turn: bool,
    config: RunnableConfig | None = None,
    narrowing: Narrowing | None = None,
) -> Recalled:
    """Run the recall operation inside a `semantic_recall` child run of `config`'s run.

    `config` None: the current run's (LangChain's context). The run ends with the
    report as outputs, or with the error the recall raised. `narrowing`: the call's
    filter and range (the engine's horizon under them).
    """
    items = to_messages(messages)  # bad input raises before any run starts
    op = core.recall(items, who, turn=turn, narrowing=narrowing)
    manager = get_callback_manager_for_config(ensure_config(config))
    if not manager.handlers:  # nobody listens: no run to start (no cost on the hot path)
        return core.run(op)
    run = manager.on_chain_start(None, _inputs(who, items, turn), name=RUN_NAME)
    try:
        injected, report = core.run(op)
    except BaseException as error:
        run.on_chain_error(error)
        raise
    run.on_chain_end(report.as_dict())
    return injected, report


async def arecall(
    core: EngineCore,
    messages: Any,
    who: Identity,
    *,
    turn: bool,
    config: RunnableConfig | None = None,
    narrowing: Narrowing | None = None,
) -> Recalled:
    """Async twin of `recall`."""
    items = to_messages(messages)
    op = core.recall(items, who, turn=turn, narrowing=narrowing)
    manager = get_async_callback_manager_for_config(ensure_config(config))
    if not manager.handlers:
        return await core.arun(op)
    run = await manager.on_chain_start(None, _inputs(who, items, turn), name=RUN_NAME)
    try:
        injected, report = await core.arun(op)
    except BaseException as error:
        await run.on_chain_error(error)
        raise
    await run.on_chain_end(report.as_dict())
    return injected, report


def recall_messages(core: EngineCore, messages: Any, options: Narrowed) -> list[BaseMessage]:
    """`SemanticRecall.recall`: the messages with recall injected, for the call's options."""
    who, narrowing = core.recall_request(options)
    config = options.get("config")
    return recall(core, messages, who, turn=False, config=config, narrowing=narrowing)[0]


async def arecall_messages(core: EngineCore, messages: Any, options: Narrowed) -> list[BaseMessage]:
    """Async twin of `recall_messages`."""
    who, narrowing = core.recall_request(options)
    config = options.get("config")
    recalled = await arecall(core, messages, who, turn=False, config=config, narrowing=narrowing)
    return recalled[0]


def _refuse(kwargs: Mapping[str, Any]) -> None:
    """`invoke` reads everything from the config: a keyword it was given is an error."""
    if kwargs:
        raise InvalidInputError(
            f"memory.invoke takes no keyword arguments, got {sorted(kwargs)}: give ids, "
            "filter and range in config['configurable'] (thread_id, resource_id, "
            "recall_filter, recall_since, recall_until), or call memory.recall(messages, "
            "thread_id=..., resource_id=..., filter=...)"
        )


def runner(
    core: EngineCore, config: RunnableConfig | None, kwargs: Mapping[str, Any]
) -> Callable[[Any], list[BaseMessage]]:
    """`SemanticRecall.invoke`'s body: ids, filter and range from `config`, traced under it.

    Raises:
        InvalidInputError: a keyword argument (it would be ignored).
    """
    _refuse(kwargs)
    who, narrowing = core.recall_request({"config": config})
    return lambda messages: recall(core, messages, who, turn=False, narrowing=narrowing)[0]


def arunner(
    core: EngineCore, config: RunnableConfig | None, kwargs: Mapping[str, Any]
) -> Callable[[Any], Awaitable[list[BaseMessage]]]:
    """Async twin of `runner`."""
    _refuse(kwargs)
    who, narrowing = core.recall_request({"config": config})

    async def run(messages: Any) -> list[BaseMessage]:
        return (await arecall(core, messages, who, turn=False, narrowing=narrowing))[0]

    return run
