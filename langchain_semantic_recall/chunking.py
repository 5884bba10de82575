"""Cutting a long message into pieces an embedder can take whole.

* `chunk_text` / `chunk_spans`: cuts at paragraph, sentence or word boundaries, the
  pieces overlapping a little, so that no part of a text is silently left unindexed.
* `split_for_embedding`: an embedder's own splitter (by tokens) where it has one,
  `chunk_text` with `DEFAULT_MAX_CHARS` otherwise.

Re-exported by `langchain_semantic_recall.embeddings`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from langchain_semantic_recall.errors import InvalidOptionError

if TYPE_CHECKING:
    from langchain_semantic_recall.embeddings import Embedder

__all__ = ["DEFAULT_MAX_CHARS", "chunk_spans", "chunk_text", "split_for_embedding"]

DEFAULT_MAX_CHARS = 6000
"""Characters per chunk for embedders that cannot split text themselves.

6000 characters stay well inside OpenAI's 8191-token input limit even for token-dense
text (code, non-Latin scripts), while typical chat messages are never split.
"""

_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*")
_SENTENCE = re.compile(r"(?:[.!?\u3002\uff01\uff1f\u2026][\"'\u201d\u2019)\]]*\s+|\n\s*)")
_SPACE = re.compile(r"\s+")


def _last_cut(pattern: re.Pattern[str], text: str, lo: int, hi: int) -> int | None:
    """The end of the last match of `pattern` within `text[:hi]` that ends in [lo, hi]."""
    cut: int | None = None
    # Start a little before lo so that a boundary straddling lo is still seen.
    for match in pattern.finditer(text, max(0, lo - 64), hi):
        if match.end() >= lo:
            cut = match.end()
    return cut


def chunk_spans(text: str, max_chars: int, overlap: int = 200) -> list[tuple[int, int]]:
    """The `(start, end)` character spans of `chunk_text`, in order.

    Spans start at 0, end at `len(text)`, each is at most `max_chars` long, each
    starts after the previous one starts and no later than it ends (so together they
    cover the text). See `chunk_text` for how the cuts are chosen.

    Args:
        text: The text to cut.
        max_chars: Most characters of one span.
        overlap: Characters a span repeats from the end of the one before (at most a
            quarter of `max_chars`).
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InvalidOptionError(f"max_chars must be an integer >= 1, got {max_chars!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise InvalidOptionError(f"overlap must be an integer >= 0, got {overlap!r}")
    size = len(text)
    if size <= max_chars:
        return [(0, size)]
    # Cuts fall in the second half of a window and the overlap is at most a quarter of
    # it, so every chunk starts strictly after the previous one: the loop terminates.
    overlap = min(overlap, max_chars // 4)
    spans: list[tuple[int, int]] = []
    start = 0
    while size - start > max_chars:
        hi = start + max_chars
        lo = start + max(1, max_chars // 2)
        end = (
            _last_cut(_PARAGRAPH, text, lo, hi)
            or _last_cut(_SENTENCE, text, lo, hi)
            or _last_cut(_SPACE, text, lo, hi)
            or hi
        )
        spans.append((start, end))
        next_start = end - overlap
        if overlap:
            # Begin the overlap on a word: just after the first space in it, if any.
            space = _SPACE.search(text, next_start, end)
            if space is not None:
                next_start = space.end()
        start = next_start
    spans.append((start, size))
    return spans


def chunk_text(text: str, max_chars: int, overlap: int = 200) -> list[str]:
    """Split `text` into pieces of at most `max_chars` characters.

    Each cut is placed in the second half of the window, preferring (in this order) a
    paragraph break, the end of a sentence, any whitespace, and only then the hard limit.
    Consecutive pieces overlap by up to `overlap` characters (at most a quarter of
    `max_chars`), starting on a word where possible, so no content is lost and a fact
    straddling a cut is still whole in one piece. Pure function.

    Example:
        >>> chunk_text("short", 100)
        ['short']
        >>> chunk_text("One. Two. Three.", 10, overlap=0)
        ['One. Two. ', 'Three.']

    Args:
        text: the text to split.
        max_chars: the most characters per piece (>= 1).
        overlap: the characters repeated from the end of one piece at the start of the
            next (>= 0).

    Returns:
        `[text]` if it fits, else the pieces in order; every character of `text`
        appears in some piece.

    Raises:
        InvalidOptionError: `max_chars < 1` or `overlap < 0`.
    """
    return [text[start:end] for start, end in chunk_spans(text, max_chars, overlap)]


def split_for_embedding(embeddings: Embedder, text: str) -> list[str]:
    """Split `text` into pieces that `embeddings` can embed whole.

    An embedder that knows its own limit exposes a callable `split_text` (as
    `LocalEmbeddings` does, by tokens); any other gets `chunk_text` with
    `DEFAULT_MAX_CHARS`.

    Args:
        embeddings: The embedder that will embed the pieces.
        text: The text of one message.
    """
    splitter = getattr(embeddings, "split_text", None)
    if callable(splitter):
        pieces = splitter(text)
        return [str(piece) for piece in pieces] or [text]
    return chunk_text(text, DEFAULT_MAX_CHARS)
