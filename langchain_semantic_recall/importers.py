"""Reading and writing conversations as files: our JSONL format and ChatGPT exports.

**Our JSONL format** is one message a line, a JSON object::

    {"resource": "alice", "thread": "trip", "role": "user", "content": "Hi!",
     "id": "optional-stable-id", "created_at": "2024-01-15T10:30:00Z", "title": "Trip"}

``role`` is ``user``, ``assistant`` or ``system`` (``tool`` lines need ``message``);
``id``, ``created_at`` (ISO 8601 or epoch seconds) and ``title`` (the conversation's label)
are optional. Without an id, one is derived from the line's content and position, so
importing the same file twice adds nothing. ``message`` (optional) is the full LangChain
message as ``langchain_core.messages.message_to_dict`` writes it: :func:`export_lines` adds
it when role and content do not describe the message completely (tool calls, tool results,
multimodal content), so an export reads back as exactly the same messages. Lines keep their
order within a thread.

**A ChatGPT export** (``conversations.json``, or the ``.zip`` that contains it) is a list
of conversations, each with a ``title``, a ``create_time``, a ``mapping`` of nodes (each a
``message`` with ``author.role``, ``content.parts``, ``create_time``, and a ``parent``)
and a ``current_node``. The main branch is the ``current_node``'s chain of parents (edits
and regenerations left on other branches are not imported). User and assistant text
messages are kept; hidden, tool, code and reasoning messages are reported as skipped. The
thread id is the conversation's id and message ids are ChatGPT's own, so importing a later
export of the same account adds only what is new. The export names no user: the caller
gives the resource id.

The conversation title travels in ``additional_kwargs["conversation_title"]`` of each
message (see :data:`TITLE_KEY`).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    message_to_dict,
    messages_from_dict,
)

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.messages import (
    CREATED_AT_KEY,
    TITLE_KEY,
    parse_time,
    role_of,
    stable_id,
    text_of,
)
from langchain_semantic_recall.records import StoredMessage

__all__ = [
    "FORMATS",
    "TITLE_KEY",
    "Conversation",
    "ImportReport",
    "Skipped",
    "demo_conversations",
    "detect_format",
    "export_lines",
    "read_chatgpt_conversations",
    "read_chatgpt_export",
    "read_conversations",
    "read_jsonl",
    "read_jsonl_lines",
]

Format = Literal["jsonl", "chatgpt"]
FORMATS: tuple[Format, ...] = ("jsonl", "chatgpt")

"""``additional_kwargs`` key carrying the label of a message's conversation."""

_ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
    "system": SystemMessage,
}
_EXPORT_ROLES = ("user", "assistant", "system", "tool")


@dataclass
class Conversation:
    """The messages of one thread, in order, ready for ``SemanticRecall.index``."""

    resource_id: str
    thread_id: str
    messages: list[BaseMessage] = field(default_factory=list)
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something in a file that was not imported, and why."""

    where: str
    """``line 7`` (JSONL) or ``conversation "Title"`` (ChatGPT export)."""
    reason: str


@dataclass
class ImportReport:
    """What a file held: conversations, and what was skipped with the reason."""

    format: Format = "jsonl"
    conversations: list[Conversation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return sum(len(c.messages) for c in self.conversations)


# --- our JSONL format --------------------------------------------------------------------


def _text_field(row: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = row.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'{key}' must be a non-empty string")
    return value


def _message(
    row: Mapping[str, Any], line_no: int, default_resource: str | None
) -> tuple[str, str, BaseMessage]:
    resource = _text_field(row, "resource", default_resource)
    thread = _text_field(row, "thread")
    given_role = row.get("role")
    if not isinstance(given_role, str) or given_role.lower() not in (*_ROLES, "tool"):
        raise ValueError(f"'role' must be one of user, assistant, system, tool; got {given_role!r}")
    role = given_role.lower()
    created = row.get("created_at")
    title = row.get("title")
    if title is not None and not isinstance(title, str):
        raise ValueError("'title' must be a string when given")
    kwargs: dict[str, Any] = {}
    if created is not None:
        kwargs[CREATED_AT_KEY] = parse_time(created).isoformat()
    if title:
        kwargs[TITLE_KEY] = title
    full = row.get("message")
    if full is not None:
        message = _from_full(full, role, kwargs)
    else:
        content = row.get("content")
        if not isinstance(content, str):
            raise ValueError("'content' must be a string")
        if role == "tool":
            raise ValueError("a 'tool' line needs the 'message' field (its tool call id)")
        message = _ROLES[role](content=content, additional_kwargs=kwargs)
    message_id = row.get("id", message.id)
    if message_id is None:
        text = text_of(message, "\n")
        message_id = stable_id(thread, given_role, text, str(created or ""), line_no)
    if not isinstance(message_id, str) or not message_id:
        raise ValueError("'id' must be a non-empty string when given")
    return resource, thread, message.model_copy(update={"id": message_id})


def _from_full(full: object, role: str, kwargs: dict[str, Any]) -> BaseMessage:
    if not isinstance(full, dict):
        raise ValueError("'message' must be a LangChain message as message_to_dict writes it")
    try:
        message = messages_from_dict([full])[0]
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"'message' is not a LangChain message: {error}") from error
    if (role_of(message) or "") != _canonical_role(role):
        raise ValueError(f"'message' is a {message.type} message but 'role' is {role!r}")
    extra = {**message.additional_kwargs, **kwargs}
    return message.model_copy(update={"additional_kwargs": extra})


def _canonical_role(role: str) -> str:
    return {"human": "user", "ai": "assistant"}.get(role, role)


def read_jsonl_lines(lines: Iterable[str], *, default_resource: str | None = None) -> ImportReport:
    """Parse JSONL lines into conversations; bad lines are reported, not fatal.

    Args:
        lines: The lines of the file.
        default_resource: Resource of lines that have no ``resource`` field.
    """
    report = ImportReport(format="jsonl")
    by_thread: dict[str, Conversation] = {}
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("a line must be a JSON object")
            resource, thread, message = _message(row, line_no, default_resource)
        except (ValueError, TypeError, InvalidInputError) as error:
            report.skipped.append(Skipped(f"line {line_no}", _short(error)))
            continue
        conversation = by_thread.get(thread)
        if conversation is None:
            conversation = by_thread[thread] = Conversation(resource, thread)
            report.conversations.append(conversation)
        elif conversation.resource_id != resource:
            report.skipped.append(
                Skipped(
                    f"line {line_no}",
                    f"thread {thread!r} already belongs to {conversation.resource_id!r}",
                )
            )
            continue
        title = message.additional_kwargs.get(TITLE_KEY)
        if title and conversation.title is None:
            conversation.title = title
        conversation.messages.append(message)
    return report


def _short(error: Exception) -> str:
    text = str(error)
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error.msg})"
    return text


def read_jsonl(path: str | PathLike[str], *, default_resource: str | None = None) -> ImportReport:
    """Read a JSONL file of messages (see the module docstring for the format)."""
    with Path(path).open(encoding="utf-8") as handle:
        return read_jsonl_lines(handle, default_resource=default_resource)


def _needs_full(message: BaseMessage, plain: BaseMessage) -> bool:
    """Whether role and content lose something of ``message`` (its dict differs)."""

    return _without_time(message_to_dict(message)) != _without_time(message_to_dict(plain))


def _without_time(data: dict[str, Any]) -> dict[str, Any]:
    """A message dict without ``created_at`` (the line carries it in its own field)."""
    kwargs = dict(data["data"].get("additional_kwargs", {}))
    kwargs.pop(CREATED_AT_KEY, None)
    return {**data, "data": {**data["data"], "additional_kwargs": kwargs}}


def export_lines(messages: Iterable[StoredMessage]) -> Iterator[str]:
    """Stored messages as lines of our JSONL format (no newline at the end of each).

    Reading the lines back with :func:`read_jsonl_lines` gives the same messages, with
    the same ids and times, so an export re-imports into any store.
    """
    for stored in messages:
        message = stored.to_message()
        row: dict[str, Any] = {
            "resource": stored.resource_id,
            "thread": stored.thread_id,
            "role": stored.role,
            "content": stored.text,
            "id": stored.id,
            "created_at": stored.created_at.isoformat().replace("+00:00", "Z"),
        }
        title = message.additional_kwargs.get(TITLE_KEY)
        if isinstance(title, str) and title:
            row["title"] = title
        plain_cls = _ROLES.get(stored.role)
        if plain_cls is None or _needs_full(
            message,
            plain_cls(content=stored.text, id=stored.id, additional_kwargs=_plain_kwargs(title)),
        ):
            row["message"] = _without_time(message_to_dict(message))
        yield json.dumps(row, ensure_ascii=False, default=str)


def _plain_kwargs(title: object) -> dict[str, Any]:
    return {TITLE_KEY: title} if isinstance(title, str) and title else {}


# --- ChatGPT exports ---------------------------------------------------------------------

_SKIPPED_CONTENT = {
    "code": "code run by a tool",
    "execution_output": "tool output",
    "tether_browsing_display": "tool output",
    "tether_quote": "tool output",
    "thoughts": "model reasoning",
    "reasoning_recap": "model reasoning",
    "user_editable_context": "custom instructions",
    "system_error": "error shown by ChatGPT",
}


def _main_branch(mapping: Mapping[str, Any], current: object) -> list[Mapping[str, Any]]:
    """The nodes from the root to ``current`` (or to the newest leaf), in order."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [
            key
            for key, node in mapping.items()
            if isinstance(node, Mapping) and not node.get("children")
        ]
        if not leaves:
            return []
        current = max(leaves, key=lambda key: _node_time(mapping[key]))
    chain: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    key: object = current
    while isinstance(key, str) and key in mapping and key not in seen:
        seen.add(key)
        node = mapping[key]
        if not isinstance(node, Mapping):
            break
        chain.append(node)
        key = node.get("parent")
    chain.reverse()
    return chain


def _node_time(node: object) -> float:
    message = node.get("message") if isinstance(node, Mapping) else None
    when = message.get("create_time") if isinstance(message, Mapping) else None
    return float(when) if isinstance(when, int | float) else 0.0


def _chatgpt_text(content: Mapping[str, Any]) -> str:
    parts = content.get("parts")
    if isinstance(parts, list):
        texts = [p for p in parts if isinstance(p, str) and p.strip()]
        return "\n".join(texts)
    text = content.get("text")
    return text if isinstance(text, str) else ""


def _skip_reason(message: Mapping[str, Any], role: object) -> str | None:
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("is_visually_hidden_from_conversation"):
        return "hidden message"
    if role == "tool":
        return "tool output"
    if role not in ("user", "assistant", "system"):
        return f"message from {role!r}"
    if role == "assistant" and message.get("recipient", "all") != "all":
        return "tool call"
    content = message.get("content")
    if not isinstance(content, Mapping):
        return "no content"
    kind = content.get("content_type", "text")
    if kind not in ("text", "multimodal_text"):
        return _SKIPPED_CONTENT.get(str(kind), f"{kind} content")
    if not _chatgpt_text(content).strip():
        return "no text (image or file only)" if kind == "multimodal_text" else "no text"
    return None


def _conversation(
    raw: Mapping[str, Any], index: int, resource_id: str, report: ImportReport
) -> Conversation | None:
    title = raw.get("title") if isinstance(raw.get("title"), str) else None
    where = f'conversation "{title}"' if title else f"conversation #{index + 1}"
    mapping = raw.get("mapping")
    if not isinstance(mapping, Mapping):
        report.skipped.append(Skipped(where, "no 'mapping' of messages"))
        return None
    thread = raw.get("conversation_id") or raw.get("id")
    if not isinstance(thread, str) or not thread.strip():
        thread = stable_id("chatgpt", title or "", str(raw.get("create_time")), "", index)
    conversation = Conversation(resource_id, thread, title=title)
    fallback_time = raw.get("create_time")
    for position, node in enumerate(_main_branch(mapping, raw.get("current_node"))):
        message = node.get("message")
        if not isinstance(message, Mapping):
            continue  # the root node carries no message
        author = message.get("author")
        role = author.get("role") if isinstance(author, Mapping) else None
        reason = _skip_reason(message, role)
        if reason is not None:
            if reason != "hidden message" or role != "system":  # ChatGPT's empty system root
                report.skipped.append(Skipped(where, reason))
            continue
        content = message["content"]
        kwargs: dict[str, Any] = {}
        when = message.get("create_time") or fallback_time
        if isinstance(when, int | float | str) and not isinstance(when, bool):
            try:
                kwargs[CREATED_AT_KEY] = parse_time(when).isoformat()
            except InvalidInputError:
                report.skipped.append(Skipped(where, f"bad create_time {when!r} ignored"))
        if title:
            kwargs[TITLE_KEY] = title
        text = _chatgpt_text(content)
        message_id = message.get("id") or node.get("id")
        if not isinstance(message_id, str) or not message_id:
            message_id = stable_id(thread, str(role), text, str(when or ""), position)
        cls = _ROLES[str(role)]
        conversation.messages.append(cls(content=text, id=message_id, additional_kwargs=kwargs))
    if not conversation.messages:
        report.skipped.append(Skipped(where, "no user or assistant text"))
        return None
    return conversation


def read_chatgpt_conversations(data: object, *, resource_id: str) -> ImportReport:
    """Conversations of a parsed ChatGPT export (a list, or one conversation object).

    Args:
        data: The parsed ``conversations.json``.
        resource_id: Whose conversations these are (the export does not say).
    """
    if not isinstance(resource_id, str) or not resource_id.strip():
        raise InvalidInputError("a ChatGPT export needs a resource id: whose conversations?")
    items: Sequence[Any]
    if isinstance(data, list):
        items = data
    elif isinstance(data, Mapping) and "mapping" in data:
        items = [data]
    else:
        raise InvalidInputError(
            "not a ChatGPT export: expected a list of conversations with a 'mapping'"
        )
    report = ImportReport(format="chatgpt")
    seen: set[str] = set()
    for index, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            report.skipped.append(Skipped(f"conversation #{index + 1}", "not a JSON object"))
            continue
        conversation = _conversation(raw, index, resource_id, report)
        if conversation is None:
            continue
        if conversation.thread_id in seen:
            report.skipped.append(
                Skipped(f"conversation #{index + 1}", "repeats an earlier conversation id")
            )
            continue
        seen.add(conversation.thread_id)
        report.conversations.append(conversation)
    return report


def _read_export_text(path: Path) -> str:
    if path.suffix.lower() != ".zip":
        return path.read_text(encoding="utf-8")
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
        if not names:
            raise InvalidInputError(f"{path} holds no conversations.json")
        return archive.read(min(names, key=len)).decode("utf-8")


def read_chatgpt_export(path: str | PathLike[str], *, resource_id: str) -> ImportReport:
    """Read a ChatGPT ``conversations.json`` (or the export ``.zip`` that holds it)."""
    text = _read_export_text(Path(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"{path} is not JSON: {error}") from error
    return read_chatgpt_conversations(data, resource_id=resource_id)


# --- either ------------------------------------------------------------------------------


def detect_format(path: str | PathLike[str]) -> Format:
    """``chatgpt`` for a ``.zip`` or a JSON list / conversation object, else ``jsonl``."""
    source = Path(path)
    if source.suffix.lower() == ".zip":
        return "chatgpt"
    with source.open(encoding="utf-8") as handle:
        head = handle.read(1 << 16)
    text = head.lstrip()
    if text.startswith("["):
        return "chatgpt"
    if text.startswith("{"):
        try:
            first, _ = json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError:  # a first object longer than the head, or a bad line
            return "chatgpt" if '"mapping"' in head else "jsonl"
        if isinstance(first, dict) and "mapping" in first:
            return "chatgpt"
    return "jsonl"


def read_conversations(
    path: str | PathLike[str],
    *,
    file_format: Format | None = None,
    resource_id: str | None = None,
) -> ImportReport:
    """Read either format (detected when ``file_format`` is None).

    ``resource_id`` is required for a ChatGPT export, and is the resource of JSONL lines
    that have none.
    """
    chosen = file_format or detect_format(path)
    if chosen == "chatgpt":
        if resource_id is None:
            raise InvalidInputError(
                "a ChatGPT export does not say whose conversations it holds: give a resource id"
            )
        return read_chatgpt_export(path, resource_id=resource_id)
    return read_jsonl(path, default_resource=resource_id)


def demo_conversations() -> ImportReport:
    """The small multi-thread conversation shipped with the package (used by the demo)."""
    from importlib.resources import files

    text = files("langchain_semantic_recall").joinpath("data/demo_conversations.jsonl")
    return read_jsonl_lines(text.read_text(encoding="utf-8").splitlines())
