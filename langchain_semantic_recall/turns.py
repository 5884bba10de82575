"""One user turn of memory, for any agent runtime: recall it, then index what it added.

Shared by the LangGraph nodes (`graph`) and the agent middleware
(`middleware`), so both recall once per user turn and store each message once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.messages import (
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
)
from langgraph.channels import UntrackedValue
from langgraph.errors import EmptyChannelError

from langchain_semantic_recall import visible
from langchain_semantic_recall.engine.call_options import CallIds
from langchain_semantic_recall.engine.narrowing import Narrowing, from_config
from langchain_semantic_recall.errors import (
    InvalidInputError,
    InvalidOptionError,
)
from langchain_semantic_recall.messages import (
    role_of,
    to_messages,
)
from langchain_semantic_recall.recall_report import RecallReport

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

RECALL_KEY = "recalled_memory"
"""Default name of the per-run channel holding this turn's `RecalledMemory`."""


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """What recall found for one user turn: the messages to show the model.

    Attributes:
        turn: id of the user message this recall answers (`None`: no user message).
        messages: the recalled messages, each tagged `source: memory`: the
            cross-thread block (a system message) first, then same-thread messages.
        report: what was injected (`recall_report.RecallReport`), as the
            `semantic_recall` child run of the callback tree shows it too.
    """

    turn: str | None = None
    messages: tuple[BaseMessage, ...] = ()
    report: RecallReport | None = None
    """What was injected (message ids, threads, scores, dates, characters)."""

    @property
    def block(self) -> SystemMessage | None:
        """The cross-thread memory block, if any."""
        return next((m for m in self.messages if isinstance(m, SystemMessage)), None)

    def apply(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """`messages` with the recalled ones inserted (see `inject_recalled`).

        Args:
            messages: The conversation to send to the model.
        """
        return inject_recalled(messages, self.messages)


# --- pure helpers -----------------------------------------------------------------------


def check_node_options(where: str, memory: object, **keys: object) -> None:
    """A graph node's or the middleware's engine and channel names, checked when built.

    Raises:
        InvalidOptionError: `memory` is not a `SemanticRecall`, or a key is not a name.
    """
    from langchain_semantic_recall.recall import SemanticRecall

    if not isinstance(memory, SemanticRecall):
        raise InvalidOptionError(
            f"{where} needs a SemanticRecall as memory (e.g. SemanticRecall.local(path)), "
            f"got {type(memory).__name__}"
        )
    for name, value in keys.items():
        if not isinstance(value, str) or not value:
            raise InvalidOptionError(
                f"{where}: {name} must be a state channel's name, got {value!r}"
            )


def state_messages(state: Any, key: str = "messages") -> list[BaseMessage]:
    """The conversation held in `state[key]` (a mapping or an object with that field)."""
    if isinstance(state, Mapping) and key in state:
        value = state[key]
    elif not isinstance(state, Mapping) and hasattr(state, key):
        value = getattr(state, key)
    else:
        raise InvalidInputError(
            f"the graph state has no {key!r} channel: semantic recall reads the "
            f"conversation from state[{key!r}]. Use RecallState (or MessagesState) as the "
            "state schema, or pass messages_key= with the name of your messages channel"
        )
    return to_messages(value)


def require_conversation(messages: list[BaseMessage], key: str, where: str) -> list[BaseMessage]:
    """`messages`, refused when empty: a turn to recall for has at least one message.

    LangGraph drops the input keys a state does not have, so `{"message": [...]}` (a
    misspelt key) arrives as an empty conversation: the model was called with nothing
    and its answer stored alone.

    Raises:
        InvalidInputError: `messages` is empty.
    """
    if not messages:
        raise InvalidInputError(
            f"{where}: the conversation in state[{key!r}] is empty, so there is nothing to "
            f"recall for and nothing for the model to answer. Give the turn as "
            f"{{{key!r}: [...]}}: LangGraph drops input keys the state does not have, so a "
            "misspelt key arrives as an empty conversation"
        )
    return messages


def is_summary(message: BaseMessage) -> bool:
    """A summary LangChain's `SummarizationMiddleware` put in the state as a user message.

    Nobody said it: stored, it would be recalled as the user's words.
    """
    return message.additional_kwargs.get("lc_source") == "summarization"


def is_user(message: BaseMessage) -> bool:
    """A message the user wrote (a summary in a user message's place is not one)."""
    if is_summary(message):
        return False
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and role_of(message) == "user"
    )


def current_turn(messages: Sequence[BaseMessage]) -> str | None:
    """Identity of the current user turn: the newest user message's id (or position).

    Args:
        messages: The conversation so far.
    """
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if is_user(message):
            return message.id or f"@{position}"
    return None


def turn_messages(messages: Sequence[BaseMessage]) -> tuple[BaseMessage, ...]:
    """The current turn: the newest user message and what follows it (empty: none).

    Args:
        messages: The conversation so far.
    """
    for position in range(len(messages) - 1, -1, -1):
        if is_user(messages[position]):
            return tuple(messages[position:])
    return ()


def inject_recalled(
    messages: Sequence[BaseMessage], recalled: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """`messages` with `recalled` after the leading system messages.

    The same order as the engine's recall: instructions first, then the memory block and
    same-thread recalled messages, then the live conversation. Recalled messages whose id
    is already in `messages` are left out.

    Args:
        messages: The conversation to send to the model.
        recalled: The messages recall returned for this turn.
    """
    present = {m.id for m in messages if m.id}
    extra = [m for m in recalled if not (m.id and m.id in present)]
    if not extra:
        return list(messages)
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], SystemMessage):
        lead += 1
    return [*messages[:lead], *extra, *messages[lead:]]


class RecallChannel(UntrackedValue[Any]):
    """The per-run `recalled_memory` channel: never checkpointed, empty on every run.

    Unlike a plain `UntrackedValue` it reads as `None` while empty, so a node can
    tell "nothing recalled yet" (key present) from "the graph has no such channel" (key
    absent) and fail at the first run instead of recalling into the void.
    """

    def get(self) -> Any:
        """The recalled memory of this run, or None while empty."""
        try:
            return super().get()
        except EmptyChannelError:
            return None

    def is_available(self) -> bool:
        """Always True: the channel is read into the state, as None when empty."""
        return True  # always read into the state (as None when empty); it triggers no node


def _has_channel(state: Any, key: str) -> bool:
    return key in state if isinstance(state, Mapping) else hasattr(state, key)


def require_recall_channel(state: Any, key: str, where: str) -> None:
    """Raise unless the graph's state carries the per-run recall channel `key`.

    Raises:
        InvalidInputError: the state has no such channel (e.g. a plain `MessagesState`
            graph), so recalled memory could never reach the model.
    """
    if not _has_channel(state, key):
        raise InvalidInputError(
            f"{where} needs the per-run {key!r} channel in the graph's state, or recalled "
            "memory would never reach the model. Build the graph with "
            "StateGraph(RecallState) (MessagesState plus that channel), or add "
            f"`{key}: Annotated[RecalledMemory | None, RecallChannel]` to your state; the "
            "model node then calls model.invoke(with_recall(state, recall_node)). "
            "create_recall_graph(model, memory) builds all of it"
        )


def recalled_for_turn(
    state: Any, messages: Sequence[BaseMessage], key: str = RECALL_KEY
) -> RecalledMemory | None:
    """The state's recall if it answers the current turn, else `None`."""
    value = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if isinstance(value, RecalledMemory) and value.turn == current_turn(messages):
        return value
    return None


def _added(before: Sequence[BaseMessage], after: Sequence[BaseMessage]) -> tuple[BaseMessage, ...]:
    present = {id(m) for m in before}
    return tuple(m for m in after if id(m) not in present)


# --- the two halves, for one turn ---------------------------------------------------------


def recall_turn(
    memory: SemanticRecall,
    messages: Sequence[BaseMessage],
    narrowing: Narrowing | None = None,
    **ids: Unpack[CallIds],
) -> RecalledMemory:
    """Recall for the current turn of `messages` (no state is written).

    `narrowing` (a node's or the middleware's filter, range and horizon) and the run's
    `config["configurable"]` both hold (`engine.narrowing`); the engine's horizon last.

    Args:
        memory: The engine.
        messages: The conversation so far; its newest user message is the query.
        narrowing: A node's or the middleware's filter, range and horizon.
        **ids: Who is asking: `thread_id`, `resource_id`, `config` (see `CallIds`).

    Raises:
        MissingIdentityError: no thread id (or no resource id in resource scope).
        ForgottenThreadError: the thread was forgotten.
        OwnershipError: the thread belongs to another resource.
    """
    core = memory.core
    items = list(messages)
    limits = _narrowed(narrowing, ids)
    who = core.identity(ids)
    result, report = visible.recall(
        core, items, who, turn=True, config=ids.get("config"), narrowing=limits
    )
    return RecalledMemory(current_turn(items), _added(items, result), report)


async def arecall_turn(
    memory: SemanticRecall,
    messages: Sequence[BaseMessage],
    narrowing: Narrowing | None = None,
    **ids: Unpack[CallIds],
) -> RecalledMemory:
    """Async twin of `recall_turn`."""
    core = memory.core
    items = list(messages)
    limits = _narrowed(narrowing, ids)
    who = core.identity(ids)
    result, report = await visible.arecall(
        core, items, who, turn=True, config=ids.get("config"), narrowing=limits
    )
    return RecalledMemory(current_turn(items), _added(items, result), report)


def _narrowed(narrowing: Narrowing | None, ids: CallIds) -> Narrowing:
    """A turn's narrowing: the given one (a node's, the middleware's) within the run's."""
    return (narrowing or Narrowing()).within(from_config(ids.get("config")))
