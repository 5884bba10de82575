"""Reading the paraphrase set (`eval paraphrase DIR`), and making its store busy.

The set is a folder of three files:

- `paraphrase_dev.jsonl`: `{id, persona, fact, reply, question, answer_terms, kind}` lines.
  Each persona is a resource; each `fact` (user) and `reply` (assistant) is its own
  conversation (thread `id`, message ids `<id>/fact` and `<id>/reply`, written an hour
  apart from 2024-01-01 in file order, the reply a second after the fact); each
  `question` is asked in a new conversation of the resource, category `kind` (`direct`
  or `indirect`). A question is *found* when one of its `answer_terms` is a word of the
  returned messages' text (case-insensitive); its evidence is the fact's message, so
  `recall` says whether the fact itself was returned.
- `smalltalk_dev.jsonl`, `offtopic_dev.jsonl`: `{text}` lines that nothing stored
  answers, asked of every persona as probes of kind `"small talk"` and `"off-topic"`.

`add_busy` adds unrelated LoCoMo sessions to each persona's resource, so the facts sit
among a few hundred messages of other chat, as they do in a real memory. It picks them
with `busy_sessions`, the rule `benchmarks/quality_relevance.py` uses for its busy store,
so that `eval paraphrase --busy` measures the store whose figures docs/quality.md gives.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from os import PathLike
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.eval_locomo import read_locomo
from langchain_semantic_recall.eval_records import (
    Dataset,
    EvalConversation,
    EvalProbe,
    EvalQuestion,
)
from langchain_semantic_recall.importers.report import read_text
from langchain_semantic_recall.messages import CREATED_AT_KEY

__all__ = [
    "BUSY_MESSAGES",
    "PARAPHRASE_FILE",
    "PROBE_FILES",
    "add_busy",
    "busy_sessions",
    "read_paraphrase",
    "read_probe_files",
]

PARAPHRASE_FILE = "paraphrase_dev.jsonl"
"""The facts and their questions, in the set's folder."""
PROBE_FILES: dict[str, str] = {
    "small talk": "smalltalk_dev.jsonl",
    "off-topic": "offtopic_dev.jsonl",
}
"""Probe kind -> the file of the set's folder that holds its `{text}` lines."""
BUSY_MESSAGES = 330
"""Fewest unrelated messages `add_busy` adds to each persona's resource (the benchmark's)."""

_FIRST_FACT = datetime(2024, 1, 1, tzinfo=UTC)
_FIELDS = ("id", "persona", "fact", "reply", "question", "kind")


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise InvalidInputError(f"the paraphrase set has no {path.name} in {path.parent}")
    rows = []
    for line_no, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise InvalidInputError(f"{path}, line {line_no}: not JSON ({error})") from error
        if not isinstance(row, dict):
            raise InvalidInputError(f"{path}, line {line_no}: expected a JSON object")
        rows.append((line_no, row))
    return rows


def _fact(row: dict[str, Any], where: str) -> tuple[list[str], tuple[str, ...]]:
    """The row's text fields (in `_FIELDS` order) and answer terms, checked."""
    values = [row.get(name) for name in _FIELDS]
    missing = [name for name, value in zip(_FIELDS, values, strict=True) if not value]
    terms = row.get("answer_terms")
    words = (
        tuple(t for t in terms if isinstance(t, str) and t.strip())
        if isinstance(terms, list)
        else ()
    )
    if not words:
        missing.append("answer_terms (a list of words)")
    if missing or not all(isinstance(v, str) for v in values):
        raise InvalidInputError(f"{where}: needs text in {missing or list(_FIELDS)}")
    return [str(v) for v in values], words


def read_paraphrase(directory: str | PathLike[str]) -> Dataset:
    """Read the paraphrase set in `directory` (see the module docstring)."""
    folder = Path(directory)
    dataset = Dataset(conversations=[], questions=[])
    seen: set[str] = set()
    for position, (line_no, row) in enumerate(_rows(folder / PARAPHRASE_FILE)):
        where = f"{folder / PARAPHRASE_FILE}, line {line_no}"
        (fact_id, persona, fact, reply, question, kind), terms = _fact(row, where)
        if fact_id in seen:
            raise InvalidInputError(f"{where}: id {fact_id!r} is used twice")
        seen.add(fact_id)
        written = _FIRST_FACT + timedelta(hours=position)
        messages = [
            HumanMessage(
                fact,
                id=f"{fact_id}/fact",
                additional_kwargs={CREATED_AT_KEY: written.isoformat()},
            ),
            AIMessage(
                reply,
                id=f"{fact_id}/reply",
                additional_kwargs={CREATED_AT_KEY: (written + timedelta(seconds=1)).isoformat()},
            ),
        ]
        dataset.conversations.append(EvalConversation(persona, fact_id, messages))
        dataset.questions.append(
            EvalQuestion(persona, question, kind, (f"{fact_id}/fact",), answer_terms=terms)
        )
    dataset.probes.extend(read_probe_files(folder))
    return dataset


def read_probe_files(directory: str | PathLike[str]) -> list[EvalProbe]:
    """The small-talk and off-topic lines of the set's folder (`PROBE_FILES`), as probes.

    `eval --probes DIR` asks them of any dataset's resources, as the benchmark does.
    """
    folder = Path(directory)
    probes = []
    for kind, name in PROBE_FILES.items():
        for line_no, row in _rows(folder / name):
            text = row.get("text")
            if not isinstance(text, str) or not text.strip():
                raise InvalidInputError(f"{folder / name}, line {line_no}: needs 'text'")
            probes.append(EvalProbe(kind, text))
    return probes


def busy_sessions(
    sessions: list[EvalConversation], resources: list[str], messages: int = BUSY_MESSAGES
) -> dict[str, list[EvalConversation]]:
    """The LoCoMo sessions each resource gets to make its store busy.

    With n resources, the i-th takes sessions i, i + n, i + 2n, ... of `sessions` (in the
    file's order, so each resource gets sessions of every conversation, none shared) until
    it has at least `messages` messages, or its share runs out (`add_busy` refuses that).
    """
    chosen: dict[str, list[EvalConversation]] = {}
    for index, resource in enumerate(resources):
        picked: list[EvalConversation] = []
        for session in sessions[index :: len(resources)]:
            picked.append(session)
            if sum(len(s.messages) for s in picked) >= messages:
                break
        chosen[resource] = picked
    return chosen


def add_busy(
    dataset: Dataset, locomo: str | PathLike[str], *, messages: int = BUSY_MESSAGES
) -> dict[str, list[str]]:
    """Add unrelated LoCoMo sessions to every resource of `dataset`; say which.

    The choice is fixed (`busy_sessions`, over the resources in the order they first
    appear). Their threads and message ids are prefixed with `busy/<resource>/`, so they
    never collide with the set's own. Returns resource -> the LoCoMo threads it got.
    """
    sessions = read_locomo(locomo).conversations
    if not sessions:
        raise InvalidInputError(f"{locomo} has no LoCoMo conversation to make the store busy")
    picks = busy_sessions(sessions, dataset.resources, messages)
    short = {r: sum(len(s.messages) for s in p) for r, p in picks.items()}
    short = {r: n for r, n in short.items() if n < messages}
    if short:
        raise InvalidInputError(
            f"{locomo} has too few messages to make every store busy: of {len(picks)} "
            f"resources, each takes one session in {len(picks)}, and {short} got fewer "
            f"than the {messages} each resource needs"
        )
    chosen: dict[str, list[str]] = {}
    for resource, picked in picks.items():
        prefix = f"busy/{resource}/"
        for session in picked:
            copies = [m.model_copy(update={"id": prefix + str(m.id)}) for m in session.messages]
            dataset.conversations.append(
                EvalConversation(resource, prefix + session.thread_id, copies)
            )
        chosen[resource] = [session.thread_id for session in picked]
    return chosen
