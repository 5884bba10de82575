"""`semantic-recall ingest`: load conversations from our JSONL format or a ChatGPT export."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    NotFoundError,
    UsageError,
    a_path,
    an_id,
    note_if_open_elsewhere,
    open_memory,
    print_json,
    progress_bar,
    require_writable,
    store_label,
    store_options,
    thread_messages,
)
from langchain_semantic_recall.cli.ingest_summary import IngestSummary, reason_counts
from langchain_semantic_recall.cli.render import error, style
from langchain_semantic_recall.errors import InvalidInputError, OwnershipError, ReadOnlyError
from langchain_semantic_recall.quoting import printable

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from langchain_semantic_recall.importers import Conversation, ImportReport
    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import IndexResult, StoredMessage

BATCH = 64
"""Messages per `index` call: one batched embedding call each, and a progress step."""

FORGOTTEN = "thread was forgotten (its id is retired)"
REPEATED, STORED = "the same line appears later in this file", "already stored"
REUSED = "its id is given again, with another message, later in this file"
UNREADABLE = frozenset({"not a JSON object", "no 'mapping' of messages"})
"""Reasons a ChatGPT export's conversation could not be read (an error, unlike tool output)."""
_FORMAT_NAMES = {"jsonl": "JSONL", "chatgpt": "ChatGPT export"}


def register(subparsers: Any) -> None:
    """Add the `ingest` subcommand."""
    parser = subparsers.add_parser(
        "ingest",
        parents=[store_options()],
        help="load conversations from a JSONL file or a ChatGPT export",
        description=(
            "Load conversations into the store: our JSONL format (one message a line: "
            "resource, thread, role, content, optional id, created_at, title, metadata, "
            "message; a line with another key is reported, not loaded) or a ChatGPT "
            "export (conversations.json, or the .zip that holds it; its main branch). "
            "Idempotent: messages already stored are skipped, so a second run adds nothing "
            "and a newer export adds only what is new."
        ),
        epilog=(
            "examples:\n"
            "  semantic-recall ingest conversations.json --resource alice\n"
            "  semantic-recall ingest chatgpt-export.zip --resource alice\n"
            "  semantic-recall ingest history.jsonl"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", type=a_path, help="the file to load")
    parser.add_argument(
        "--format",
        choices=("jsonl", "chatgpt"),
        help="the file's format (default: detected from its content)",
    )
    parser.add_argument(
        "--resource",
        metavar="R",
        type=an_id,
        help="whose conversations (required for a ChatGPT export; for JSONL, the resource "
        "of lines that have none)",
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="then embed the stored messages that have no vector (e.g. after an interrupted "
        "import): 'reindex --missing-only'",
    )
    parser.add_argument(
        "--restore",
        action="store_true",
        help="write threads that were forgotten too (their ids are retired: by default they "
        "are refused), e.g. to restore an export after 'forget'",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(
        func=run,
        interrupted="what was stored stays; run the same ingest again with --repair: it adds "
        "the rest and embeds the messages stored without a vector",
    )


def _read(args: argparse.Namespace) -> ImportReport:
    from langchain_semantic_recall.importers import detect_format, read_conversations

    path = Path(args.file)
    if path.is_dir():
        raise NotFoundError(
            f"{str(path)!r} is a directory, not a file: give the JSONL file, the ChatGPT "
            "export's conversations.json or its .zip"
        )
    if not path.is_file():
        raise NotFoundError(f"no file {str(path)!r}")
    file_format = args.format or detect_format(path)
    if file_format == "chatgpt" and not args.resource:
        raise UsageError(
            "a ChatGPT export does not say whose conversations it holds: pass --resource "
            "(e.g. --resource alice)"
        )
    return read_conversations(path, file_format=file_format, resource_id=args.resource)


def _span(conversation: Conversation) -> str:
    """Where a conversation is in the file: its lines, or its ChatGPT title."""
    first, last = conversation.place(0), conversation.place(len(conversation.messages) - 1)
    if first == last or not (first.startswith("line ") and last.startswith("line ")):
        return first
    return f"lines {first.removeprefix('line ')}-{last.removeprefix('line ')}"


def _refusal(
    memory: SemanticRecall, conversation: Conversation, owner: str | None, *, restore: bool
) -> str | None:
    """Why a conversation cannot be written to its thread, if it cannot."""
    thread, resource = conversation.thread_id, conversation.resource_id
    if owner is not None and owner != resource:
        return f"thread belongs to another resource ({owner!r})"
    if memory.storage.is_forgotten(thread):
        if not restore:
            return FORGOTTEN + "; pass --restore to write it again"
        memory.restore_thread(thread)
    return None


def _ingest_conversation(
    memory: SemanticRecall,
    conversation: Conversation,
    summary: IngestSummary,
    bar: Any,
    *,
    restore: bool,
    whole: bool = False,
) -> None:
    """Write one conversation's new and edited messages; count and report what it did.

    `whole`: the file holds the whole conversation (a ChatGPT export's main branch), so
    stored messages it lacks are reported (`IngestSummary.off_branch`).
    """
    storage = memory.storage
    thread = conversation.thread_id
    owner = storage.get_thread_owner(thread)
    forgotten = restore and owner is None and storage.is_forgotten(thread)
    refusal = _refusal(memory, conversation, owner, restore=restore)
    if refusal is not None:
        summary.threads_refused += 1
        summary.refuse(f"{_span(conversation)} (thread {thread!r})", refusal, len(conversation))
        bar.update(len(conversation))
        return
    have = {m.id: m for m in thread_messages(storage, thread)} if owner is not None else {}
    messages = _as_stored(conversation, have)
    if whole:  # the file holds the whole conversation: what else is stored left its branch
        stale = len(have.keys() - {m.id for m in messages})
        if stale:
            summary.off_branch.append((f"{_span(conversation)} (thread {thread!r})", stale))
    last = {m.id: n for n, m in enumerate(messages)}  # an id given twice: the last line wins
    new = [
        (n, m)
        for n, m in enumerate(messages)
        if last[m.id] == n and (m.id not in have or _edited(have[m.id], m))  # an edit too
    ]
    stored = set(last.values()) - {n for n, _ in new}  # the kept lines stored as they are
    bar.update(len(conversation) - len(new))
    written = summary.messages_added + summary.messages_updated
    for start in range(0, len(new), BATCH):
        stored |= _write(memory, conversation, new[start : start + BATCH], summary)
        bar.update(len(new[start : start + BATCH]))
    repeated = _repeated(conversation, messages, last, summary, stored)  # what became of them
    summary.skipped.update(
        {r: n for r, n in ((REPEATED, repeated), (STORED, len(last) - len(new))) if n}
    )
    if not new:
        summary.threads_unchanged += 1
    elif summary.messages_added + summary.messages_updated == written:
        summary.threads_refused += 1
    elif owner is None:
        summary.threads_new += 1
        summary.threads_restored += forgotten
    else:
        summary.threads_updated += 1


def _repeated(
    conversation: Conversation,
    messages: list[BaseMessage],
    last: dict[str | None, int],
    summary: IngestSummary,
    stored: set[int],
) -> int:
    """Report the lines whose id a later line of the conversation reuses; the later wins.

    A line repeated whole loses nothing and is counted (returned); one whose message
    differs is refused where it is, so the exit code says a line of the file was dropped.
    `stored`: the positions whose message is stored now, so the refusal says whether the
    later line is (it may have been refused or skipped too).
    """
    identical = 0
    for n, message in enumerate(messages):
        kept = last[message.id]
        if kept == n:
            continue
        if message == messages[kept]:
            identical += 1
            continue
        summary.refuse(
            conversation.place(n),
            f"its id {message.id!r} is given again, with another message, at "
            f"{conversation.place(kept)}, "
            + ("which was imported instead" if kept in stored else "which was not stored either")
            + ": give each message its own id",
            1,
            kind=REUSED,
        )
    return identical


def _as_stored(conversation: Conversation, have: dict[str, StoredMessage]) -> list[BaseMessage]:
    """The conversation's messages, each under the id it is stored with.

    A JSONL line without an id imported by an earlier version is stored under the id
    derived from its line number (`Conversation.legacy_ids`): it keeps that id, so it is
    found (and compared) rather than stored a second time.
    """
    messages = list(conversation.messages)
    for n, legacy in conversation.legacy_ids.items():
        if messages[n].id not in have and legacy in have:
            messages[n] = messages[n].model_copy(update={"id": legacy})
    return messages


def _edited(stored: StoredMessage, message: BaseMessage) -> bool:
    """Whether the file's message has another role or text than the stored one of its id."""
    from langchain_semantic_recall.messages import clean_text, role_of, text_of

    text = clean_text(text_of(message, "\n"))
    return stored.role != role_of(message) or stored.text != text


def _index(
    memory: SemanticRecall, messages: list[BaseMessage], thread: str, resource: str
) -> IndexResult:
    """`index` the messages; an unowned thread (an export says `NO_RESOURCE`) stays so.

    A live write may not name the mark as its resource (`records.check_owner`): the
    thread is written as thread scope writes one without a resource (`_refusal` has
    refused it already if a resource owns it here).

    Raises:
        OwnershipError: the thread, or a message id, belongs to another owner.
    """
    from langchain_semantic_recall.records import NO_RESOURCE

    if resource == NO_RESOURCE:
        return memory.with_options(scope="thread").index(messages, thread_id=thread)
    return memory.index(messages, thread_id=thread, resource_id=resource)


def _write(
    memory: SemanticRecall,
    conversation: Conversation,
    batch: list[tuple[int, BaseMessage]],
    summary: IngestSummary,
) -> set[int]:
    """Index one batch; when it is refused, find the refused messages one by one.

    Returns the positions (in the conversation) of its messages that are stored now.
    """
    thread, resource = conversation.thread_id, conversation.resource_id
    try:
        result = _index(memory, [m for _, m in batch], thread, resource)
    except OwnershipError as refused:
        if len(batch) == 1:
            summary.refuse(conversation.place(batch[0][0]), str(refused), 1)
            return set()
        # e.g. one message id already used by another thread
        return set().union(*(_write(memory, conversation, [item], summary) for item in batch))
    if result.forgotten:  # forgotten by someone else while we imported
        summary.refuse(conversation.place(batch[0][0]), FORGOTTEN, len(batch))
        return set()
    summary.messages_added += sum(f.fate == "stored" for f in result.fates)
    summary.messages_updated += sum(f.fate == "updated" for f in result.fates)
    for fate in result.fates:  # a line given twice: the later one is kept, this one counted
        if fate.fate == "skipped":
            summary.skipped[_file_reason(fate.reason)] += 1
        elif fate.fate == "unchanged":  # its id written by an earlier batch of this file
            summary.skipped[STORED] += 1
    summary.vectors += len(result.embedded)
    for reason in result.skipped.values():
        summary.not_embedded[reason] += 1
    if result.error is not None:  # written, and no reason (counted above) for no vector
        summary.vectors_failed += sum(
            f.fate in ("stored", "updated") and not f.embedded and f.reason is None
            for f in result.fates
        )
    kept = ("stored", "updated", "unchanged")
    return {batch[f.position][0] for f in result.fates if f.fate in kept}


def _file_reason(reason: str | None) -> str:
    """Why `index` skipped a message, said of the file's lines rather than of one call."""
    from langchain_semantic_recall.records import REPEATED_ID

    if reason == REPEATED_ID:
        return REPEATED
    return reason or "skipped"


def _print_unused_resource(summary: IngestSummary) -> None:
    """Say that `--resource` had no effect: every line named its own."""
    if summary.resource_unused is None:
        return
    named = ", ".join(summary.line_resources[:3])
    named += ", ..." if len(summary.line_resources) > 3 else ""
    said = (
        f"  note       --resource {summary.resource_unused} was used by no line: every "
        f"line names its own resource ({named})"
    )
    print(printable(said))


def _print_off_branch(summary: IngestSummary) -> None:
    """Name the conversations that keep stored messages their branch in the file lacks."""
    for where, count in summary.off_branch[:10]:
        print(
            style("  note", "yellow")
            + printable(f"       {count} stored message(s) of {where} are not ")
            + "on its branch in this file (edited or regenerated in ChatGPT since): they are "
            "kept beside it; to keep only this branch, 'forget --thread' it, then ingest "
            "again with --restore"
        )
    if len(summary.off_branch) > 10:
        print(f"             ... and {len(summary.off_branch) - 10} more conversations")


def _print_summary(summary: IngestSummary, report: ImportReport) -> None:
    name = _FORMAT_NAMES.get(summary.format, summary.format)
    print(style(f"Ingested {summary.file} ({name})", "bold"))
    threads = (
        f"{summary.threads_new} new, {summary.threads_updated} updated, "
        f"{summary.threads_unchanged} unchanged"
    )
    if summary.threads_refused:
        threads += f", {summary.threads_refused} refused"
    if summary.threads_restored:
        threads += f" ({summary.threads_restored} restored after a forget)"
    print(f"  threads    {threads}")
    refused = f", {summary.messages_refused} refused" if summary.messages_refused else ""
    updated = f", {summary.messages_updated} updated" if summary.messages_updated else ""
    print(f"  messages   {summary.messages_added} added{updated}{refused}")
    vectors = f"{summary.vectors} written"
    if summary.not_embedded:
        vectors += f" (stored without a vector: {reason_counts(summary.not_embedded)})"
    print(f"  vectors    {vectors}")
    total = sum(summary.skipped.values())
    skipped = f"  skipped    {total}" + (f" ({reason_counts(summary.skipped)})" if total else "")
    if summary.messages_refused:  # counted in both lines: say so, or they read as a sum
        skipped += f", the {summary.messages_refused} refused among them"
    print(skipped)
    bad = [item for item in report.skipped if _unreadable(report, item.reason)]
    for item in bad[:5]:  # what could not be read: say where it is
        print(style(printable(f"             {item.where}: {item.reason}"), "dim"))
    if len(bad) > 5:
        print(style(f"             ... and {len(bad) - 5} more", "dim"))
    for where, reason in summary.refusals[:10]:  # what was refused: say where it is
        print(style(printable(f"             refused {where}: {reason}"), "dim"))
    if len(summary.refusals) > 10:
        print(style(f"             ... and {len(summary.refusals) - 10} more refusals", "dim"))
    _print_unused_resource(summary)
    _print_off_branch(summary)
    if summary.vectors_repaired:
        print(f"  repaired   {summary.vectors_repaired} missing vector(s) written")
    if summary.snapshots:
        ready = f"{summary.snapshots} resource(s) ready for a fast first search"
        print(f"  snapshots  {ready} (their vectors saved in one file each)")
    if summary.vectors_failed:
        print(
            style(f"  warning    {summary.vectors_failed} message(s) stored without vectors", "red")
            + " (embedding failed; run 'semantic-recall ingest --repair' or 'reindex "
            "--missing-only')"
        )
    elif summary.vectors_missing:
        from langchain_semantic_recall.embeddings import UNUSABLE_NAN, UNUSABLE_ZERO

        unusable = any(why in (UNUSABLE_NAN, UNUSABLE_ZERO) for why in summary.not_embedded)
        why = "unusable vectors, above" if unusable else "an earlier import was interrupted?"
        print(
            style(f"  warning    {summary.vectors_missing} stored message(s) lack a vector", "red")
            + f" ({why}); rerun with --repair"
        )


def _unreadable(report: ImportReport, reason: str) -> bool:
    """Whether a skipped item is a read failure (an error) rather than a choice."""
    return report.format == "jsonl" or reason in UNREADABLE


def run(args: argparse.Namespace) -> int:
    """`semantic-recall ingest`: read a JSONL file or ChatGPT export into the store."""
    report = _read(args)
    summary = IngestSummary(file=args.file, format=report.format)
    for item in report.skipped:
        summary.skipped[item.reason] += 1
        if _unreadable(report, item.reason):
            summary.unreadable += 1
            summary.bad_lines.append((item.where, item.reason))
    if not report.conversations and not report.skipped:
        raise InvalidInputError(f"{args.file} holds no conversations")
    named = sorted({c.resource_id for c in report.conversations})
    if args.resource and report.format == "jsonl" and named and args.resource not in named:
        summary.resource_unused, summary.line_resources = args.resource, named
    require_writable(args, "nothing was ingested")
    note_if_open_elsewhere(args, "ingest")
    memory = open_memory(args, create=True)
    if memory.read_only:  # its index would skip every message: say why, write nothing
        raise ReadOnlyError(
            "the store opened read-only (this user cannot write it): nothing was ingested"
        )
    with progress_bar(report.message_count, "msg", "ingest") as bar:
        for conversation in report.conversations:
            _ingest_conversation(
                memory,
                conversation,
                summary,
                bar,
                restore=args.restore,
                whole=report.format == "chatgpt",
            )
    summary.vectors_missing = memory.stats().missing_vectors
    if args.repair and summary.vectors_missing:
        with progress_bar(summary.vectors_missing, "msg", "repair") as bar:
            summary.vectors_repaired = memory.reindex(missing_only=True, progress=bar.update)
        summary.vectors_missing = memory.stats().missing_vectors
    from langchain_semantic_recall.settings import settle_snapshots

    summary.snapshots = settle_snapshots(memory.vector_store)
    if args.json:
        print_json({**summary.as_json(), "store": store_label(args)})
    else:
        _print_summary(summary, report)
    return _outcome(summary, report, as_json=args.json)


def _outcome(summary: IngestSummary, report: ImportReport, *, as_json: bool = False) -> int:
    """The exit code, with one error line for each reason it is not 0, and where it is listed."""
    bad = "in the JSON's 'unreadable_lines'" if as_json else "above"
    refused = "in the JSON's 'refused'" if as_json else "above"
    code = EXIT_OK
    if not report.conversations:
        error(f"nothing in {summary.file} could be imported (reasons listed {bad})")
        return EXIT_ERROR
    if summary.messages_refused:
        if not summary.messages_added and not summary.skipped[STORED]:
            error(
                f"nothing in {summary.file} was imported: every message was refused "
                f"(listed {refused})"
            )
            return EXIT_ERROR
        error(
            f"{summary.messages_refused} message(s) of {summary.file} were refused (listed "
            f"{refused} with where they are)"
        )
        code = EXIT_ERROR
    if summary.unreadable:
        what = "line(s)" if report.format == "jsonl" else "conversation(s)"
        error(f"{summary.unreadable} {what} of {summary.file} could not be read (listed {bad})")
        code = EXIT_ERROR
    if summary.vectors_failed or summary.vectors_missing:
        error(
            f"{max(summary.vectors_missing, summary.vectors_failed)} stored message(s) have "
            "no vector, so search cannot find them; "
            "run 'semantic-recall ingest FILE --repair' or 'semantic-recall reindex "
            "--missing-only'"
        )
        code = EXIT_ERROR
    return code
