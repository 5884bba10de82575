"""What one `semantic-recall ingest` did: its counts, and where and why it left lines out."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class IngestSummary:
    """What one ingest did: counts, and reasons for everything not imported."""

    file: str
    format: str
    threads_new: int = 0
    threads_updated: int = 0
    threads_unchanged: int = 0
    threads_refused: int = 0
    threads_restored: int = 0
    messages_added: int = 0
    messages_updated: int = 0
    """Messages stored before under their id with another role or text: the file's now."""
    messages_refused: int = 0
    """Messages that could not be written (another owner, a reused id, a forgotten thread)."""
    vectors: int = 0
    vectors_failed: int = 0
    vectors_missing: int = 0
    """Stored messages of the store still without a vector after this run."""
    vectors_repaired: int = 0
    snapshots: int = 0
    """Resources written with a vector snapshot for the next process's first search."""
    unreadable: int = 0
    """Lines (JSONL) or conversations (ChatGPT) that could not be read."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Not stored: reason -> count (bad lines, tool output, already stored, ...)."""
    not_embedded: Counter[str] = field(default_factory=Counter)
    """Stored without a vector (system messages, no text): reason -> count."""
    resource_unused: str | None = None
    """`--resource` of a JSONL file whose every line names its own resource (no effect)."""
    line_resources: list[str] = field(default_factory=list)
    """The resources the lines name, when `--resource` was used by none of them."""
    bad_lines: list[tuple[str, str]] = field(default_factory=list)
    """(where in the file, why) of each line or conversation that could not be read."""
    refusals: list[tuple[str, str]] = field(default_factory=list)
    """(where in the file, why) of each refusal: a whole thread, or one message."""
    off_branch: list[tuple[str, int]] = field(default_factory=list)
    """(conversation, messages) of a ChatGPT export's conversations whose stored messages
    are not all in the file: a branch abandoned since (an edit, a regeneration)."""

    def refuse(self, where: str, reason: str, messages: int, kind: str | None = None) -> None:
        """Record `messages` refused for `reason`, found at `where` in the file.

        `kind`: the reason as counted among the skipped (default: `reason` itself), when
        `reason` names this place's particulars.
        """
        self.messages_refused += messages
        self.skipped[kind or reason] += messages
        self.refusals.append((where, reason))

    def as_json(self) -> dict[str, Any]:
        """The summary as plain JSON data (the `--json` output)."""
        return {
            "file": self.file,
            "format": self.format,
            "threads": {
                "new": self.threads_new,
                "updated": self.threads_updated,
                "unchanged": self.threads_unchanged,
                "refused": self.threads_refused,
                "restored": self.threads_restored,
            },
            "messages_added": self.messages_added,
            "messages_updated": self.messages_updated,
            "messages_refused": self.messages_refused,
            "refused": [{"where": w, "reason": r} for w, r in self.refusals],
            "off_branch": [{"where": w, "messages": n} for w, n in self.off_branch],
            "vectors_written": self.vectors,
            "vectors_failed": self.vectors_failed,
            "vectors_repaired": self.vectors_repaired,
            "vectors_missing": self.vectors_missing,
            "snapshots_ready": self.snapshots,
            "resource_unused": self.resource_unused,
            "unreadable": self.unreadable,
            "unreadable_lines": [{"where": w, "reason": r} for w, r in self.bad_lines],
            "skipped": dict(self.skipped),
            "stored_without_vector": dict(self.not_embedded),
        }


def reason_counts(counter: Counter[str], shown: int = 5) -> str:
    """The `shown` commonest reasons with their counts (each line's own is listed below).

    Reasons that quote their line are each their own: thousands of them made one line of
    tens of thousands of characters.
    """
    common = counter.most_common()
    said = "; ".join(f"{reason}: {n}" for reason, n in common[:shown])
    rest = common[shown:]
    if rest:
        said += f"; {sum(n for _, n in rest)} more for {len(rest)} other reason(s)"
    return said
