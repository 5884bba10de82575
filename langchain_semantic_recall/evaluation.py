"""Measuring recall on conversations with evidence labels (LoCoMo, our JSONL, paraphrases).

The evaluation drives the real path: every conversation is loaded with
`SemanticRecall.index` and every question is answered by `SemanticRecall.search`, the
very call `recall` makes before each model call. A question's *returned* messages are
those of the hits' windows, deduplicated: what recall would inject. Scores per question:

- `recall`: the fraction of its evidence messages that were returned;
- `hit_all` / `hit_any`: all / at least one of them returned;
- `messages`: how many messages were returned (what the model has to read);
- `latency`: the search's wall time, query embedding included.

**LoCoMo** (Maharana et al., ACL 2024; `locomo10.json` or a subset): each conversation
is a resource, each session a thread (`--scope thread`: the whole conversation is one
thread), speaker A the user and speaker B the assistant; a turn's content is
`"<speaker>: <text>"` plus `" [shared image: <caption>]"` when it has one, created at
the session's time plus one second per turn. Categories: 1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial (left out unless asked for). Malformed
evidence ids are normalised (`"D:11:26"` -> `D11:26`, `"D30:05"` -> `D30:5`,
`"D8:6; D9:17"` -> two ids) and ids of turns that do not exist are dropped; both are
counted in the report. Readers: `eval_locomo`, `eval_paraphrase` (records: `eval_records`).

**Our JSONL** (`read_eval_jsonl`): the `ingest` format (one message a line, see
`langchain_semantic_recall.importers`), with an `id` on every message that a
question cites, plus one line per question:

```json
{"resource": "alice", "thread": "trip", "role": "user", "id": "m1",
 "content": "We land in Lisbon on the 3rd", "created_at": "2024-01-15T10:30:00Z"}
{"question": "When do we land?", "resource": "alice", "evidence": ["m1"],
 "category": "temporal"}
```

A question line has `question`, `resource` (one the file holds messages of) and
`evidence` (message ids of that resource), and optionally `category` (default `"uncategorized"`)
and `thread` (one of its resource's conversations, where it is asked; by default a new
one, so every conversation of the resource is searched). `--foreign` asks it of another
resource in a new thread.

A **probe line** is a turn nothing stored answers (small talk, an off-topic question):

```json
{"probe": "thanks!", "kind": "small talk"}
{"probe": "How do black holes form?", "kind": "off-topic"}
```

It has `probe` (the text) and `kind` (any label: the report has one table per kind), and
optionally `resource` (default: asked of every resource that holds messages) and `thread`
(default: a new conversation). It is scored like `--small-talk`: messages returned per
line and the share of lines that return any (`false_memory`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.eval_locomo import (
    ADVERSARIAL,
    LOCOMO_CATEGORIES,
    normalise_evidence,
    read_locomo,
)
from langchain_semantic_recall.eval_records import (
    PROBE_KEYS,
    QUERY_THREAD,
    QUESTION_KEYS,
    UNCATEGORIZED,
    Dataset,
    EvalConversation,
    EvalProbe,
    EvalQuestion,
    EvidenceReport,
    QuestionResult,
    check_line_keys,
)

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import RecallHit
    from langchain_semantic_recall.search import SearchPlan

__all__ = [
    "ADVERSARIAL",
    "LOCOMO_CATEGORIES",
    "QUERY_THREAD",
    "Dataset",
    "EvalConversation",
    "EvalProbe",
    "EvalQuestion",
    "EvidenceReport",
    "QuestionResult",
    "aevaluate",
    "default_threshold",
    "engine_defaults",
    "evaluate",
    "load_dataset",
    "normalise_evidence",
    "read_eval_jsonl",
    "read_locomo",
    "read_probes",
    "summarize",
]


def read_eval_jsonl(path: str | PathLike[str]) -> Dataset:
    """Read our JSONL evaluation format (see the module docstring).

    Args:
        path: The JSONL file.
    """
    from langchain_semantic_recall.importers import read_jsonl_lines

    message_lines, rows, probes = _split_lines(path)
    report = read_jsonl_lines(message_lines)
    if report.skipped:
        first = report.skipped[0]
        raise InvalidInputError(
            f"{path}: {len(report.skipped)} bad message line(s); {first.where}: {first.reason}"
        )
    dataset = Dataset(
        conversations=[
            EvalConversation(c.resource_id, c.thread_id, list(c.messages))
            for c in report.conversations
        ],
        questions=[],
        probes=probes,
    )
    _refuse_shared_ids(path, dataset)
    if QUERY_THREAD in {c.thread_id for c in dataset.conversations}:
        raise InvalidInputError(
            f"{path}: thread {QUERY_THREAD!r} is the one eval asks a question in when it "
            "names none; give those messages another thread name"
        )
    unknown = {p.resource for p in probes if p.resource is not None} - set(dataset.resources)
    if unknown:
        raise InvalidInputError(
            f"{path}: probe lines name resource(s) with no message: {sorted(unknown)}; "
            "leave 'resource' out to ask every resource"
        )
    owners = {m.id: c.resource_id for c in dataset.conversations for m in c.messages if m.id}
    threads = dataset.thread_owners
    for line_no, row in rows:
        where = f"{path}, line {line_no}"
        question = _question_line(row, where, owners, threads, dataset.evidence)
        if question is not None:
            dataset.questions.append(question)
    return dataset


def _refuse_shared_ids(path: str | PathLike[str], dataset: Dataset) -> None:
    """Refuse a message id two threads share, before anything is loaded.

    A message id belongs to one thread: the load would stop at the second, minutes in,
    and leave a `--store` half loaded.

    Raises:
        InvalidInputError: an id names messages of two threads.
    """
    seen: dict[str, str] = {}
    for conversation in dataset.conversations:
        for message in conversation.messages:
            if not message.id:
                continue
            first = seen.setdefault(message.id, conversation.thread_id)
            if first != conversation.thread_id:
                raise InvalidInputError(
                    f"{path}: message id {message.id!r} is in threads {first!r} and "
                    f"{conversation.thread_id!r}; a message id belongs to one thread"
                )


def _split_lines(
    path: str | PathLike[str],
) -> tuple[list[str], list[tuple[int, dict[str, Any]]], list[EvalProbe]]:
    """The message lines (for the importer), the question lines and the probes.

    Read as `ingest` reads the format: UTF-8 (a byte order mark dropped) or UTF-16 with
    its byte order mark, cut at line feeds only.
    """
    from langchain_semantic_recall.importers.report import read_text

    message_lines: list[str] = []
    rows: list[tuple[int, dict[str, Any]]] = []
    probes: list[EvalProbe] = []
    for line_no, line in enumerate(read_text(Path(path)).split("\n"), start=1):
        stripped = line.strip()
        if stripped.startswith("{") and ('"question"' in stripped or '"probe"' in stripped):
            try:
                row = json.loads(stripped)
            except json.JSONDecodeError as error:  # a broken question or probe line
                raise InvalidInputError(
                    f"{path}, line {line_no}: not JSON ({error.msg})"
                ) from error
            if isinstance(row, dict) and "question" in row:
                rows.append((line_no, row))
                message_lines.append("\n")  # a blank line: the importer counts it, skips it
                continue
            if isinstance(row, dict) and "probe" in row:
                probes.append(_probe_line(row, f"{path}, line {line_no}"))
                message_lines.append("\n")
                continue
        message_lines.append(line if stripped else "\n")
    return message_lines, rows, probes


def _question_line(
    row: dict[str, Any],
    where: str,
    owners: dict[str, str],
    threads: dict[str, str],
    report: EvidenceReport,
) -> EvalQuestion | None:
    """The question of a line, or None (counted) when none of its evidence exists.

    `owners`: message id -> resource; `threads`: thread id -> resource. A question for a
    resource that holds no message (a misspelt one), or asked in a thread of another
    resource, is refused: it would be dropped, or refused by the search after the load.
    """
    check_line_keys(row, QUESTION_KEYS, where)
    question, resource = row.get("question"), row.get("resource")
    if not isinstance(question, str) or not isinstance(resource, str):
        raise InvalidInputError(f"{where}: needs 'question' and 'resource'")
    if not question.strip():  # a search finds nothing for it: scored as a miss, not found
        raise InvalidInputError(f"{where}: 'question' is empty")
    entries = row.get("evidence")
    if not isinstance(entries, list):
        raise InvalidInputError(f"{where}: 'evidence' must be a list of ids")
    if resource not in threads.values():
        raise InvalidInputError(f"{where}: resource {resource!r} holds no message of the file")
    thread = str(row.get("thread") or QUERY_THREAD)
    if threads.get(thread, resource) != resource:
        raise InvalidInputError(
            f"{where}: thread {thread!r} is a conversation of {threads[thread]!r}, not of "
            f"{resource!r}; ask in one of {resource!r}'s threads, or leave 'thread' out"
        )
    evidence: list[str] = []
    for entry in map(str, entries):
        if (owner := owners.get(entry)) != resource:
            report.unknown_dropped += 1
            why = "no such message" if owner is None else f"a message of {owner!r}"
            report.note(f"{where}: {entry!r} dropped ({why})")
        elif entry not in evidence:
            evidence.append(entry)
    if not evidence:
        report.questions_without_evidence += 1
        return None
    return EvalQuestion(
        resource, question, str(row.get("category", UNCATEGORIZED)), tuple(evidence), thread
    )


def read_probes(path: str | PathLike[str], resources: Sequence[str]) -> list[EvalProbe]:
    """Probe lines to ask of any dataset (`eval --probes PATH`).

    Args:
        path: A JSONL file of probe lines (`{"probe": ..., "kind": ...}`, see the module
            docstring; nothing else), or a folder holding the paraphrase set's
            small-talk and off-topic files (`eval_paraphrase.PROBE_FILES`).
        resources: The dataset's resources: a probe line may only name one of them.
    """
    from langchain_semantic_recall.eval_paraphrase import read_probe_files

    source = Path(path)
    if source.is_dir():
        return read_probe_files(source)
    from langchain_semantic_recall.importers.report import read_text

    probes = []
    for line_no, line in enumerate(read_text(source).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{source}, line {line_no}"
        try:
            row = json.loads(line)
        except ValueError as error:
            raise InvalidInputError(f"{where}: not JSON ({error})") from error
        if not isinstance(row, dict) or "probe" not in row:
            raise InvalidInputError(f'{where}: expected a probe line {{"probe", "kind"}}')
        probes.append(_probe_line(row, where))
    unknown = {p.resource for p in probes if p.resource is not None} - set(resources)
    if unknown:
        raise InvalidInputError(
            f"{source}: probe lines name resource(s) with no message: {sorted(unknown)}; "
            "leave 'resource' out to ask every resource"
        )
    return probes


def _probe_line(row: dict[str, Any], where: str) -> EvalProbe:
    check_line_keys(row, PROBE_KEYS, where)
    text, kind = row.get("probe"), row.get("kind")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"{where}: 'probe' must be the text to ask")
    if not isinstance(kind, str) or not kind.strip():
        raise InvalidInputError(f"{where}: a probe line needs a 'kind' (small talk, off-topic)")
    resource = row.get("resource")
    if resource is not None and not isinstance(resource, str):
        raise InvalidInputError(f"{where}: 'resource' must be a string")
    return EvalProbe(kind.strip(), text, resource, str(row.get("thread") or QUERY_THREAD))


# --- running ------------------------------------------------------------------------------


def _bar(total: int, description: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="msg", disable=not enabled, leave=False)


def load_dataset(memory: SemanticRecall, dataset: Dataset, *, progress: bool = True) -> None:
    """Index every conversation, one per call; only an unusable vector is not a failure.

    Args:
        memory: The engine to index into.
        dataset: The conversations to index.
        progress: Show a progress bar.
    """
    with _bar(dataset.message_count, "loading", progress) as bar:
        for conversation in dataset.conversations:
            result = memory.index(
                conversation.messages,
                thread_id=conversation.thread_id,
                resource_id=conversation.resource_id,
            )
            written = [f for f in result.fates if f.fate in ("stored", "updated")]
            if result.error and any(not f.embedded and f.reason is None for f in written):
                raise InvalidInputError(f"indexing {conversation.thread_id} failed: {result.error}")
            bar.update(len(conversation.messages))


def _returned(hits: Sequence[RecallHit], prefix: str) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for hit in hits:
        for message in hit.window:
            seen.setdefault(message.id.removeprefix(prefix), None)
    return tuple(seen)


def evaluate(
    memory: SemanticRecall, dataset: Dataset, *, progress: bool = True
) -> list[QuestionResult]:
    """Ask every question with `memory.search` (the dataset must be loaded).

    Args:
        memory: The engine holding the loaded dataset.
        dataset: The questions to ask, with their evidence.
        progress: Show a progress bar.
    """
    results: list[QuestionResult] = []
    from tqdm import tqdm

    for question in tqdm(dataset.questions, desc="querying", unit="q", disable=not progress):
        started = time.perf_counter()
        hits = memory.search(
            question.question, thread_id=question.thread_id, resource_id=question.sample_id
        )
        elapsed = (time.perf_counter() - started) * 1000
        results.append(_result(question, hits, elapsed, dataset))
    return results


async def aevaluate(
    memory: SemanticRecall, dataset: Dataset, *, progress: bool = True
) -> list[QuestionResult]:
    """Async twin of `evaluate` (questions asked one after another)."""
    results: list[QuestionResult] = []
    from tqdm import tqdm

    for question in tqdm(dataset.questions, desc="querying", unit="q", disable=not progress):
        started = time.perf_counter()
        hits = await memory.asearch(
            question.question, thread_id=question.thread_id, resource_id=question.sample_id
        )
        elapsed = (time.perf_counter() - started) * 1000
        results.append(_result(question, hits, elapsed, dataset))
    return results


def _result(
    question: EvalQuestion, hits: Sequence[RecallHit], elapsed: float, dataset: Dataset
) -> QuestionResult:
    prefix = dataset.id_prefixes.get(question.sample_id, "")
    return QuestionResult(
        sample_id=question.sample_id,
        question=question.question,
        category=question.category,
        evidence=question.evidence,
        returned=_returned(hits, prefix),
        latency_ms=elapsed,
        answered=_answered(question.answer_terms, hits) if question.answer_terms else None,
    )


def _answered(terms: Sequence[str], hits: Sequence[RecallHit]) -> bool:
    """Whether a term is a word of the returned messages' text (case-insensitive)."""
    texts = {m.id: m.text for hit in hits for m in hit.window}
    pattern = re.compile("|".join(rf"\b{re.escape(t)}\b" for t in terms), re.IGNORECASE)
    return any(pattern.search(text) for text in texts.values())


# --- scoring ------------------------------------------------------------------------------


def _percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def _scores(results: Sequence[QuestionResult]) -> dict[str, float | int]:
    count = len(results)
    if not count:
        return {"questions": 0}
    latencies = [r.latency_ms for r in results]
    answered = [r.answered for r in results if r.answered is not None]
    found = {"found": sum(answered) / len(answered)} if answered else {}
    return {
        **found,
        "questions": count,
        "recall": sum(r.recall for r in results) / count,
        "hit_all": sum(r.found == len(r.evidence) for r in results) / count,
        "hit_any": sum(r.found > 0 for r in results) / count,
        "messages_per_query": sum(len(r.returned) for r in results) / count,
        "latency_p50_ms": _percentile(latencies, 0.50),
        "latency_p95_ms": _percentile(latencies, 0.95),
    }


def summarize(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """Scores per category (sorted) and overall.

    Args:
        results: One result per question, from `evaluate`.
    """
    categories = sorted({r.category for r in results})
    return {
        "by_category": {c: _scores([r for r in results if r.category == c]) for c in categories},
        "overall": _scores(results),
    }


def question_rows(results: Sequence[QuestionResult]) -> list[dict[str, Any]]:
    """The per-question records of `--json-out` (enough to re-score independently)."""
    return [
        {
            "sample_id": r.sample_id,
            "question": r.question,
            "category": r.category,
            "evidence": list(r.evidence),
            "returned": list(r.returned),
            "latency_ms": round(r.latency_ms, 3),
            **({} if r.answered is None else {"found": r.answered}),
        }
        for r in results
    ]


def evidence_summary(report: EvidenceReport) -> dict[str, Any]:
    return asdict(report)


# --- the engine's defaults ----------------------------------------------------------------


def engine_defaults(mode: str) -> SearchPlan:
    """The settings an engine takes in `mode` when no option is given (`eval --help`).

    Read from the engine's own resolution (`search.resolve`), so the help cannot drift
    from the code.

    Args:
        mode: `"hybrid"`, `"dense"`, `"keyword"` or `"auto"`.
    """
    from langchain_semantic_recall.search import resolve

    return resolve(
        search_mode=mode,
        keyword_search=True,
        top_k=None,
        message_range=None,
        message_budget="auto",
        threshold=None,
    )


def default_threshold() -> float | None:
    """The hybrid mode's default threshold (None: the evidence decides), for `eval --help`."""
    return engine_defaults("hybrid").threshold
