"""Reading LoCoMo (Maharana et al., ACL 2024) for the evaluation (see `evaluation`).

Each conversation is a resource, each session a thread (or one thread per conversation
for `scope="thread"`), speaker A the user and speaker B the assistant. Malformed evidence
ids are normalised or dropped, and counted (`normalise_evidence`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from os import PathLike
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.eval_records import (
    QUERY_THREAD,
    Dataset,
    EvalConversation,
    EvalQuestion,
    EvidenceReport,
)
from langchain_semantic_recall.importers.report import read_text
from langchain_semantic_recall.messages import CREATED_AT_KEY

__all__ = ["ADVERSARIAL", "LOCOMO_CATEGORIES", "normalise_evidence", "read_locomo"]

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = 5

_LOCOMO_TIME = "%I:%M %p on %d %B, %Y"
_EVIDENCE_ID = re.compile(r"^D\s*:?\s*0*(\d+)\s*:\s*0*(\d+)$")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+(?=D)")


# --- evidence ids ------------------------------------------------------------------------


def normalise_evidence(
    entries: Iterable[object], known: set[str], report: EvidenceReport
) -> tuple[str, ...]:
    """Canonical LoCoMo evidence ids of `entries` that name existing turns (counted).

    Args:
        entries: Evidence entries as the file gives them (strings, possibly malformed).
        known: The ids of the turns the conversation holds.
        report: Where malformed or unknown entries are counted.
    """
    kept: list[str] = []
    for entry in entries:
        text = str(entry).strip()
        pieces = [p.strip() for p in _EVIDENCE_SPLIT.split(text) if p.strip()]
        if len(pieces) > 1:
            report.split += 1
            report.note(f"{text!r} split")
        for piece in pieces or [text]:
            match = _EVIDENCE_ID.match(piece)
            if match is None:
                report.unparseable_dropped += 1
                report.note(f"{piece!r} dropped (not an id)")
                continue
            canonical = f"D{int(match.group(1))}:{int(match.group(2))}"
            if canonical != piece:
                report.normalised += 1
                report.note(f"{piece!r} -> {canonical!r}")
            if canonical not in known:
                report.unknown_dropped += 1
                report.note(f"{canonical!r} dropped (no such turn)")
                continue
            if canonical not in kept:
                kept.append(canonical)
    return tuple(kept)


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
    try:
        data = json.loads(read_text(Path(path)))
    except ValueError as error:  # not JSON, or not UTF-8
        raise InvalidInputError(f"{path}: not a LoCoMo JSON file ({error})") from error
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: expected a JSON list of LoCoMo samples")
    dataset = Dataset(conversations=[], questions=[])
    for number, sample in enumerate(data, start=1):
        try:
            _read_sample(dataset, sample, include_adversarial, one_thread)
        except InvalidInputError as error:  # says what is wrong (a bad date, evidence)
            raise InvalidInputError(f"{path}: sample #{number}, {error}") from error
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InvalidInputError(
                f"{path}: sample #{number} is not a LoCoMo sample ({type(error).__name__}: {error})"
            ) from error
    return dataset


def _read_sample(
    dataset: Dataset, sample: dict[str, Any], include_adversarial: bool, one_thread: bool
) -> None:
    """Add one LoCoMo sample's sessions and questions to `dataset`."""
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
    for position, qa in enumerate(sample.get("qa", []), start=1):
        category = int(qa.get("category", 0))
        if category == ADVERSARIAL and not include_adversarial:
            continue
        entries = qa.get("evidence", [])
        if not isinstance(entries, list):  # a string would be read letter by letter
            raise InvalidInputError(
                f"question {position}: 'evidence' must be a list of dia_ids, got {entries!r}"
            )
        evidence = normalise_evidence(entries, known, dataset.evidence)
        if not evidence:
            dataset.evidence.questions_without_evidence += 1
            continue
        label = f"{category} {LOCOMO_CATEGORIES.get(category, 'other')}"
        thread = sample_id if one_thread else QUERY_THREAD
        dataset.questions.append(
            EvalQuestion(sample_id, str(qa["question"]), label, evidence, thread)
        )
