"""Probes for false memories: turns where nothing in memory is relevant (pure, no I/O).

Recall should stay silent when the newest message has nothing to do with what is stored
(`SPEC.md` section 11). `semantic-recall eval` measures it two ways:

- **foreign questions**: each conversation's questions asked of *another* conversation's
  resource (`foreign_pairs`): nothing there is evidence for them;
- **small talk**: the turns of `SMALL_TALK` (greetings, thanks, acknowledgements, requests
  for help that name no topic) asked of every resource (category `"built-in"`);
- **the dataset's own probes** (`dataset_probes`): its probe lines (`{"probe": ...,
  "kind": ...}` in `eval jsonl`; the paraphrase set's small talk and off-topic questions),
  each asked of every resource that holds messages, or of the one it names (category
  `"dataset"`), reported under its kind.

For both, what counts is how many messages recall returns per question (ideally none) and
the share of questions that return any (`probe`, `summarize_probes`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.eval_records import QUERY_THREAD, EvalQuestion

if TYPE_CHECKING:
    from langchain_semantic_recall.eval_records import Dataset, EvalProbe
    from langchain_semantic_recall.recall import SemanticRecall

__all__ = [
    "BUILT_IN",
    "FROM_DATASET",
    "SMALL_TALK",
    "Probe",
    "dataset_probes",
    "foreign_pairs",
    "foreign_questions",
    "probe",
    "small_talk_questions",
    "summarize_probes",
]

Probe = tuple[str, str, str, int]
"""One probe's outcome: (kind, category, resource asked, messages returned)."""

SMALL_TALK: tuple[str, ...] = (
    "hi",
    "hello",
    "hey there!",
    "good morning",
    "good evening",
    "how are you?",
    "how's it going?",
    "thanks",
    "thank you so much!",
    "ok",
    "okay, sounds good",
    "yes",
    "no",
    "sure",
    "cool",
    "great!",
    "lol",
    "bye",
    "see you later",
    "can you help me?",
    "I have a question",
    "what do you think?",
    "tell me more",
    "please continue",
    "never mind",
    "got it, thanks",
    "hmm",
    "sorry, what?",
)
"""Small-talk turns: none of them asks about anything a memory could hold."""
BUILT_IN = "built-in"
"""Category of the `SMALL_TALK` probes."""
FROM_DATASET = "dataset"
"""Category of the dataset's own probe lines (`dataset_probes`)."""


def foreign_pairs(resources: Sequence[str]) -> dict[str, str]:
    """Each resource -> the resource its questions are asked of: the next one, cyclically.

    With one resource there is no other to ask: the mapping is empty.
    """
    if len(resources) < 2:
        return {}
    ordered = list(dict.fromkeys(resources))
    return {name: ordered[(i + 1) % len(ordered)] for i, name in enumerate(ordered)}


def foreign_questions(dataset: Dataset) -> list[EvalQuestion]:
    """Each question asked of the next resource (`foreign_pairs`) instead of its own.

    A question asked inside its conversation's thread (`--scope thread`) is asked inside
    the other resource's thread of the same name. One asked in a thread of its own
    resource (an `eval jsonl` question's `thread`) is asked in a new thread of the other:
    that thread is not the other's to search in (a search naming it is refused).
    """
    pairs = foreign_pairs([q.sample_id for q in dataset.questions])
    out = []
    for question in dataset.questions:
        other = pairs.get(question.sample_id)
        if other is None:
            continue
        thread = other if question.thread_id == question.sample_id else QUERY_THREAD
        out.append(replace(question, sample_id=other, thread_id=thread, evidence=()))
    return out


def small_talk_questions(dataset: Dataset) -> list[EvalQuestion]:
    """Every `SMALL_TALK` turn asked of every resource that has questions."""
    resources = dict.fromkeys(q.sample_id for q in dataset.questions)
    threads = {q.sample_id: q.thread_id for q in dataset.questions}
    return [
        EvalQuestion(resource, text, BUILT_IN, (), threads[resource])
        for resource in resources
        for text in SMALL_TALK
    ]


def dataset_probes(dataset: Dataset) -> dict[str, list[EvalQuestion]]:
    """The dataset's probe lines by kind, each asked of its resource or of every one.

    A probe that names no resource is asked of every resource that holds messages; its
    `thread`, if any, only of the resource whose conversation it is (the others are asked
    in a new thread: a search naming another resource's thread is refused).
    """
    owner = dataset.thread_owners
    out: dict[str, list[EvalQuestion]] = {}
    for line in dataset.probes:
        resources = [line.resource] if line.resource is not None else dataset.resources
        out.setdefault(line.kind, []).extend(
            EvalQuestion(resource, line.text, FROM_DATASET, (), _asked_in(owner, line, resource))
            for resource in resources
        )
    return out


def _asked_in(owner: dict[str, str], line: EvalProbe, resource: str) -> str:
    """The probe's thread if `resource` may ask in it (its own, or no one's), else a new one."""
    return line.thread_id if owner.get(line.thread_id) in (None, resource) else QUERY_THREAD


def probe(memory: SemanticRecall, kind: str, questions: Sequence[EvalQuestion]) -> list[Probe]:
    """Ask each question with `memory.search`; count the messages its windows return."""
    out: list[Probe] = []
    for question in questions:
        hits = memory.search(
            question.question, thread_id=question.thread_id, resource_id=question.sample_id
        )
        returned = {m.id for hit in hits for m in hit.window}
        out.append((kind, question.category, question.sample_id, len(returned)))
    return out


def _counts(sizes: Sequence[int]) -> dict[str, float | int]:
    return {
        "questions": len(sizes),
        "messages_per_query": statistics.fmean(sizes) if sizes else 0.0,
        "any": statistics.fmean(size > 0 for size in sizes) if sizes else 0.0,
    }


def summarize_probes(probes: Sequence[Probe]) -> dict[str, Any]:
    """Per kind: messages per question and the share with any.

    Overall, per category and per resource asked (the folds).
    """
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(p[0] for p in probes):
        mine = [p for p in probes if p[0] == kind]
        out[kind] = {
            "overall": _counts([p[3] for p in mine]),
            "by_category": {
                c: _counts([p[3] for p in mine if p[1] == c]) for c in sorted({p[1] for p in mine})
            },
            "by_resource": {
                r: _counts([p[3] for p in mine if p[2] == r]) for r in sorted({p[2] for p in mine})
            },
        }
    return out
