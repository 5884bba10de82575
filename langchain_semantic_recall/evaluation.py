"""Measuring recall on conversations with evidence labels (LoCoMo, or our own JSONL).

The evaluation drives the real path: every conversation is loaded with
`SemanticRecall.index` and every question is answered by `SemanticRecall.search`,
the very call `recall` makes before each model call. A question's
*returned* messages are those of the hits' windows, deduplicated: exactly what recall
would inject for it. Scores per question:

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
counted in the report.

**Our JSONL** (`read_eval_jsonl`): the `ingest` format (one message a line, see
`langchain_semantic_recall.importers`), with an `id` on every message that a
question cites, plus one line per question:

```json
{"resource": "alice", "thread": "trip", "role": "user", "id": "m1",
 "content": "We land in Lisbon on the 3rd", "created_at": "2024-01-15T10:30:00Z"}
{"question": "When do we land?", "resource": "alice", "evidence": ["m1"],
 "category": "temporal"}
```

A question line has `question`, `resource` and `evidence` (message ids), and
optionally `category` (default `"all"`) and `thread` (the conversation it is asked
in; by default a new one, so every conversation of the resource is searched).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.messages import CREATED_AT_KEY

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import RecallHit

__all__ = [
    "LOCOMO_CATEGORIES",
    "Dataset",
    "EvalConversation",
    "EvalQuestion",
    "EvidenceReport",
    "QuestionResult",
    "aevaluate",
    "evaluate",
    "load_dataset",
    "normalise_evidence",
    "read_eval_jsonl",
    "read_locomo",
    "summarize",
]

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = 5
QUERY_THREAD = "semantic-recall-eval"
"""Thread a question is asked in when it names none (a new conversation of its resource)."""

_LOCOMO_TIME = "%I:%M %p on %d %B, %Y"
_EVIDENCE_ID = re.compile(r"^D\s*:?\s*0*(\d+)\s*:\s*0*(\d+)$")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+(?=D)")


@dataclass
class EvalConversation:
    """One thread to load: its resource, id and messages (with ids and times)."""

    resource_id: str
    thread_id: str
    messages: list[BaseMessage]


@dataclass(frozen=True)
class EvalQuestion:
    """A question, the messages that hold its answer, and where it is asked."""

    sample_id: str
    """The resource it is asked for."""
    question: str
    category: str
    evidence: tuple[str, ...]
    """Evidence message ids, as the dataset names them (LoCoMo: `dia_id`)."""
    thread_id: str = QUERY_THREAD


@dataclass
class EvidenceReport:
    """What was done to the dataset's evidence ids."""

    normalised: int = 0
    """Ids rewritten to their canonical form (`"D:11:26"` -> `D11:26`)."""
    split: int = 0
    """Entries holding several ids (`"D8:6; D9:17"`), split."""
    unknown_dropped: int = 0
    """Ids of messages that do not exist, dropped."""
    unparseable_dropped: int = 0
    """Entries that are no id at all (`"D"`), dropped."""
    questions_without_evidence: int = 0
    """Questions left with no evidence (not scored)."""
    examples: list[str] = field(default_factory=list)
    """A few of the entries changed or dropped, for the report."""


@dataclass
class Dataset:
    """Conversations to load and questions to ask."""

    conversations: list[EvalConversation]
    questions: list[EvalQuestion]
    evidence: EvidenceReport = field(default_factory=EvidenceReport)
    id_prefixes: dict[str, str] = field(default_factory=dict)
    """Resource -> prefix of its message ids in the store (stripped in the results)."""

    @property
    def message_count(self) -> int:
        """Messages in every conversation of the dataset."""
        return sum(len(c.messages) for c in self.conversations)


@dataclass(frozen=True)
class QuestionResult:
    """The outcome of one question."""

    sample_id: str
    question: str
    category: str
    evidence: tuple[str, ...]
    returned: tuple[str, ...]
    """Ids of the returned messages, in hit order (dataset ids)."""
    latency_ms: float

    @property
    def found(self) -> int:
        """How many evidence messages were returned."""
        return len(set(self.evidence) & set(self.returned))

    @property
    def recall(self) -> float:
        """The fraction of the evidence messages that were returned."""
        return self.found / len(self.evidence)


# --- evidence ids ------------------------------------------------------------------------


def normalise_evidence(
    entries: Iterable[object], known: set[str], report: EvidenceReport
) -> tuple[str, ...]:
    """Canonical LoCoMo evidence ids of `entries` that name existing turns (counted)."""
    kept: list[str] = []
    for entry in entries:
        text = str(entry).strip()
        pieces = [p.strip() for p in _EVIDENCE_SPLIT.split(text) if p.strip()]
        if len(pieces) > 1:
            report.split += 1
            _example(report, f"{text!r} split")
        for piece in pieces or [text]:
            match = _EVIDENCE_ID.match(piece)
            if match is None:
                report.unparseable_dropped += 1
                _example(report, f"{piece!r} dropped (not an id)")
                continue
            canonical = f"D{int(match.group(1))}:{int(match.group(2))}"
            if canonical != piece:
                report.normalised += 1
                _example(report, f"{piece!r} -> {canonical!r}")
            if canonical not in known:
                report.unknown_dropped += 1
                _example(report, f"{canonical!r} dropped (no such turn)")
                continue
            if canonical not in kept:
                kept.append(canonical)
    return tuple(kept)


def _example(report: EvidenceReport, text: str) -> None:
    if len(report.examples) < 20:
        report.examples.append(text)


# --- readers -----------------------------------------------------------------------------


def _locomo_sessions(conversation: dict[str, Any]) -> Iterator[tuple[int, list[Any], datetime]]:
    numbers = sorted(
        int(key.split("_")[1])
        for key, value in conversation.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
    )
    for number in numbers:
        when = conversation.get(f"session_{number}_date_time")
        try:
            start = datetime.strptime(str(when), _LOCOMO_TIME).replace(tzinfo=UTC)
        except ValueError as error:
            raise InvalidInputError(
                f"session_{number}_date_time {when!r} is not like '1:56 pm on 8 May, 2023'"
            ) from error
        yield number, conversation[f"session_{number}"], start


def _turn_message(turn: dict[str, Any], user: str, created: datetime, prefix: str) -> BaseMessage:
    speaker, text = str(turn.get("speaker", "")), str(turn.get("text", ""))
    content = f"{speaker}: {text}"
    caption = turn.get("blip_caption")
    if caption:
        content += f" [shared image: {caption}]"
    cls = HumanMessage if speaker == user else AIMessage
    return cls(
        content,
        id=prefix + str(turn["dia_id"]),
        additional_kwargs={CREATED_AT_KEY: created.isoformat()},
    )


def read_locomo(
    path: str | PathLike[str], *, include_adversarial: bool = False, one_thread: bool = False
) -> Dataset:
    """Read LoCoMo (a list of samples) into conversations and questions.

    Args:
        path: `locomo10.json` or a file of the same shape.
        include_adversarial: Keep category 5 (unanswerable) questions.
        one_thread: Load each conversation as one thread and ask its questions inside it
            (for `scope="thread"`); by default each session is a thread and questions
            are asked in a new thread of the conversation's resource.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: expected a JSON list of LoCoMo samples")
    dataset = Dataset(conversations=[], questions=[])
    for sample in data:
        sample_id = str(sample["sample_id"])
        conversation = sample["conversation"]
        prefix = f"{sample_id}:"
        dataset.id_prefixes[sample_id] = prefix
        user = str(conversation.get("speaker_a"))
        known: set[str] = set()
        threads: list[EvalConversation] = []
        for number, turns, start in _locomo_sessions(conversation):
            thread_id = sample_id if one_thread else f"{sample_id}/session_{number}"
            if not threads or threads[-1].thread_id != thread_id:
                threads.append(EvalConversation(sample_id, thread_id, []))
            for position, turn in enumerate(turns):
                created = start + timedelta(seconds=position)
                threads[-1].messages.append(_turn_message(turn, user, created, prefix))
                known.add(str(turn["dia_id"]))
        dataset.conversations.extend(threads)
        for qa in sample.get("qa", []):
            category = int(qa.get("category", 0))
            if category == ADVERSARIAL and not include_adversarial:
                continue
            evidence = normalise_evidence(qa.get("evidence", []), known, dataset.evidence)
            if not evidence:
                dataset.evidence.questions_without_evidence += 1
                continue
            label = f"{category} {LOCOMO_CATEGORIES.get(category, 'other')}"
            thread = sample_id if one_thread else QUERY_THREAD
            dataset.questions.append(
                EvalQuestion(sample_id, str(qa["question"]), label, evidence, thread)
            )
    return dataset


def read_eval_jsonl(path: str | PathLike[str]) -> Dataset:
    """Read our JSONL evaluation format (see the module docstring)."""
    from langchain_semantic_recall.importers import read_jsonl_lines

    message_lines: list[str] = []
    rows: list[tuple[int, dict[str, Any]]] = []
    with Path(path).open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            stripped = line.strip()
            if stripped.startswith("{") and '"question"' in stripped:
                row = json.loads(stripped)
                if isinstance(row, dict) and "question" in row:
                    rows.append((line_no, row))
                    continue
            message_lines.append(line if stripped else "\n")
    report = read_jsonl_lines(message_lines)
    if report.skipped:
        first = report.skipped[0]
        raise InvalidInputError(f"{path}: {len(report.skipped)} bad message line(s): {first}")
    dataset = Dataset(
        conversations=[
            EvalConversation(c.resource_id, c.thread_id, list(c.messages))
            for c in report.conversations
        ],
        questions=[],
    )
    owners = {m.id: c.resource_id for c in dataset.conversations for m in c.messages if m.id}
    for line_no, row in rows:
        question, resource = row.get("question"), row.get("resource")
        if not isinstance(question, str) or not isinstance(resource, str):
            raise InvalidInputError(f"{path}, line {line_no}: needs 'question' and 'resource'")
        entries = row.get("evidence")
        if not isinstance(entries, list):
            raise InvalidInputError(f"{path}, line {line_no}: 'evidence' must be a list of ids")
        evidence: list[str] = []
        for entry in map(str, entries):
            if owners.get(entry) != resource:
                dataset.evidence.unknown_dropped += 1
                _example(dataset.evidence, f"line {line_no}: {entry!r} dropped (no such message)")
            elif entry not in evidence:
                evidence.append(entry)
        if not evidence:
            dataset.evidence.questions_without_evidence += 1
            continue
        dataset.questions.append(
            EvalQuestion(
                resource,
                question,
                str(row.get("category", "all")),
                tuple(evidence),
                str(row.get("thread") or QUERY_THREAD),
            )
        )
    return dataset


# --- running ------------------------------------------------------------------------------


def _bar(total: int, description: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="msg", disable=not enabled, leave=False)


def load_dataset(memory: SemanticRecall, dataset: Dataset, *, progress: bool = True) -> None:
    """Index every conversation with `memory.index`, one call per thread."""
    with _bar(dataset.message_count, "loading", progress) as bar:
        for conversation in dataset.conversations:
            result = memory.index(
                conversation.messages,
                thread_id=conversation.thread_id,
                resource_id=conversation.resource_id,
            )
            if result.error is not None:
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
    """Ask every question with `memory.search` (the dataset must be loaded)."""
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
    )


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
    return {
        "questions": count,
        "recall": sum(r.recall for r in results) / count,
        "hit_all": sum(r.found == len(r.evidence) for r in results) / count,
        "hit_any": sum(r.found > 0 for r in results) / count,
        "messages_per_query": sum(len(r.returned) for r in results) / count,
        "latency_p50_ms": _percentile(latencies, 0.50),
        "latency_p95_ms": _percentile(latencies, 0.95),
    }


def summarize(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """Scores per category (sorted) and overall."""
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
        }
        for r in results
    ]


def evidence_summary(report: EvidenceReport) -> dict[str, Any]:
    return asdict(report)
