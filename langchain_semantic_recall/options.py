"""Option types, defaults and eager validation (pure, no I/O)."""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from langchain_semantic_recall.errors import InvalidOptionError

Scope: TypeAlias = Literal["thread", "resource"]
"""`"thread"`: this conversation only; `"resource"`: every conversation of the resource."""

SCOPES: tuple[Scope, ...] = ("thread", "resource")

SearchMode: TypeAlias = Literal["auto", "hybrid", "dense", "keyword"]
"""How recall finds its hits.

- `"hybrid"`: keyword search in the message storage (BM25) fused with vector search;
- `"dense"`: vector search only: the original processor's behaviour;
- `"keyword"`: keyword search only (no query embedding);
- `"auto"`: `"hybrid"` when the storage has keyword search (SQLite, in-memory,
  PostgreSQL), else `"dense"`.
"""

SEARCH_MODES: tuple[SearchMode, ...] = ("auto", "hybrid", "dense", "keyword")

DEFAULT_TOP_K = 4
DEFAULT_MESSAGE_RANGE = 1
DEFAULT_SCOPE: Scope = "resource"
DEFAULT_CACHE_SIZE = 1000
DEFAULT_SEARCH_MODE: SearchMode = "auto"

# Defaults of keyword mode (hybrid mode's come with its relevance model, `relevance`);
# dense mode keeps the original's DEFAULT_TOP_K and DEFAULT_MESSAGE_RANGE, and no budget.
HYBRID_TOP_K = 12
DEFAULT_MESSAGE_BUDGET = 15
"""Most messages the hits' windows return together (hybrid and keyword modes)."""
DEFAULT_TIME_BOOST = 0.5
"""Time-aware ranking for queries that name a period ("in May 2023", "last week").

Keyword mode: added to the (0-1) score of candidates written in that period. Hybrid mode:
any value but 0 turns the relevance model's `in_period` feature on (its weight is fitted,
so the value itself does not matter there); 0 turns it off. Dense mode: unused."""
DEFAULT_CANDIDATES = 50
"""Matches each search (keyword, vector) contributes as candidates."""

DEFAULT_MAX_INDEX_CHARS = 16_000
"""Characters of one message that are chunked and embedded (the rest is stored only).

About 27 chunks with the local model (about 3 seconds on a laptop CPU), so one huge
message indexes in seconds, not minutes; no more than `DEFAULT_MAX_BLOCK_CHARS` could be
shown of it anyway. A longer query is searched by its first `max_index_chars` characters
(a pasted document of 1.6 M characters took recall 14 s, mostly weighing its terms).
`max_index_chars=None` embeds, and searches, every character.
"""
DEFAULT_MAX_BLOCK_CHARS = 16_000
"""Bound on all the text one recall injects (the cross-thread block and the same-thread
messages together): about 4,000 tokens, so a huge stored message cannot overflow the
model's context; `max_block_chars=None` injects everything whole.
"""

Budget: TypeAlias = "int | Literal['auto'] | None"
"""`message_budget`: a count, None (whole windows) or `"auto"` (the mode's default)."""

_INDEX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")


MAX_TOP_K = 10_000
"""Most hits one search asks for: the vector index's bindings take a machine integer
(`top_k=2**70` raised a bare OverflowError from deep in a search)."""
MAX_MESSAGE_RANGE = 10_000
"""Most neighbours a window reaches on one side: each position has its own weight, and a
window is read per hit, so an unbounded reach (`message_range=10**12`) exhausted memory."""


@dataclass(frozen=True, slots=True)
class MessageRange:
    """How many neighbouring messages to fetch around each hit, in the hit's own thread."""

    before: int = DEFAULT_MESSAGE_RANGE
    after: int = DEFAULT_MESSAGE_RANGE

    def __post_init__(self) -> None:
        for name in ("before", "after"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_MESSAGE_RANGE
            ):
                raise InvalidOptionError(
                    f"message_range.{name} must be an int from 0 to {MAX_MESSAGE_RANGE:,}, "
                    f"got {value!r}"
                )


MessageRangeLike: TypeAlias = "int | MessageRange | Mapping[str, int] | tuple[int, int]"

HYBRID_MESSAGE_RANGE = MessageRange(before=2, after=3)
"""Positions hybrid search scores around a candidate: each gets its own calibrated
probability, so only the likely ones are spent (the answer usually follows a question)."""
KEYWORD_MESSAGE_RANGE = MessageRange(before=0, after=2)
"""Keyword mode's window: the hit and the two messages after it."""


def to_message_range(value: MessageRangeLike) -> MessageRange:
    """Normalise `n`, `(before, after)`, `{"before":..,"after":..}` or a MessageRange."""
    if isinstance(value, MessageRange):
        return value
    if isinstance(value, bool):
        raise InvalidOptionError(f"message_range must be an int or a range, got {value!r}")
    if isinstance(value, int):
        return MessageRange(value, value)
    if isinstance(value, tuple) and len(value) == 2:
        return MessageRange(value[0], value[1])
    if isinstance(value, Mapping):
        unknown = set(value) - {"before", "after"}
        if unknown:
            raise InvalidOptionError(
                f"message_range accepts the keys 'before' and 'after', not {sorted(unknown)}"
            )
        missing = {"before", "after"} - set(value)
        if missing:  # 0 here, 1 in MessageRange(), 2 or 3 in hybrid mode: say which
            raise InvalidOptionError(
                f"message_range needs both 'before' and 'after', {sorted(missing)} is missing: "
                f"e.g. {{'before': 2, 'after': 3}}"
            )
        return MessageRange(value["before"], value["after"])
    raise InvalidOptionError(
        "message_range must be an int, a (before, after) tuple, a mapping with 'before' and "
        f"'after', or a MessageRange; got {value!r}"
    )


def check_top_k(value: object) -> int:
    """`value` if it is an int from 1 to `MAX_TOP_K`, else `InvalidOptionError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOP_K:
        raise InvalidOptionError(f"top_k must be an int from 1 to {MAX_TOP_K:,}, got {value!r}")
    return value


def check_scope(value: object) -> Scope:
    """`value` if it is `"thread"` or `"resource"`, else `InvalidOptionError`."""
    if value == "thread":
        return "thread"
    if value == "resource":
        return "resource"
    raise InvalidOptionError(f"scope must be 'thread' or 'resource', got {value!r}")


def check_threshold(value: object) -> float | None:
    """`value` as a float in [0, 1] (None stays None), else `InvalidOptionError`."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or math.isnan(value)
        or not 0.0 <= value <= 1.0
    ):
        raise InvalidOptionError(
            f"threshold must be None or a score between 0 and 1, got {value!r}"
        )
    return float(value)


def check_positive(name: str, value: object, *, allow_none: bool = False) -> int | None:
    """`value` if it is an int >= 1 (or None when allowed), else `InvalidOptionError`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be an int >= 1, got {value!r}")
    return value


def check_search_mode(value: object) -> SearchMode:
    """`value` if it is one of `SEARCH_MODES`, else `InvalidOptionError`."""
    for mode in SEARCH_MODES:
        if value == mode:
            return mode
    raise InvalidOptionError(
        f"search_mode must be one of {', '.join(map(repr, SEARCH_MODES))}, got {value!r}"
    )


def check_weight(name: str, value: object) -> float:
    """A weight in [0, 1]."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or math.isnan(value)
        or not 0.0 <= value <= 1.0
    ):
        raise InvalidOptionError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def check_count(name: str, value: object) -> int:
    """An int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be an int >= 1, got {value!r}")
    return value


def store_folder(value: object) -> Path:
    """The folder of an embedded store (`SemanticRecall.local`), `~` read as the home folder.

    Raises:
        InvalidOptionError: not a path, or an empty one (which would be the working folder).
    """
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise InvalidOptionError(
            f"the store's folder must be a path such as './memory', got {value!r}"
        )
    return Path(value).expanduser()  # as SQLite does: "~/memory" is one store, not two


def check_index_name(value: object) -> str:
    """A legal Chroma collection name: 3-512 chars of [A-Za-z0-9._-], alphanumeric ends."""
    if not isinstance(value, str) or not _INDEX_NAME.match(value) or ".." in value:
        raise InvalidOptionError(
            f"index_name must be 3-512 characters of letters, digits, '.', '_' or '-', "
            f"starting and ending with a letter or digit; got {value!r}"
        )
    return value


def default_index_name(model: str, dimension: int) -> str:
    """Derive an index name from the embedding model's name and dimension.

    `"sentence-transformers/all-MiniLM-L6-v2"` and 384 give
    `"semantic-recall-sentence-transformers-all-MiniLM-L6-v2-384"`.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("._-")
    cleaned = re.sub(r"\.{2,}", ".", cleaned) or "embeddings"
    name = f"semantic-recall-{cleaned}"[:500].rstrip("._-")
    return check_index_name(f"{name}-{dimension}")


ENGINE_OPTIONS: frozenset[str] = frozenset(
    (
        "storage",
        "vector_store",
        "embeddings",
        "top_k",
        "message_range",
        "scope",
        "threshold",
        "search_mode",
        "message_budget",
        "time_boost",
        "horizon",
        "index_name",
        "logger",
        "read_only",
        "retention",
        "max_block_chars",
        "max_index_chars",
        "cache",
        "cache_size",
        "thread_key",
        "resource_key",
        "auth_user_key",
        "memory_key",
        "input_key",
        "output_key",
    )
)
"""The `SemanticRecall` constructor's options (a test holds it to the signature)."""
LOCAL_OPTIONS = (ENGINE_OPTIONS - {"storage", "vector_store"}) | {"chroma_workarounds"}
"""What `SemanticRecall.local(path, ...)` takes besides the path."""
URL_OPTIONS = ENGINE_OPTIONS - {"storage", "vector_store"}
"""What `SemanticRecall.from_url(storage=..., vector=..., ...)` takes besides the URLs."""


def check_option_names(names: Iterable[str], allowed: frozenset[str], where: str) -> None:
    """Refuse a misspelt or unknown option before anything is built.

    Raises:
        InvalidOptionError: a name not in `allowed`, with the closest known one.
    """
    unknown = sorted(set(names) - allowed)
    if not unknown:
        return
    hints = {name: difflib.get_close_matches(name, allowed, n=1) for name in unknown}
    guess = "; ".join(f"{n!r}: did you mean {h[0]!r}?" for n, h in hints.items() if h)
    raise InvalidOptionError(
        f"{where} has no option {', '.join(map(repr, unknown))}"
        + (f" ({guess})" if guess else "")
        + f"; its options are {', '.join(sorted(allowed))}"
    )


SHARED_OPTIONS = frozenset({"storage", "vector_store", "embeddings", "cache", "cache_size"})
"""What `with_options` cannot change: the engine and its views share them."""


def check_changes(changes: Mapping[str, object], storage: object) -> None:
    """The options `with_options` may change: known ones, none of `SHARED_OPTIONS`.

    Raises:
        InvalidOptionError: an unknown option, or a shared one; `read_only=False` on a
            storage opened read-only (every write would fail).
    """
    check_option_names(changes, ENGINE_OPTIONS, "with_options")
    fixed = SHARED_OPTIONS.intersection(changes)
    if fixed:
        raise InvalidOptionError(f"{sorted(fixed)} are shared: build a new engine")
    if changes.get("read_only") is False and getattr(storage, "read_only", False) is True:
        raise InvalidOptionError(
            "read_only=False, but the storage was opened read-only (local(path, read_only="
            "True), or a read-only file): every write would fail; open the store writable, "
            "e.g. SemanticRecall.local(path)"
        )
