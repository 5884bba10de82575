"""The classic LangChain memory contract (`BaseMemory`-style), as pure helpers.

Chains built on the classic contract call `load_memory_variables` before the model and
`save_context` after it. Those calls carry no config, so they run on a view bound to one
conversation with `memory.for_thread(thread_id, resource_id)`; the package does not
depend on the deprecated classes. `clear()` empties the conversation and the view keeps
working (a later `save_context` is stored); `forget_thread` is the way to delete a
conversation for good.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall.errors import ForgottenThreadError, InvalidInputError
from langchain_semantic_recall.messages import CREATED_AT_KEY, is_recalled

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import IndexResult


def bound_thread(memory: SemanticRecall) -> str:
    """The thread a `for_thread` view is bound to, or a clear error."""
    thread_id = memory.core.bound.thread_id
    if thread_id is None:
        raise InvalidInputError(
            "the classic memory contract needs a conversation: use memory.for_thread("
            "thread_id, resource_id) and call load_memory_variables / save_context / clear "
            "on that view"
        )
    return thread_id


def _check_mapping(name: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{name} must be a dict of variables (e.g. {{'input': 'Hi'}}), "
            f"got {type(value).__name__}"
        )
    return value


def _input_text(memory: SemanticRecall, inputs: object) -> str:
    values = _check_mapping("inputs", inputs)
    key = memory.input_key
    if key is None:
        candidates = [k for k in values if k not in (memory.memory_key, "stop")]
        if not candidates:
            raise InvalidInputError(
                f"no input holds the user's text (got {list(values)}): pass it, e.g. "
                "{'input': 'What am I allergic to?'}"
            )
        if len(candidates) > 1:
            raise InvalidInputError(
                f"several inputs {candidates}: cannot tell which holds the user's text; "
                "set input_key"
            )
        key = candidates[0]
    value = values.get(key)
    if not isinstance(value, str):
        raise InvalidInputError(f"input {key!r} must be text, got {type(value).__name__}")
    return value


def _output_text(memory: SemanticRecall, outputs: object) -> str:
    values = _check_mapping("outputs", outputs)
    key = memory.output_key
    if key is None:
        if not values:
            raise InvalidInputError(
                "no output: save_context needs the answer, e.g. {'output': 'Noted.'}"
            )
        if len(values) > 1:
            raise InvalidInputError(
                f"several outputs {list(values)}: cannot tell which is the answer; set output_key"
            )
        key = next(iter(values))
    value = values.get(key)
    if isinstance(value, BaseMessage):
        value = value.text
    if not isinstance(value, str):
        raise InvalidInputError(f"output {key!r} must be text, got {type(value).__name__}")
    return value


def query(memory: SemanticRecall, inputs: object) -> list[BaseMessage]:
    """The user's text in `inputs`, as the one message recall reads."""
    text = _input_text(memory, inputs)
    bound_thread(memory)
    return [HumanMessage(text)]


def recalled_only(memory: SemanticRecall, result: Sequence[BaseMessage]) -> dict[str, Any]:
    """`{memory_key: [the recalled messages]}`."""
    return {memory.memory_key: [m for m in result if is_recalled(m)]}


def turn(memory: SemanticRecall, inputs: object, outputs: object) -> list[BaseMessage]:
    """One exchange as two new messages (each call is a new turn, with its own ids)."""
    bound_thread(memory)
    now = datetime.now(UTC).isoformat()
    kwargs = {CREATED_AT_KEY: now}
    return [
        HumanMessage(_input_text(memory, inputs), id=str(uuid.uuid4()), additional_kwargs=kwargs),
        AIMessage(_output_text(memory, outputs), id=str(uuid.uuid4()), additional_kwargs=kwargs),
    ]


def check_saved(result: IndexResult) -> None:
    """Raise when `save_context` stored nothing because the thread was forgotten.

    The classic contract returns nothing, so a dropped exchange must be an error.
    """
    if result.forgotten:
        raise ForgottenThreadError(
            "this conversation was forgotten (forget_thread), so its id is retired and the "
            "exchange was not stored; use a new thread id (clear() empties a conversation "
            "and keeps it usable)"
        )
