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
    RemoveMessage,
    SystemMessage,
)
from langgraph.channels import UntrackedValue
from langgraph.errors import EmptyChannelError

from langchain_semantic_recall import visible
from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.call_options import CallIds
from langchain_semantic_recall.engine.core import EngineCore
from langchain_semantic_recall.engine.identity import Identity
from langchain_semantic_recall.engine.narrowing import Narrowing, from_config
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.errors import (
    ForgottenThreadError,
    InvalidInputError,
    InvalidOptionError,
)
from langchain_semantic_recall.messages import (
    clean_text,
    is_recalled,
    role_of,
    stable_id,
    text_of,
    to_messages,
)
from langchain_semantic_recall.recall_report import RecallReport
from langchain_semantic_recall.records import NO_RESOURCE, IndexResult, ScopeFilter

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

RECALL_KEY = "recalled_memory"
"""Default name of the per-run channel holding this turn's `RecalledMemory`."""

_PROBE = 64
"""Messages checked against the storage at a time, newest first, by the index side."""


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


def _is_summary(message: BaseMessage) -> bool:
    """A summary LangChain's `SummarizationMiddleware` put in the state as a user message.

    Nobody said it: stored, it would be recalled as the user's words.
    """
    return message.additional_kwargs.get("lc_source") == "summarization"


def _is_user(message: BaseMessage) -> bool:
    """A message the user wrote (a summary in a user message's place is not one)."""
    if _is_summary(message):
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
        if _is_user(message):
            return message.id or f"@{position}"
    return None


def turn_messages(messages: Sequence[BaseMessage]) -> tuple[BaseMessage, ...]:
    """The current turn: the newest user message and what follows it (empty: none).

    Args:
        messages: The conversation so far.
    """
    for position in range(len(messages) - 1, -1, -1):
        if _is_user(messages[position]):
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
            "model node then calls model.invoke(with_recall(state)). "
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


def with_recall(
    state: Any, *, messages_key: str = "messages", recall_key: str = RECALL_KEY
) -> list[BaseMessage]:
    """The messages to send to the model: the conversation plus this turn's recall.

    Use it in the model node of a hand-built graph whose state has a `recalled_memory`
    channel filled by `RecallNode` (e.g. `RecallState`). Without a recall for
    the current turn the conversation is returned unchanged.

    Args:
        state: The graph's state (a mapping or an object with the two keys).
        messages_key: The state key of the conversation.
        recall_key: The state key `RecallNode` writes this turn's recall to.
    """
    messages = state_messages(state, messages_key)
    require_recall_channel(state, recall_key, "with_recall")
    recalled = recalled_for_turn(state, messages, recall_key)
    return messages if recalled is None else recalled.apply(messages)


def _added(before: Sequence[BaseMessage], after: Sequence[BaseMessage]) -> tuple[BaseMessage, ...]:
    present = {id(m) for m in before}
    return tuple(m for m in after if id(m) not in present)


def _storable(messages: Sequence[BaseMessage], thread_id: str) -> list[BaseMessage]:
    """The messages the storage keeps, each with an id (positional if it had none).

    Recalled messages and summaries of the conversation are not part of it. A message of
    a role or type the storage does not know stays in, as it is: `index` skips it and
    says so (its fate, and a warning, since these surfaces return no fates).
    """
    kept: list[BaseMessage] = []
    for position, message in enumerate(messages):
        if isinstance(message, RemoveMessage) or is_recalled(message) or _is_summary(message):
            continue
        role = role_of(message)
        if role is None:
            kept.append(message)
            continue
        if message.id:
            kept.append(message)
        else:
            key = stable_id(thread_id, role, text_of(message, "\n"), "", position)
            kept.append(message.model_copy(update={"id": key}))
    return kept


def _after_last_stored(
    candidates: Sequence[BaseMessage], start: int, end: int, stored: Mapping[str, Any]
) -> int | None:
    """Index just past the newest stored message in `candidates[start:end]`, if any."""
    for position in range(end - 1, start - 1, -1):
        if candidates[position].id in stored:
            return position + 1
    return None


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


def _probes(count: int) -> list[tuple[int, int]]:
    """(start, end) slices of `count` candidates, newest first, `_PROBE` at a time."""
    return [(max(0, end - _PROBE), end) for end in range(count, 0, -_PROBE)]


def _edited(
    checked: Sequence[BaseMessage], stored: Mapping[str, Any], handed: set[str | None]
) -> list[BaseMessage]:
    """The messages of `checked` stored with another text, not already in `handed`."""
    return [
        m
        for m in checked
        if m.id not in handed and (rows := stored.get(m.id or "")) and rows[0].text != _text(m)
    ]


def _said_in_this_thread(
    candidates: Sequence[BaseMessage], thread_id: str, who: Identity
) -> Op[list[BaseMessage]]:
    """`candidates` without the history stored in another thread of the same owner.

    A thread copied with its checkpoint (LangGraph server's `threads.copy`, or
    `update_state` on a new thread with another's values) holds the other thread's
    messages with their ids; message ids are unique across threads, so storing them again
    would fail every turn of the copy. They stay where they were said (resource-scope recall
    finds them there); the copy's own turns are stored under the copy. A copied message is
    stored in another thread with its text; before the newest user message, one stored with
    other text is copied too when the input holds such a copy (the original corrected it
    since). Anything else whose id another thread stored (a client that numbers each
    conversation's messages from 1) is left in for the write to refuse (`OwnershipError`),
    as is a message of another owner.
    """
    ids = [m.id for m in candidates if m.id]
    if not ids:
        return list(candidates)
    owner = who.resource_id or (yield steps.ThreadOwner(thread_id)) or NO_RESOURCE
    found = yield steps.ReadWindows(ids, before=0, after=0, scope=ScopeFilter(resource_id=owner))
    elsewhere = {
        key: rows[0].text for key, rows in found.items() if rows and rows[0].thread_id != thread_id
    }
    same = {m.id for m in candidates if m.id in elsewhere and elsewhere[m.id] == _text(m)}
    turn = _turn_start(candidates)
    edited = set() if not same else {m.id for m in candidates[:turn] if m.id in elsewhere}
    return [m for m in candidates if m.id not in same | edited]


def _text(message: BaseMessage) -> str:
    """The text the storage keeps of `message`."""
    return clean_text(text_of(message, "\n"))


def _turn_start(messages: Sequence[BaseMessage]) -> int | None:
    """Where the current turn starts: the newest user message (None: there is none)."""
    return next((p for p in range(len(messages) - 1, -1, -1) if _is_user(messages[p])), None)


def _index_new_op(
    core: EngineCore, messages: Sequence[BaseMessage], who: Identity
) -> Op[IndexResult]:
    """Index the current turn and the messages after the newest one already stored.

    The current turn (from its user message on) is always handed to `index`, which
    leaves unchanged messages alone: a user message edited in place (the same id sent
    again with new text, as LangGraph's `add_messages` replaces it) is updated, not
    silently kept with its old text. So is an earlier message whose text the state
    changed (`update_state` with its id: a correction, a redaction) among the newest
    `_PROBE` checked against the storage.
    """
    thread_id = who.require_thread(core.plan.keys, "the index side of a turn")
    candidates = _storable(messages, thread_id)
    scope = ScopeFilter(thread_id=thread_id)
    turn = _turn_start(candidates)
    for start, end in _probes(len(candidates)):
        ids = [m.id for m in candidates[start:end] if m.id]
        found = yield steps.ReadWindows(ids, before=0, after=0, scope=scope)
        if (cut := _after_last_stored(candidates, start, end, found)) is not None:
            rest = candidates[cut if turn is None else min(cut, turn) :]
            edited = _edited(candidates[start:end], found, {m.id for m in rest})
            candidates = [*edited, *rest]
            break
    else:  # nothing of it stored in this thread: a new thread, or a copy of another
        candidates = yield from _said_in_this_thread(candidates, thread_id, who)
    result: IndexResult = yield from core.index(candidates, who)
    if result.forgotten:
        raise ForgottenThreadError(
            f"thread {thread_id!r} was forgotten, so this turn was not stored: its id is "
            "retired. Continue the conversation under a new thread id (and delete the old "
            "checkpoint, which still holds the forgotten messages)"
        )
    return result


def index_new_messages(
    memory: SemanticRecall, messages: Sequence[BaseMessage], **ids: Unpack[CallIds]
) -> IndexResult:
    """Store (and embed) the messages after the newest one the storage already holds.

    Args:
        memory: The engine.
        messages: The whole conversation (a graph's or an agent's `messages`).
        **ids: Who is asking: `thread_id`, `resource_id`, `config` (see `CallIds`).

    Raises:
        MissingIdentityError: no thread id (or no resource id in resource scope).
        ForgottenThreadError: the thread was forgotten (nothing is stored).
        OwnershipError: the thread (or a message id) belongs to another owner.
        StorageError: the storage could not be written.
    """
    core = memory.core
    return core.run(_index_new_op(core, messages, core.identity(ids)))


async def aindex_new_messages(
    memory: SemanticRecall, messages: Sequence[BaseMessage], **ids: Unpack[CallIds]
) -> IndexResult:
    """Async twin of `index_new_messages`."""
    core = memory.core
    return await core.arun(_index_new_op(core, messages, core.identity(ids)))
