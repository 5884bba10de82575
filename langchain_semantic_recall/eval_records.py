"""The records of an evaluation: conversations to load, questions and probes to ask, results.

Plain data shared by `evaluation` (readers, running, scoring), `eval_paraphrase` and
`false_memory`; `evaluation` re-exports every name.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.errors import InvalidInputError

__all__ = [
    "QUERY_THREAD",
    "UNCATEGORIZED",
    "Dataset",
    "EvalConversation",
    "EvalProbe",
    "EvalQuestion",
    "EvidenceReport",
    "QuestionResult",
]

QUERY_THREAD = "semantic-recall-eval"
"""Thread a question is asked in when it names none (a new conversation of its resource)."""
UNCATEGORIZED = "uncategorized"
"""Category of a question line without one (it was "all", read beside "overall")."""


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
    answer_terms: tuple[str, ...] = ()
    """Words of the answer (the paraphrase set): found when one is in the returned text."""


@dataclass(frozen=True)
class EvalProbe:
    """A turn nothing stored answers (small talk, an off-topic question): a probe line."""

    kind: str
    """Its report: `"small talk"`, `"off-topic"`, ..."""
    text: str
    resource: str | None = None
    """The resource it is asked of; None: every resource that holds messages."""
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

    def note(self, text: str) -> None:
        """Keep `text` as an example, up to 20 of them.

        Args:
            text: One example of a malformed or unknown entry.
        """
        if len(self.examples) < 20:
            self.examples.append(text)


@dataclass
class Dataset:
    """Conversations to load and questions to ask."""

    conversations: list[EvalConversation]
    questions: list[EvalQuestion]
    evidence: EvidenceReport = field(default_factory=EvidenceReport)
    id_prefixes: dict[str, str] = field(default_factory=dict)
    """Resource -> prefix of its message ids in the store (stripped in the results)."""
    probes: list[EvalProbe] = field(default_factory=list)
    """Turns nothing stored answers, asked as false-memory probes (`false_memory`)."""

    @property
    def message_count(self) -> int:
        """Messages in every conversation of the dataset."""
        return sum(len(c.messages) for c in self.conversations)

    @property
    def resources(self) -> list[str]:
        """The resources that hold messages, in the order they first appear."""
        return list(dict.fromkeys(c.resource_id for c in self.conversations))

    @property
    def thread_owners(self) -> dict[str, str]:
        """Thread id -> the resource whose conversation it is."""
        return {c.thread_id: c.resource_id for c in self.conversations}


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
    answered: bool | None = None
    """Whether an answer term was in the returned text (None: the question has none)."""

    @property
    def found(self) -> int:
        """How many evidence messages were returned."""
        return len(set(self.evidence) & set(self.returned))

    @property
    def recall(self) -> float:
        """The fraction of the evidence messages that were returned."""
        return self.found / len(self.evidence)


QUESTION_KEYS = ("question", "resource", "evidence", "category", "thread")
"""What a question line of our JSONL may hold."""
PROBE_KEYS = ("probe", "kind", "resource", "thread")
"""What a probe line may hold."""
_MEANT = {"thread_id": "thread", "resource_id": "resource", "categories": "category"}
"""Other names of a line's keys, refused with the name the format reads."""


def check_line_keys(row: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    """Refuse a question or probe line with a misspelt key.

    A misspelt optional key (`"categroy"`) was ignored: the question was scored under
    a default category, the probe asked of every resource, and nothing said so. Other keys are
    annotations and stay allowed (`answer`, `question_id`): a key is misspelt when it is
    another name of one of `allowed` (`thread_id`, `categories`: `_MEANT`), or close to
    one (difflib's ratio 0.8) and of about its length.

    Raises:
        InvalidInputError: naming the misspelt key and the key it resembles.
    """
    for key in sorted(set(row) - set(allowed)):
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.8)
        close = [c for c in close if abs(len(c) - len(key)) <= 2]
        close = [_MEANT[key]] if _MEANT.get(key) in allowed else close
        if close:
            raise InvalidInputError(
                f"{where}: unknown key {key!r}; did you mean {close[0]!r}? A {allowed[0]} "
                f"line may have {', '.join(map(repr, allowed))} (other keys are kept as notes)"
            )
