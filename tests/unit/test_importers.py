"""Reading our JSONL format and ChatGPT exports, and writing JSONL that reads back the same."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from langchain_semantic_recall import InMemoryStorage
from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.importers import (
    TITLE_KEY,
    demo_conversations,
    detect_format,
    export_lines,
    read_chatgpt_conversations,
    read_chatgpt_export,
    read_conversations,
    read_jsonl,
    read_jsonl_lines,
)
from langchain_semantic_recall.importers.jsonl import JSONL_KEYS, JSONL_ROLES
from langchain_semantic_recall.messages import build_records, stable_id
from langchain_semantic_recall.records import load_message
from langchain_semantic_recall.storable import storable

JAN_15 = 1705314600  # 2024-01-15 10:30 UTC

Turn = tuple[str, str] | tuple[str, str, dict[str, Any]]


def chatgpt_conversation(
    conversation_id: str | None,
    title: str | None,
    turns: Sequence[Turn],
    *,
    start: float = JAN_15,
    current: bool = True,
) -> dict[str, Any]:
    """One conversation as ChatGPT exports it: a root node, then a chain of messages.

    Each turn is ``(role, text)`` or ``(role, text, extra message fields)``.
    """
    prefix = conversation_id or "anon"
    mapping: dict[str, Any] = {
        f"{prefix}-root": {"id": f"{prefix}-root", "message": None, "parent": None, "children": []}
    }
    parent = f"{prefix}-root"
    for n, turn in enumerate(turns):
        role, text = turn[0], turn[1]
        extra: dict[str, Any] = dict(turn[2]) if len(turn) == 3 else {}
        node = f"{prefix}-{n}"
        message: dict[str, Any] = {
            "id": node,
            "author": {"role": role},
            "create_time": start + 60 * n,
            "content": {"content_type": "text", "parts": [text]},
            "recipient": "all",
        }
        message.update(extra)
        mapping[node] = {"id": node, "parent": parent, "children": [], "message": message}
        mapping[parent]["children"].append(node)
        parent = node
    conversation: dict[str, Any] = {"title": title, "create_time": start, "mapping": mapping}
    if conversation_id is not None:
        conversation["id"] = conversation_id
    if current:
        conversation["current_node"] = parent
    return conversation


def sample_export() -> list[dict[str, Any]]:
    """Two conversations of one user, with the kinds of messages an export holds."""
    return [
        chatgpt_conversation(
            "conv-trip",
            "Lisbon trip",
            [
                ("system", "", {"metadata": {"is_visually_hidden_from_conversation": True}}),
                ("user", "We're going to Lisbon in March. Where should we stay?"),
                ("assistant", "Try Príncipe Real or the edge of Alfama."),
                ("user", "My sister is vegetarian and I'm allergic to peanuts."),
                ("assistant", "Noted: ask about nuts in pastry shops."),
            ],
        ),
        chatgpt_conversation(
            "conv-garden",
            "Tomatoes",
            [
                ("user", "When can my tomato seedlings go outside near Porto?"),
                ("assistant", "search('porto frost dates')", {"recipient": "browser"}),
                ("tool", "Porto: last frost in March."),
                ("assistant", "Late April, once nights stay above 10°C."),
            ],
            start=JAN_15 + 86400 * 21,
        ),
    ]


# --- JSONL -------------------------------------------------------------------------------


def test_jsonl_lines_become_conversations_in_order() -> None:
    lines = [
        json.dumps({"resource": "alice", "thread": "t1", "role": "user", "content": "hi"}),
        "",
        json.dumps({"resource": "alice", "thread": "t1", "role": "Assistant", "content": "hey"}),
        json.dumps(
            {
                "resource": "bob",
                "thread": "t2",
                "role": "system",
                "content": "be brief",
                "id": "s-1",
                "created_at": "2024-01-15T10:30:00Z",
                "title": "Bob's chat",
            }
        ),
    ]
    report = read_jsonl_lines(lines)
    assert report.format == "jsonl"
    assert report.skipped == []
    assert [(c.resource_id, c.thread_id, c.title) for c in report.conversations] == [
        ("alice", "t1", None),
        ("bob", "t2", "Bob's chat"),
    ]
    first, second = report.conversations[0].messages
    assert isinstance(first, HumanMessage)
    assert isinstance(second, AIMessage)
    assert first.id
    assert second.id
    assert first.id != second.id
    system = report.conversations[1].messages[0]
    assert isinstance(system, SystemMessage)
    assert system.id == "s-1"
    assert system.additional_kwargs == {
        "created_at": "2024-01-15T10:30:00+00:00",
        TITLE_KEY: "Bob's chat",
    }
    assert report.message_count == 3


def test_jsonl_ids_are_stable_so_a_second_read_is_identical() -> None:
    line = json.dumps({"resource": "a", "thread": "t", "role": "user", "content": "same"})
    first = read_jsonl_lines([line, line]).conversations[0].messages
    again = read_jsonl_lines([line, line]).conversations[0].messages
    assert [m.id for m in first] == [m.id for m in again]
    assert first[0].id != first[1].id  # the same text twice is two messages


def test_a_json_escaped_lone_surrogate_is_imported_not_fatal() -> None:
    """`"\\ud800"` is valid JSON in a valid UTF-8 file; deriving its id crashed the whole
    ingest ("a file is not UTF-8 text ... convert it to UTF-8"), every other line lost."""
    lines = [
        '{"resource": "a", "thread": "t", "role": "user", "content": "lone \\ud800 half"}',
        _line("t", "assistant", "fine"),
    ]
    first = read_jsonl_lines(lines)
    assert not first.skipped
    messages = first.conversations[0].messages
    assert [m.content for m in messages] == ["lone \ud800 half", "fine"]
    assert [m.id for m in read_jsonl_lines(lines).conversations[0].messages] == [
        m.id for m in messages
    ]
    assert stable_id("t", "user", "ok", "", 0) == stable_id("t", "user", "ok", "", 0)
    assert stable_id("t", "user", "a\ud800", "", 0) != stable_id("t", "user", "a\ud801", "", 0)


def _line(thread: str, role: str, content: str) -> str:
    return json.dumps({"resource": "a", "thread": thread, "role": role, "content": content})


def test_a_derived_id_does_not_depend_on_the_other_lines_of_the_file() -> None:
    """Lines without an id keep theirs when the file changes around them: another
    thread's lines before them, a blank line, a bad line fixed or removed, the threads
    in another order. Only a line's own thread, role, time and text (and which repeat of
    the same text in its thread it is) make its id, so such a file imported again adds
    nothing."""
    chat = [_line("t1", "user", "I like tea"), _line("t1", "assistant", "noted")]
    chat += [_line("t1", "user", "ok"), _line("t1", "user", "ok")]  # a repeat: two messages

    def ids(lines: list[str]) -> list[str | None]:
        report = read_jsonl_lines(lines)
        return [m.id for c in report.conversations if c.thread_id == "t1" for m in c.messages]

    first = ids(chat)
    assert len(set(first)) == 4
    assert ids([_line("t0", "user", "another chat"), "", *chat]) == first
    assert ids([chat[0], "not json", *chat[1:]]) == first  # a bad line, fixed later
    assert ids([chat[0], _line("t0", "user", "x"), *chat[1:]]) == first


def test_a_derived_id_names_the_line_it_had_before_so_no_store_holds_it_twice() -> None:
    """A store may hold lines imported before their ids stopped depending on the line
    number: each derived id comes with that earlier id (`legacy_ids`), so ingest finds
    the message stored under it instead of writing it again."""
    lines = ["", _line("t1", "user", "I like tea"), _line("t1", "assistant", "noted")]
    conversation = read_jsonl_lines(lines).conversations[0]
    assert conversation.legacy_ids == {
        0: stable_id("t1", "user", "I like tea", "", 2),
        1: stable_id("t1", "assistant", "noted", "", 3),
    }
    given = json.dumps({"resource": "a", "thread": "t2", "role": "user", "content": "x", "id": "m"})
    assert read_jsonl_lines([given]).conversations[0].legacy_ids == {}  # its own id: none


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"thread": "t", "role": "user", "content": "x"}, "or pass --resource R"),
        ({"resource": " ", "thread": "t", "role": "user", "content": "x"}, "'resource' must be"),
        ({"resource": "a", "role": "user", "content": "x"}, "'thread' is missing"),
        ({"resource": "a", "thread": "", "role": "user", "content": "x"}, "'thread' must be"),
        ({"resource": "a", "thread": "t", "role": "robot", "content": "x"}, "'role' must be"),
        ({"resource": "a", "thread": "t", "role": "user", "content": 3}, "'content' must be"),
        ({"resource": "a", "thread": "t", "role": "tool", "content": "x"}, "'message' field"),
        ({"resource": "a", "thread": "t", "role": "user", "content": "x", "id": ""}, "'id'"),
        (
            {"resource": "a", "thread": "t", "role": "user", "content": "x", "created_at": "soon"},
            "ISO 8601",
        ),
        ({"resource": "a", "thread": "t", "role": "user", "content": "x", "title": 1}, "'title'"),
        (
            {"resource": "a", "thread": "t", "role": "user", "content": "x", "metadata": [1]},
            "'metadata' must be a mapping",
        ),
        (
            {"resource": "a", "thread": "t", "role": "user", "content": "x", "message": {"a": 1}},
            "not a LangChain message",
        ),
        (
            {
                "resource": "a",
                "thread": "t",
                "role": "user",
                "content": "x",
                "message": message_to_dict(AIMessage("x")),
            },
            "but 'role' is 'user'",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_jsonl_lines_are_reported_with_their_line_number(row: object, reason: str) -> None:
    good = json.dumps({"resource": "a", "thread": "t", "role": "user", "content": "ok"})
    report = read_jsonl_lines([good, json.dumps(row)])
    assert report.message_count == 1
    assert len(report.skipped) == 1
    assert report.skipped[0].where == "line 2"
    assert reason in report.skipped[0].reason


def test_jsonl_reports_lines_that_are_not_json_and_threads_that_change_owner() -> None:
    lines = [
        json.dumps({"resource": "a", "thread": "t", "role": "user", "content": "one"}),
        "{not json",
        json.dumps({"resource": "b", "thread": "t", "role": "user", "content": "two"}),
    ]
    report = read_jsonl_lines(lines)
    assert [(s.where, s.reason) for s in report.skipped] == [
        ("line 2", "not JSON (Expecting property name enclosed in double quotes)"),
        # Not "already belongs to 'a'": the store may say otherwise; this file does.
        (
            "line 3",
            "thread 't' is named for resource 'b' here but for 'a' on line 1 of this file: "
            "a thread has one resource (correct one of the lines)",
        ),
    ]


def test_jsonl_default_resource_fills_lines_without_one() -> None:
    line = json.dumps({"thread": "t", "role": "user", "content": "hi"})
    report = read_jsonl_lines([line], default_resource="carol")
    assert report.conversations[0].resource_id == "carol"


def test_demo_conversations_still_load() -> None:
    report = demo_conversations()
    assert report.skipped == []
    assert len(report.conversations) == 4


# --- ChatGPT -----------------------------------------------------------------------------


def test_chatgpt_export_keeps_user_and_assistant_text_of_the_main_branch() -> None:
    report = read_chatgpt_conversations(sample_export(), resource_id="alice")
    assert report.format == "chatgpt"
    trip, garden = report.conversations
    assert (trip.resource_id, trip.thread_id, trip.title) == ("alice", "conv-trip", "Lisbon trip")
    assert [type(m).__name__ for m in trip.messages] == ["HumanMessage", "AIMessage"] * 2
    assert [m.id for m in trip.messages] == [
        "conv-trip-1",
        "conv-trip-2",
        "conv-trip-3",
        "conv-trip-4",
    ]
    first = trip.messages[0]
    assert first.content == "We're going to Lisbon in March. Where should we stay?"
    assert first.additional_kwargs == {
        "created_at": "2024-01-15T10:31:00+00:00",
        TITLE_KEY: "Lisbon trip",
    }
    assert [m.content for m in garden.messages] == [
        "When can my tomato seedlings go outside near Porto?",
        "Late April, once nights stay above 10°C.",
    ]
    # The hidden system root is not worth a line; tool traffic is reported.
    assert [(s.where, s.reason) for s in report.skipped] == [
        ('conversation "Tomatoes"', "tool call"),
        ('conversation "Tomatoes"', "tool output"),
    ]


def test_chatgpt_follows_current_node_not_abandoned_branches() -> None:
    conversation = chatgpt_conversation(
        "c", "Edited", [("user", "first question"), ("assistant", "first answer")]
    )
    mapping = conversation["mapping"]
    # An edit of the question: a sibling branch that is NOT the current one.
    mapping["c-edit"] = {
        "id": "c-edit",
        "parent": "c-root",
        "children": [],
        "message": {
            "id": "c-edit",
            "author": {"role": "user"},
            "create_time": JAN_15 + 999,
            "content": {"content_type": "text", "parts": ["abandoned edit"]},
        },
    }
    mapping["c-root"]["children"].append("c-edit")
    report = read_chatgpt_conversations([conversation], resource_id="u")
    assert [m.content for m in report.conversations[0].messages] == [
        "first question",
        "first answer",
    ]
    # Without current_node: the newest leaf's branch.
    del conversation["current_node"]
    report = read_chatgpt_conversations([conversation], resource_id="u")
    assert [m.content for m in report.conversations[0].messages] == ["abandoned edit"]


def test_chatgpt_content_kinds_and_missing_fields() -> None:
    turns: list[Turn] = [
        ("user", "", {"content": {"content_type": "multimodal_text", "parts": [{"asset": 1}]}}),
        (
            "user",
            "",
            {"content": {"content_type": "multimodal_text", "parts": [{"asset": 1}, "look"]}},
        ),
        ("assistant", "", {"content": {"content_type": "code", "text": "print(1)"}}),
        ("assistant", "", {"content": {"content_type": "thoughts", "thoughts": []}}),
        ("user", "", {"content": {"content_type": "user_editable_context"}}),
        ("assistant", "plain", {"create_time": None}),
        ("assistant", "", {"content": "not a mapping"}),
        ("critic", "hm"),
    ]
    conversation = chatgpt_conversation(None, None, turns)
    report = read_chatgpt_conversations(conversation, resource_id="u")  # one object, no list
    (only,) = report.conversations
    assert only.thread_id  # derived: the conversation had no id
    assert [m.content for m in only.messages] == ["look", "plain"]
    # No create_time on the message: the conversation's is used.
    assert only.messages[1].additional_kwargs["created_at"] == "2024-01-15T10:30:00+00:00"
    reasons = [s.reason for s in report.skipped]
    assert reasons == [
        "no text (image, audio or file only)",
        PART_LEFT_OUT,
        "code run by a tool",
        "model reasoning",
        "custom instructions",
        "no content",
        "message from 'critic'",
    ]
    assert {s.where for s in report.skipped} == {"conversation #1"}


PART_LEFT_OUT = "image, audio, file or attachment left out (its message's text is kept)"


def test_images_and_attachments_beside_text_are_counted_not_dropped_unseen() -> None:
    """A message with text and an image (or a file, or an attachment) keeps its text;
    each part left out is reported, so the summary says the export held more."""
    image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"}
    turns: list[Turn] = [
        ("user", "", {"content": {"content_type": "multimodal_text", "parts": [image, "what?"]}}),
        ("assistant", "a cat"),
        ("user", "summarise it", {"metadata": {"attachments": [{"name": "a.pdf"}, {"id": 2}]}}),
        ("assistant", "cited", {"content": {"content_type": "text", "parts": ["x", {"c": 1}]}}),
    ]
    report = read_chatgpt_conversations([chatgpt_conversation("c", "C", turns)], resource_id="u")
    assert [m.content for m in report.conversations[0].messages] == [
        "what?",
        "a cat",
        "summarise it",
        "x",
    ]
    assert [s.reason for s in report.skipped] == [PART_LEFT_OUT] * 4


def test_a_voice_conversation_keeps_its_transcripts() -> None:
    """ChatGPT exports a spoken turn as `multimodal_text` with an `audio_transcription`
    part (its text) beside the audio's pointer: the transcript was dropped with the
    audio, and a voice conversation was reported as images only, with nothing imported."""
    audio = {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://file_1"}
    live = {
        "content_type": "real_time_user_audio_video_asset_pointer",
        "audio_asset_pointer": audio,
    }

    def spoken(text: str, direction: str, pointer: dict[str, Any]) -> dict[str, Any]:
        said = {"content_type": "audio_transcription", "text": text, "direction": direction}
        return {"content": {"content_type": "multimodal_text", "parts": [said, pointer]}}

    turns: list[Turn] = [
        ("user", "", spoken("Where should we stay in Lisbon?", "in", audio)),
        ("assistant", "", spoken("Try Alfama.", "out", live)),
    ]
    report = read_chatgpt_conversations(
        [chatgpt_conversation("v", "Voice", turns)], resource_id="u"
    )
    (conversation,) = report.conversations
    assert [m.content for m in conversation.messages] == [
        "Where should we stay in Lisbon?",
        "Try Alfama.",
    ]
    assert [s.reason for s in report.skipped] == [PART_LEFT_OUT] * 2  # the audio of each


def test_chatgpt_ids_no_storage_can_hold_are_derived_like_missing_ones() -> None:
    """A conversation or message id holding NUL or a lone surrogate (an export's JSON
    may) was passed on, and the first write refused it: the whole ingest stopped there
    with nothing imported. It is derived as a missing id is, so every conversation loads
    (the same on every import of the file)."""
    bad = chatgpt_conversation("bad\x00id", "Nul", [("user", "hi"), ("assistant", "yo")])
    odd = chatgpt_conversation("odd", "Odd", [("user", "hello")])
    odd["mapping"]["odd-0"]["message"]["id"] = "m\ud800"
    odd["mapping"]["odd-0"]["id"] = "n\x00"
    fine = chatgpt_conversation("fine", "Fine", [("user", "ok")])
    first = read_chatgpt_conversations([bad, odd, fine], resource_id="u")
    again = read_chatgpt_conversations([bad, odd, fine], resource_id="u")
    assert len(first.conversations) == 3
    assert first.skipped == []
    ids = [c.thread_id for c in first.conversations]
    ids += [m.id for c in first.conversations for m in c.messages if m.id is not None]
    assert all(storable(i) for i in ids)
    assert ids == [c.thread_id for c in again.conversations] + [
        m.id for c in again.conversations for m in c.messages if m.id is not None
    ]
    assert ids[1:3] == ["odd", "fine"]


def test_chatgpt_conversations_without_text_or_mapping_are_reported() -> None:
    export: list[Any] = [
        {"title": "Broken"},
        "nonsense",
        chatgpt_conversation("empty", "Empty", [("tool", "out")]),
        chatgpt_conversation("dup", "Dup", [("user", "a")]),
        chatgpt_conversation("dup", "Dup again", [("user", "b")]),
    ]
    report = read_chatgpt_conversations(export, resource_id="u")
    assert [c.thread_id for c in report.conversations] == ["dup"]
    assert [(s.where, s.reason) for s in report.skipped] == [
        ('conversation "Broken"', "no 'mapping' of messages"),
        ("conversation #2", "not a JSON object"),
        ('conversation "Empty"', "tool output"),
        ('conversation "Empty"', "no user or assistant text"),
        ("conversation #5", "repeats an earlier conversation id"),
    ]


def test_chatgpt_needs_a_resource_and_an_export() -> None:
    with pytest.raises(InvalidInputError, match="resource id"):
        read_chatgpt_conversations([], resource_id=" ")
    with pytest.raises(InvalidInputError, match="not a ChatGPT export"):
        read_chatgpt_conversations({"title": "x"}, resource_id="u")


def test_chatgpt_export_reads_json_files_and_zip_archives(tmp_path: Path) -> None:
    plain = tmp_path / "conversations.json"
    plain.write_text(json.dumps(sample_export()), encoding="utf-8")
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("chat.html", "<html></html>")
        handle.writestr("conversations.json", json.dumps(sample_export()))
    from_json = read_chatgpt_export(plain, resource_id="u")
    from_zip = read_chatgpt_export(archive, resource_id="u")
    assert from_json.message_count == from_zip.message_count == 6
    empty_zip = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty_zip, "w") as handle:
        handle.writestr("chat.html", "")
    with pytest.raises(InvalidInputError, match=r"no conversations\.json"):
        read_chatgpt_export(empty_zip, resource_id="u")
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="is not JSON") as failure:
        read_chatgpt_export(broken, resource_id="u")
    assert "JSON lines" not in str(failure.value)
    lines = tmp_path / "history.jsonl"  # our JSONL, read as an export (`--format chatgpt`)
    lines.write_text('{"role": "user"}\n{"role": "user"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="it looks like JSON lines"):
        read_chatgpt_export(lines, resource_id="u")


# --- detection and dispatch --------------------------------------------------------------


def test_detect_format(tmp_path: Path) -> None:
    cases = {
        "list.json": json.dumps(sample_export()),
        "one.json": json.dumps(sample_export()[0]),
        "lines.jsonl": json.dumps({"resource": "a", "thread": "t", "role": "user", "content": "x"})
        + "\n",
        "huge.json": '{"mapping": {"' + "x" * 70000,
        "broken.jsonl": '{"resource": "a", ' + "y" * 70000,
        "empty.jsonl": "",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "export.zip").write_bytes(b"")
    found = {name: detect_format(tmp_path / name) for name in [*cases, "export.zip"]}
    assert found == {
        "list.json": "chatgpt",
        "one.json": "chatgpt",
        "lines.jsonl": "jsonl",
        "huge.json": "chatgpt",
        "broken.jsonl": "jsonl",
        "empty.jsonl": "jsonl",
        "export.zip": "chatgpt",
    }


def test_read_conversations_dispatches_and_needs_a_resource_for_chatgpt(tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(sample_export()), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="give a resource id"):
        read_conversations(export)
    assert read_conversations(export, resource_id="u").format == "chatgpt"
    lines = tmp_path / "history.jsonl"
    lines.write_text(json.dumps({"thread": "t", "role": "user", "content": "x"}), encoding="utf-8")
    report = read_conversations(lines, resource_id="u")
    assert report.format == "jsonl"
    assert report.conversations[0].resource_id == "u"
    assert read_jsonl(lines).skipped[0].reason.startswith("'resource' is missing: give the")


def test_jsonl_names_the_python_api_field_it_got_instead(tmp_path: Path) -> None:
    lines = tmp_path / "history.jsonl"
    row = {"resource_id": "alice", "thread_id": "t", "role": "user", "content": "x"}
    lines.write_text(json.dumps(row), encoding="utf-8")
    report = read_jsonl(lines)
    assert report.conversations == []
    assert report.skipped[0].reason == (
        "'resource' is missing: this line has 'resource_id', which the JSONL calls 'resource'"
    )
    row = {"resource": "alice", "thread_id": "t", "role": "user", "content": "x"}
    lines.write_text(json.dumps(row), encoding="utf-8")
    assert "which the JSONL calls 'thread'" in read_jsonl(lines).skipped[0].reason


# --- export ------------------------------------------------------------------------------


def _stored(messages: list[Any], thread: str = "t", resource: str = "alice") -> list[Any]:
    storage = InMemoryStorage()
    now = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    storage.put(build_records(messages, thread_id=thread, resource_id=resource, now=now))
    from langchain_semantic_recall.records import ScopeFilter

    return storage.list_messages(ScopeFilter(thread_id=thread))


def test_export_lines_are_plain_for_plain_messages() -> None:
    stored = _stored(
        [
            HumanMessage("hi", id="m1", additional_kwargs={TITLE_KEY: "Greeting"}),
            AIMessage("hello", id="m2"),
        ]
    )
    rows = [json.loads(line) for line in export_lines(stored)]
    assert rows == [
        {
            "resource": "alice",
            "thread": "t",
            "role": "user",
            "content": "hi",
            "id": "m1",
            "created_at": "2024-03-01T09:00:00Z",
            "title": "Greeting",
        },
        {
            "resource": "alice",
            "thread": "t",
            "role": "assistant",
            "content": "hello",
            "id": "m2",
            "created_at": "2024-03-01T09:00:00.000001Z",
        },
    ]


def test_export_round_trips_metadata() -> None:
    """Metadata given to index(metadata=...) was left out of the export: lost on ingest."""
    storage = InMemoryStorage()
    now = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    turn = [HumanMessage("launch date?", id="u"), AIMessage("May", id="a")]
    own = HumanMessage("and gemini?", id="g", additional_kwargs={"metadata": {"project": "gemini"}})
    storage.put(build_records(turn, thread_id="t", resource_id="r", now=now, metadata=APOLLO))
    storage.put(build_records([own], thread_id="t", resource_id="r", now=now, metadata=APOLLO))
    from langchain_semantic_recall.records import ScopeFilter

    stored = storage.list_messages(ScopeFilter(thread_id="t"))
    rows = [json.loads(line) for line in export_lines(stored)]
    gemini = {**APOLLO, "project": "gemini"}  # its own key over the call's
    assert [row.get("metadata") for row in rows] == [APOLLO, APOLLO, gemini]
    assert ["message" in row for row in rows] == [False, False, False]
    (conversation,) = read_jsonl_lines(json.dumps(row) for row in rows).conversations
    again = build_records(conversation.messages, thread_id="t", resource_id="r", now=now)
    assert [dict(r.metadata) for r in again] == [dict(m.metadata) for m in stored]
    restored = _stored(conversation.messages, thread="t", resource="r")
    assert [json.loads(line) for line in export_lines(restored)] == rows  # a fixed point


APOLLO = {"project": "apollo", "urgent": True}


def test_export_round_trips_tool_calls_and_rich_content() -> None:
    originals = [
        SystemMessage("be brief", id="s"),
        HumanMessage(
            [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "x"}},
            ],
            id="u",
        ),
        AIMessage("", id="a", tool_calls=[{"name": "look", "args": {"q": 1}, "id": "call-1"}]),
        ToolMessage("a cat", tool_call_id="call-1", id="t"),
        AIMessage("It is a cat.", id="b", response_metadata={"model": "m"}, name="bot"),
    ]
    stored = _stored(originals)
    lines = list(export_lines(stored))
    rows = [json.loads(line) for line in lines]
    assert ["message" in row for row in rows] == [False, True, True, True, True]
    report = read_jsonl_lines(lines)
    assert report.skipped == []
    (conversation,) = report.conversations
    back = conversation.messages
    for original, restored, row in zip(originals, back, rows, strict=True):
        assert type(restored) is type(original)
        assert restored.id == original.id
        assert restored.content == original.content
        assert restored.additional_kwargs["created_at"] == row["created_at"].replace("Z", "+00:00")
    assert back[2].tool_calls == originals[2].tool_calls  # type: ignore[attr-defined]
    assert back[3].tool_call_id == "call-1"  # type: ignore[attr-defined]
    assert back[4].name == "bot"
    # Written again, the restored messages give the same lines (a fixed point).
    again = _stored(back)
    assert [json.loads(line) for line in export_lines(again)] == rows


def test_a_cached_reply_whose_usage_langchain_cannot_load_exports_and_imports() -> None:
    """On a cache hit LangChain's LLM cache sets a reply's usage to `{"total_cost": 0}`
    when it had none (`model_copy`, never validated): LangChain then refuses to load it,
    and the export holding it failed. Such usage is left out on reading; other usage is
    kept, and a message that is wrong in another way is still an error."""
    cached = AIMessage("Hello!", id="a").model_copy(update={"usage_metadata": {"total_cost": 0}})
    usage = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
    counted = AIMessage("Hi.", id="b", usage_metadata=usage)
    with pytest.raises(ValueError, match="input_tokens"):  # what LangChain itself does
        messages_from_dict([message_to_dict(cached)])
    stored = _stored([HumanMessage("hi", id="u"), cached, counted])
    assert stored[1].to_message().content == "Hello!"
    assert stored[2].to_message().usage_metadata == counted.usage_metadata  # type: ignore[attr-defined]
    report = read_jsonl_lines(list(export_lines(stored)))
    (conversation,) = report.conversations
    assert [m.content for m in conversation.messages] == ["hi", "Hello!", "Hi."]
    broken = message_to_dict(AIMessage("x"))
    broken["data"]["usage_metadata"] = {**usage, "input_tokens": "many"}  # counted, wrong
    with pytest.raises(ValueError, match="input_tokens"):
        load_message(broken)


def test_export_writes_text_utf8_cannot_hold_as_escapes_and_reads_it_back() -> None:
    """A lone surrogate (a ChatGPT export's JSON may hold one: `"\\ud800"`) is stored;
    its export line is JSON escapes, so the file is UTF-8 and reads back as the same
    message (it stopped `export` half way, leaving a cut file)."""
    originals = [HumanMessage("lone \ud800 half", id="u"), AIMessage("fine 😀", id="a")]
    lines = list(export_lines(_stored(originals)))
    for line in lines:
        line.encode("utf-8")  # raises on a lone surrogate
    assert "😀" in lines[1]  # only the line that needs them is escaped
    (conversation,) = read_jsonl_lines(lines).conversations
    assert [m.content for m in conversation.messages] == ["lone \ud800 half", "fine 😀"]


def test_the_public_names_stay_importable_from_importers() -> None:
    """One module per format, one place to import from: the split moved nothing."""
    from langchain_semantic_recall import importers
    from langchain_semantic_recall.importers import chatgpt, jsonl, report

    assert set(importers.__all__) == {
        "FORMATS",
        "TITLE_KEY",
        "Conversation",
        "Format",
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
    }
    assert all(hasattr(importers, name) for name in importers.__all__)
    assert importers.read_jsonl_lines is jsonl.read_jsonl_lines
    assert importers.read_chatgpt_export is chatgpt.read_chatgpt_export
    assert importers.ImportReport is report.ImportReport


# --- files that are not what they claim (issue 12) ----------------------------------------


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"resource": "r", "thread": "t", "role": "user", "content": "x", "id": "a\x00b"}, "NUL"),
        ({"resource": "r", "thread": "t\x00", "role": "user", "content": "x"}, "NUL"),
        ({"resource": "r", "thread": "t", "role": "user", "content": "x", "id": "  "}, "'id'"),
        ({"resource": "r", "thread": "t", "role": "user", "content": 3}, "'content'"),
        (
            {"resource": "r", "thread": "t", "role": "user", "content": "x", "created_at": "soon"},
            "",
        ),
    ],
)
def test_a_bad_line_is_reported_and_the_others_load(row: dict[str, Any], reason: str) -> None:
    good = {"resource": "r", "thread": "t", "role": "user", "content": "fine"}
    report = read_jsonl_lines([json.dumps(good), json.dumps(row), json.dumps(good | {"id": "z"})])
    assert [len(c.messages) for c in report.conversations] == [2]
    assert [s.where for s in report.skipped] == ["line 2"]
    assert reason in report.skipped[0].reason


def test_a_byte_order_mark_and_utf16_are_read(tmp_path: Path) -> None:
    line = json.dumps({"resource": "r", "thread": "t", "role": "user", "content": "héllo"})
    for name, data in [
        (
            "bom.jsonl",
            b"\xef\xbb\xbf" + line.encode() + b"\n" + line.replace('"t"', '"u"').encode(),
        ),
        ("utf16.jsonl", line.encode("utf-16")),
    ]:
        (tmp_path / name).write_bytes(data)
        assert detect_format(tmp_path / name) == "jsonl"
        report = read_conversations(tmp_path / name)
        assert not report.skipped
        assert report.conversations[0].messages[0].content == "héllo"


def test_other_encodings_are_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    line = json.dumps(
        {"resource": "r", "thread": "t", "role": "user", "content": "é"}, ensure_ascii=False
    )
    path.write_bytes(line.encode("latin-1"))
    with pytest.raises(InvalidInputError, match=r"not UTF-8 text.*convert it"):
        read_conversations(path, file_format="jsonl")


def test_broken_exports_are_input_errors(tmp_path: Path) -> None:
    broken = tmp_path / "export.zip"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InvalidInputError, match="not a readable zip"):
        read_chatgpt_export(broken, resource_id="alice")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InvalidInputError, match="nested too deeply"):
        read_chatgpt_export(deep, resource_id="alice")
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2, 3]", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not a ChatGPT export"):
        read_chatgpt_export(numbers, resource_id="alice")
    latin = tmp_path / "latin.json"
    latin.write_bytes(json.dumps([{"title": "é"}], ensure_ascii=False).encode("latin-1"))
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        read_chatgpt_export(latin, resource_id="alice")


# --- the keys of a line (a typo is a bad line, not a dropped field) -----------------------


def test_a_key_given_twice_makes_the_line_bad_at_any_depth() -> None:
    """JSON keeps the last of a repeated key: the first "content" (the message's real text)
    was dropped without a word and the line imported (an audit)."""
    twice = '{"resource":"a","thread":"t","role":"user","content":"my PIN hint","content":"hi"}'
    nested = '{"resource":"a","thread":"t","role":"user","content":"x","metadata":{"k":1,"k":2}}'
    good = '{"resource":"a","thread":"t","role":"user","content":"fine"}'
    report = read_jsonl_lines([twice, nested, good])
    assert [(s.where, s.reason) for s in report.skipped] == [
        ("line 1", "'content' given twice: keep one value"),
        ("line 2", "'k' given twice: keep one value"),
    ]
    assert [m.text for c in report.conversations for m in c.messages] == ["fine"]


def test_a_line_with_an_unknown_key_is_bad_and_names_the_key_it_meant() -> None:
    """`create_at` and `titel` were dropped: the line loaded dated today and untitled, and
    re-reading the corrected file wrote nothing (its id was stored already)."""
    good = {"resource": "carol", "thread": "t", "role": "user", "content": "fine"}
    typo = {
        "resource": "carol",
        "thread": "typo",
        "role": "user",
        "content": "old",
        "id": "ty1",
        "create_at": "2020-01-01T00:00:00Z",
        "titel": "Old",
    }
    report = read_jsonl_lines([json.dumps(good), json.dumps(typo), json.dumps(good | {"x": 1})])
    assert report.message_count == 1
    assert [s.where for s in report.skipped] == ["line 2", "line 3"]
    reason = report.skipped[0].reason
    assert reason.startswith(
        "unknown keys 'create_at' (did you mean 'created_at'?), 'titel' (did you mean 'title'?)"
    )
    assert "resource, thread, role, content, id, created_at, title, metadata, message" in reason
    assert report.skipped[1].reason.startswith("unknown key 'x';")


def test_every_key_export_writes_is_one_the_reader_accepts() -> None:
    tool = ToolMessage("42", tool_call_id="c1", id="m2")
    asked = AIMessage("", id="m1", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
    stored = _stored([HumanMessage("hi", id="m0"), asked, tool])
    written = {key for line in export_lines(stored) for key in json.loads(line)}
    assert written <= set(JSONL_KEYS)
    assert {"message", "resource", "thread", "role", "content", "id", "created_at"} <= written


def test_docs_cli_lists_exactly_the_keys_and_roles_the_reader_accepts() -> None:
    """docs/cli.md listed the roles user, assistant, system; `tool` is accepted too."""
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## Our JSONL format", 1)[1].split("```", 1)[0]
    for key in JSONL_KEYS:
        assert f"`{key}`" in section, key
    for role in JSONL_ROLES:
        assert f"`{role}`" in section, role


def test_jsonl_content_may_be_a_list_of_parts_as_langchain_gives_it() -> None:
    """An image message's content (LangChain's list of parts) was a bad line, "'content'
    must be a string", which named neither the shape it takes nor what to do; a line
    without 'content' said the same."""
    parts = [
        {"type": "text", "text": "What is in this picture of my cat?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    row = {"resource": "r", "thread": "t", "role": "user", "content": parts}
    report = read_jsonl_lines([json.dumps(row)])
    assert report.skipped == []
    (conversation,) = report.conversations
    assert conversation.messages[0].content == parts
    assert "picture of my cat" in conversation.messages[0].text
    missing = read_jsonl_lines([json.dumps({"resource": "r", "thread": "t", "role": "user"})])
    assert [s.reason for s in missing.skipped] == ["'content' is missing"]
    bad = read_jsonl_lines([json.dumps(row | {"content": [{"text": "no type"}]})])
    assert "a list of content parts" in bad.skipped[0].reason


def test_an_epoch_in_milliseconds_is_refused_with_its_reading_in_seconds() -> None:
    """`created_at: 1700000000000` (JavaScript's Date.now()) was "not a valid time", with
    no word of the unit the reader expects."""
    row = {"resource": "r", "thread": "t", "role": "user", "content": "x"}
    report = read_jsonl_lines([json.dumps(row | {"created_at": 1_700_000_000_000})])
    (skipped,) = report.skipped
    assert "epoch seconds are expected" in skipped.reason
    assert "milliseconds? divide by 1000: 2023-11-14T22:13:20Z" in skipped.reason
    huge = read_jsonl_lines([json.dumps(row | {"created_at": 10**30})])
    assert huge.skipped[0].reason.endswith("epoch seconds are expected")


def test_a_json_array_of_our_lines_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A JSON array of JSONL rows was taken for a ChatGPT export: ingest asked for
    --resource, then skipped every row ("no 'mapping' of messages") into a new empty store."""
    rows = [
        {"resource": "a", "thread": "t", "role": "user", "content": "hello"},
        {"resource": "a", "thread": "t", "role": "assistant", "content": "hi"},
    ]
    for name, text in {
        "rows.json": json.dumps(rows),
        "pretty.json": json.dumps(rows, indent=2),
    }.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InvalidInputError, match="one JSON object a line") as refused:
            detect_format(path)
        assert f"jq -c '.[]' {name}" in str(refused.value)
    (tmp_path / "list.json").write_text(json.dumps(sample_export()), encoding="utf-8")
    assert detect_format(tmp_path / "list.json") == "chatgpt"


def test_an_exported_chat_message_of_a_role_now_skipped_imports_as_its_stored_role() -> None:
    """Earlier versions stored `ChatMessage(role="critic")` as the user's; its export
    carries the message whole, and the import refused it ("'message' is a chat message
    but 'role' is 'user'"), so an old store's export did not re-import."""
    old = ChatMessage(role="critic", content="too salty", id="c1")
    line = {
        "resource": "alice",
        "thread": "t",
        "role": "user",
        "content": "too salty",
        "id": "c1",
        "message": message_to_dict(old),
    }
    report = read_jsonl_lines([json.dumps(line)])
    assert report.skipped == []
    [message] = report.conversations[0].messages
    assert isinstance(message, ChatMessage)
    assert (message.role, message.content, message.id) == ("user", "too salty", "c1")
