"""The classic LangChain memory contract (``BaseMemory``-style), mixed into SemanticRecall.

Chains built on the classic contract call ``load_memory_variables`` before the model and
``save_context`` after it. Those calls carry no config, so they run on a view bound to one
conversation with ``for_thread``; the package does not depend on the deprecated classes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.messages import CREATED_AT_KEY, MEMORY_SOURCE

if TYPE_CHECKING:
    from langchain_semantic_recall.records import IndexResult


class MemoryContractMixin:
    """``memory_key``, ``memory_variables``, ``load_memory_variables``, ``save_context``,
    ``clear`` and their async twins."""

    memory_key: str
    input_key: str | None
    output_key: str | None
    _bound: tuple[str | None, str | None]

    if TYPE_CHECKING:

        def recall(
            self, messages: Any, *, thread_id: str | None = ..., resource_id: str | None = ...
        ) -> list[BaseMessage]: ...
        async def arecall(
            self, messages: Any, *, thread_id: str | None = ..., resource_id: str | None = ...
        ) -> list[BaseMessage]: ...
        def index(
            self, messages: Any, *, thread_id: str | None = ..., resource_id: str | None = ...
        ) -> IndexResult: ...
        async def aindex(
            self, messages: Any, *, thread_id: str | None = ..., resource_id: str | None = ...
        ) -> IndexResult: ...
        def forget_thread(self, thread_id: str, *, resource_id: str | None = ...) -> int: ...
        async def aforget_thread(self, thread_id: str, *, resource_id: str | None = ...) -> int: ...

    @property
    def memory_variables(self) -> list[str]:
        """The variables :meth:`load_memory_variables` returns."""
        return [self.memory_key]

    def _input_text(self, inputs: dict[str, Any]) -> str:
        _check_mapping("inputs", inputs)
        key = self.input_key
        if key is None:
            candidates = [k for k in inputs if k not in (self.memory_key, "stop")]
            if len(candidates) != 1:
                raise InvalidInputError(
                    f"cannot tell which input holds the user's text among {candidates}; "
                    "set input_key"
                )
            key = candidates[0]
        value = inputs.get(key)
        if not isinstance(value, str):
            raise InvalidInputError(f"input {key!r} must be text, got {type(value).__name__}")
        return value

    def _output_text(self, outputs: dict[str, Any]) -> str:
        _check_mapping("outputs", outputs)
        key = self.output_key
        if key is None:
            if len(outputs) != 1:
                raise InvalidInputError(f"several outputs {list(outputs)}; set output_key")
            key = next(iter(outputs))
        value = outputs.get(key)
        if isinstance(value, BaseMessage):
            value = value.text
        if not isinstance(value, str):
            raise InvalidInputError(f"output {key!r} must be text, got {type(value).__name__}")
        return value

    def _recalled_only(self, result: Sequence[BaseMessage]) -> dict[str, Any]:
        return {
            self.memory_key: [
                m for m in result if m.additional_kwargs.get("source") == MEMORY_SOURCE
            ]
        }

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """``{memory_key: [recalled messages]}`` for the user's text in ``inputs``.

        Needs a view bound with :meth:`for_thread`.
        """
        query = self._input_text(inputs)
        self._require_bound()
        return self._recalled_only(self.recall([HumanMessage(query)]))

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`load_memory_variables`."""
        query = self._input_text(inputs)
        self._require_bound()
        return self._recalled_only(await self.arecall([HumanMessage(query)]))

    def _turn(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[BaseMessage]:
        now = datetime.now(UTC).isoformat()
        return [
            HumanMessage(
                self._input_text(inputs),
                id=str(uuid.uuid4()),
                additional_kwargs={CREATED_AT_KEY: now},
            ),
            AIMessage(
                self._output_text(outputs),
                id=str(uuid.uuid4()),
                additional_kwargs={CREATED_AT_KEY: now},
            ),
        ]

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Store and embed one exchange (each call is a new turn)."""
        self._require_bound()
        self.index(self._turn(inputs, outputs))

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Async twin of :meth:`save_context`."""
        self._require_bound()
        await self.aindex(self._turn(inputs, outputs))

    def clear(self) -> None:
        """Forget the bound thread (messages and vectors)."""
        thread_id, _ = self._require_bound()
        self.forget_thread(thread_id)

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        thread_id, _ = self._require_bound()
        await self.aforget_thread(thread_id)

    def _require_bound(self) -> tuple[str, str | None]:
        thread_id, resource_id = self._bound
        if thread_id is None:
            raise InvalidInputError(
                "the memory contract needs a conversation: use memory.for_thread(thread_id, "
                "resource_id) and call load_memory_variables / save_context on that view"
            )
        return thread_id, resource_id


def _check_mapping(name: str, value: object) -> None:
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{name} must be a dict of variables (e.g. {{'input': 'Hi'}}), "
            f"got {type(value).__name__}"
        )
