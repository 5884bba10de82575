"""The vector indexes a message store records as holding its vectors.

Several stores may share one Chroma server, and an index name of a store's own
(`index_name=`, `migrate --to-index-name`) was known only to whoever opened the store
with it: opened without it, the engine and every command opened the model's default
index, on a shared server another store's (where a repair deletes that store's vectors).
So a store records each index its vectors are written to (`record_index`, called by
the engine before it writes), and an engine opened without an `index_name` opens the
one the store records for its embedder (`own_index`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.options import check_index_name
from langchain_semantic_recall.storage.hooks import StorageHooks

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecordedIndex:
    """A vector index a store holds vectors in: its name, model and dimension."""

    name: str
    model: str
    dimension: int


def checked_index(name: str, model: str, dimension: int) -> RecordedIndex:
    """`RecordedIndex(name, model, dimension)`, or `InvalidInputError` for bad input."""
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError(f"an index's model must be a non-empty string, got {model!r}")
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise InvalidInputError(f"an index's dimension must be an int >= 1, got {dimension!r}")
    try:
        return RecordedIndex(check_index_name(name), model, dimension)
    except InvalidOptionError as exc:
        raise InvalidInputError(str(exc)) from None


class IndexRecords(StorageHooks):
    """`MessageStorage`'s record of its vector indexes: checked methods over two hooks.

    A backend that can keep them sets `supports_index_records` and implements the hooks
    `_record_index` and `_recorded_indexes` (`StorageHooks`); without them a store
    records nothing, and engines open the embedder's default index.
    """

    supports_index_records: ClassVar[bool] = False

    def record_index(self, name: str, *, model: str, dimension: int) -> bool:
        """Record that the store's vectors are written to index `name` (kept for good).

        Returns:
            True when this call recorded it (False: recorded already, or the backend
            records no index).

        Args:
            name: The index name.
            model: The embedding model the index holds vectors of.
            dimension: Their length.
        """
        index = checked_index(name, model, dimension)
        if index in self._indexes_known():
            return False
        recorded = bool(self._record_index(index))
        self._indexes_known().add(index)
        return recorded

    async def arecord_index(self, name: str, *, model: str, dimension: int) -> bool:
        """Async twin of `record_index`."""
        index = checked_index(name, model, dimension)
        if index in self._indexes_known():
            return False
        recorded = bool(await self._arecord_index(index))
        self._indexes_known().add(index)
        return recorded

    def recorded_indexes(self) -> list[RecordedIndex]:
        """The indexes the store records, by name."""
        return sorted(self._recorded_indexes(), key=lambda index: index.name)

    async def arecorded_indexes(self) -> list[RecordedIndex]:
        """Async twin of `recorded_indexes`."""
        return sorted(await self._arecorded_indexes(), key=lambda index: index.name)

    def _indexes_known(self) -> set[RecordedIndex]:
        """Those this object recorded or saw recorded (no second write for them)."""
        known: set[RecordedIndex] | None = getattr(self, "_known_indexes", None)
        if known is None:
            known = set()
            self._known_indexes = known
        return known


def own_index(default: RecordedIndex, recorded: Sequence[RecordedIndex]) -> str:
    """The index an engine opened without an `index_name` opens.

    `default`'s name, unless the store records another index of the same model and
    dimension, and not `default`.

    Raises:
        InvalidOptionError: the store records several such indexes (which one is meant?).
    """
    same = [r for r in recorded if (r.model, r.dimension) == (default.model, default.dimension)]
    if not same or any(r.name == default.name for r in same):
        return default.name
    if len(same) == 1:
        return same[0].name
    names = ", ".join(repr(r.name) for r in same)
    raise InvalidOptionError(
        f"the store records {len(same)} vector indexes of {default.model!r} "
        f"({default.dimension}-d): {names}; give the one to open (index_name=, or "
        "--index-name on the command line)"
    )
