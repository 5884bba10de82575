"""Our JSONL format: one message a line, read into conversations and written back.

Each line is a JSON object:

```json
{"resource": "alice", "thread": "trip", "role": "user", "content": "Hi!",
 "id": "optional-stable-id", "created_at": "2024-01-15T10:30:00Z", "title": "Trip"}
```

`role` is `user`, `assistant`, `system` or `tool` (a `tool` line needs `message`);
`human` and `ai` are read as `user` and `assistant` (`JSONL_ROLES` lists them all);
`id`, `created_at` (ISO 8601 or epoch seconds), `title` (the conversation's label) and
`metadata` (the message's filterable metadata, docs/filtering.md) are optional. A line
with any other key (`JSONL_KEYS` lists them) is a bad line, reported with the key it
may have meant: a misspelt `created_at` would otherwise be dropped unseen. Without
an id, one is derived from the line's thread, role, `created_at` and text, and from how
many lines of its thread before it hold the same (so "ok" twice is two messages): never
from the line number, so importing the file again adds nothing, also after lines were
added, fixed or removed elsewhere in it. `message` (optional) is the full LangChain
message as `langchain_core.messages.message_to_dict` writes it: `export_lines` adds
it when role and content do not describe the message completely (tool calls, tool results,
multimodal content), so an export reads back as exactly the same messages. Lines keep their
order within a thread.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, ChatMessage, message_to_dict

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.filters import METADATA_KEY, check_metadata
from langchain_semantic_recall.importers.report import (
    ROLES,
    Conversation,
    ImportReport,
    Skipped,
    read_text,
)
from langchain_semantic_recall.messages import (
    CREATED_AT_KEY,
    parse_time,
    role_of,
    stable_id,
    text_of,
)
from langchain_semantic_recall.records import TITLE_KEY, StoredMessage, load_message
from langchain_semantic_recall.storable import check_message_id, check_new_id, encodable

__all__ = ["JSONL_KEYS", "JSONL_ROLES", "export_lines", "read_jsonl", "read_jsonl_lines"]

JSONL_KEYS: tuple[str, ...] = (
    "resource",
    "thread",
    "role",
    "content",
    "id",
    "created_at",
    "title",
    "metadata",
    "message",
)
"""The keys a line may have (docs/cli.md); a line with any other is a bad line."""
JSONL_ROLES: tuple[str, ...] = (*ROLES, "tool")
"""The roles a line may name: the plain ones, and `tool` (with `message`)."""


def _text_field(row: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = row.get(key, default)
    if key not in row and f"{key}_id" in row:  # the Python API's name for the same field
        raise ValueError(
            f"'{key}' is missing: this line has '{key}_id', which the JSONL calls '{key}'"
        )
    if value is None and key == "resource":
        raise ValueError(
            "'resource' is missing: give the line one, or pass --resource R "
            "(default_resource= in Python) for the lines without one"
        )
    if value is None:
        raise ValueError(f"'{key}' is missing")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'{key}' must be a non-empty string")
    return check_new_id(f"'{key}'", value)


def _message(
    row: Mapping[str, Any], default_resource: str | None
) -> tuple[str, str, BaseMessage, tuple[str, str, str] | None]:
    """A line's resource, thread and message; without an id, what its id derives from.

    The message of a line without an id has none yet: `_derive_ids` gives it one
    from the returned (role as written, text, `created_at` as written).
    """
    _check_keys(row)
    resource = _text_field(row, "resource", default_resource)
    thread = _text_field(row, "thread")
    given_role = row.get("role")
    if not isinstance(given_role, str) or given_role.lower() not in (*ROLES, "tool"):
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
    if row.get("metadata") is not None:  # over the full message's own, as export writes it
        kwargs[METADATA_KEY] = check_metadata(row["metadata"], "'metadata'")
    full = row.get("message")
    if full is not None:
        message = _from_full(full, role, kwargs)
    else:
        content = _content(row)
        if role == "tool":
            raise ValueError("a 'tool' line needs the 'message' field (its tool call id)")
        message = ROLES[role](content=content, additional_kwargs=kwargs)
    message_id = row.get("id", message.id)
    if message_id is None:
        return resource, thread, message, (given_role, text_of(message, "\n"), str(created or ""))
    if not isinstance(message_id, str) or not message_id.strip():
        raise ValueError("'id' must be a non-empty string when given")
    check_message_id(message_id, "'id'")
    return resource, thread, message.model_copy(update={"id": message_id}), None


def _content(row: Mapping[str, Any]) -> str | list[str | dict[str, Any]]:
    """A line's `content`: a string, or LangChain's list of parts (text, image, ...)."""
    if "content" not in row:
        raise ValueError("'content' is missing")
    content = row["content"]
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("type"), str))
        for p in content
    ):
        return content
    raise ValueError(
        "'content' must be a string, or a list of content parts (strings, or objects "
        'with a "type" such as {"type": "text", "text": "..."})'
    )


def _check_keys(row: Mapping[str, Any]) -> None:
    """Refuse a line with a key the format does not have: a typo's value would be lost."""
    unknown = []
    for key in row:
        if key in JSONL_KEYS:
            continue
        if key in ("resource_id", "thread_id") and key.removesuffix("_id") not in row:
            continue  # the Python API's name: `_text_field` says what the JSONL calls it
        unknown.append(key)
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), JSONL_KEYS, n=1)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ValueError(
        f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(named)}; "
        f"a line has only {', '.join(JSONL_KEYS)}"
    )


def _from_full(full: object, role: str, kwargs: dict[str, Any]) -> BaseMessage:
    if not isinstance(full, dict):
        raise ValueError("'message' must be a LangChain message as message_to_dict writes it")
    try:
        message = load_message(full)
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"'message' is not a LangChain message: {error}") from error
    if isinstance(message, ChatMessage) and role_of(message) is None:
        # A role the storage does not know, which earlier versions stored as the
        # user's: it comes back as the role it was stored (and exported) with.
        message = message.model_copy(update={"role": _canonical_role(role)})
    if (role_of(message) or "") != _canonical_role(role):
        raise ValueError(f"'message' is a {message.type} message but 'role' is {role!r}")
    extra = {**message.additional_kwargs, **kwargs}
    return message.model_copy(update={"additional_kwargs": extra})


def _canonical_role(role: str) -> str:
    return {"human": "user", "ai": "assistant"}.get(role, role)


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (`json.loads` keeps the last).

    Raises:
        ValueError: a key is given twice: one of its values would be dropped unseen.
    """
    row = dict(pairs)
    if len(row) < len(pairs):
        twice = sorted(key for key, count in Counter(k for k, _ in pairs).items() if count > 1)
        raise ValueError(f"{', '.join(map(repr, twice))} given twice: keep one value")
    return row


def read_jsonl_lines(lines: Iterable[str], *, default_resource: str | None = None) -> ImportReport:
    """Parse JSONL lines into conversations; bad lines are reported, not fatal.

    Args:
        lines: The lines of the file.
        default_resource: Resource of lines that have no `resource` field.
    """
    report = ImportReport(format="jsonl")
    by_thread: dict[str, Conversation] = {}
    first_line: dict[str, int] = {}
    """thread -> the line that named its resource first (a thread has one resource)."""
    repeats: Counter[tuple[str, str, str, str]] = Counter()
    """(thread, role, text, created_at) -> lines of it read so far: a derived id's repeat."""
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            text = line.removeprefix("\ufeff") if line_no == 1 else line
            row = json.loads(text, object_pairs_hook=_once_each)
            if not isinstance(row, dict):
                raise ValueError("a line must be a JSON object")
            resource, thread, message, derived = _message(row, default_resource)
        except RecursionError:
            report.skipped.append(Skipped(f"line {line_no}", "JSON nested too deeply"))
            continue
        except (ValueError, TypeError, InvalidInputError) as error:
            report.skipped.append(Skipped(f"line {line_no}", _short(error)))
            continue
        conversation = by_thread.get(thread)
        if conversation is None:
            conversation = by_thread[thread] = Conversation(resource, thread)
            first_line[thread] = line_no
            report.conversations.append(conversation)
        elif conversation.resource_id != resource:
            report.skipped.append(
                Skipped(
                    f"line {line_no}",
                    f"thread {thread!r} is named for resource {resource!r} here but for "
                    f"{conversation.resource_id!r} on line {first_line[thread]} of this "
                    "file: a thread has one resource (correct one of the lines)",
                )
            )
            continue
        if derived is not None:
            repeat = repeats[thread, *derived]
            repeats[thread, *derived] += 1
            role, text, created = derived
            message = message.model_copy(
                update={"id": stable_id(thread, role, text, created, repeat, kind="jsonl")}
            )
            legacy = stable_id(thread, role, text, created, line_no)  # 0.3's: the line's number
            conversation.legacy_ids[len(conversation.messages)] = legacy
        title = message.additional_kwargs.get(TITLE_KEY)
        if title and conversation.title is None:
            conversation.title = title
        conversation.messages.append(message)
        conversation.where.append(f"line {line_no}")
    return report


def _short(error: Exception) -> str:
    text = str(error)
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error.msg})"
    return text


def read_jsonl(path: str | PathLike[str], *, default_resource: str | None = None) -> ImportReport:
    """Read a JSONL file of messages (see the module docstring for the format).

    UTF-8 (a byte order mark is dropped) or UTF-16 with its byte order mark.

    Args:
        path: The JSONL file.
        default_resource: The resource of lines that have none.

    Raises:
        InvalidInputError: The file is in another encoding.
    """
    text = read_text(Path(path))
    # "\n" only: splitlines() would also cut at U+2028, which JSON strings may hold.
    return read_jsonl_lines(text.split("\n"), default_resource=default_resource)


def _needs_full(message: BaseMessage, plain: BaseMessage) -> bool:
    """Whether role and content lose something of `message` (its dict differs)."""
    return _without_time(message_to_dict(message)) != _without_time(message_to_dict(plain))


def _without_time(data: dict[str, Any]) -> dict[str, Any]:
    """A message dict without `created_at` and metadata (the line's own fields carry them)."""
    kwargs = dict(data["data"].get("additional_kwargs", {}))
    kwargs.pop(CREATED_AT_KEY, None)
    kwargs.pop(METADATA_KEY, None)
    return {**data, "data": {**data["data"], "additional_kwargs": kwargs}}


def export_lines(messages: Iterable[StoredMessage]) -> Iterator[str]:
    """Stored messages as lines of our JSONL format (no newline at the end of each).

    Reading the lines back with `read_jsonl_lines` gives the same messages, with
    the same ids and times, so an export re-imports into any store. Every line is
    UTF-8-encodable: one holding a lone surrogate is written with JSON escapes.

    Args:
        messages: Stored messages, in thread order.
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
        if stored.metadata:  # the index call's and the message's own, as stored
            row["metadata"] = dict(stored.metadata)
        plain_cls = ROLES.get(stored.role)
        if plain_cls is None or _needs_full(
            message,
            plain_cls(content=stored.text, id=stored.id, additional_kwargs=_plain_kwargs(title)),
        ):
            row["message"] = _without_time(message_to_dict(message))
        line = json.dumps(row, ensure_ascii=False, default=str)
        # A lone surrogate (stored from an import's JSON escape) has no UTF-8 form: JSON
        # escapes carry it, and read it back the same.
        yield line if encodable(line) else json.dumps(row, ensure_ascii=True, default=str)


def _plain_kwargs(title: object) -> dict[str, Any]:
    return {TITLE_KEY: title} if isinstance(title, str) and title else {}
