"""A copy of one resource collection's vectors that loads without Chroma's index.

`chroma_snapshots` says when one is made and used. A snapshot is the unit vectors of a
collection (float32) with their vector and message ids, as of one write of Chroma's log
(`chroma_log.Stamp.seq`); it answers a query by an exact scan, and it can be brought up
to date by applying the log's rows written after it (`replayed`). One file per
collection, written whole to a temporary name and renamed, so a reader never sees half.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Final, Literal, overload

import numpy as np

from langchain_semantic_recall.vectors.chroma_log import ADD, DELETE, UPDATE, LogRecord, Stamp

__all__ = ["FORMAT", "Snapshot", "message_id_of"]

FORMAT: Final = "semantic-recall-snapshot-2"
"""Recorded in each file; a file of another format is not read."""
_SUFFIX: Final = ".vectors"
_MAGIC: Final = b"SRSNAP1\n"
_ALIGN: Final = 64
"""Each array starts at a multiple of this many bytes (what `np.memmap` reads fast)."""


def message_id_of(vector_id: str, metadata: object) -> str:
    """A vector's message: its own id, unless it names a later chunk (`id#n`, metadata)."""
    if "#" not in vector_id or not isinstance(metadata, dict):
        return vector_id
    owner = metadata.get("message_id")
    return owner if isinstance(owner, str) else vector_id


@dataclass(frozen=True)
class Snapshot:
    """One collection's vectors as of write `seq` of Chroma's log.

    A snapshot brought up to date (`replayed`) keeps its file's rows as they are and
    lays the changes over them (`hidden`, `since`): a first search never copies them.
    """

    collection_id: str
    seq: int
    vector_ids: Sequence[str]
    message_ids: Sequence[str]
    vectors: np.ndarray
    """(n, dimension) float32, each row of unit length (or zero)."""
    hidden: np.ndarray | None = None
    """Which rows of `vectors` were deleted or rewritten since (bool per row); None: none."""
    since: Snapshot | None = None
    """The rows written since (new or rewritten), in memory; None: none."""

    @classmethod
    def of(
        cls,
        stamp: Stamp,
        vector_ids: list[str],
        message_ids: list[str],
        vectors: np.ndarray,
    ) -> Snapshot:
        """A snapshot of rows read at `stamp` (the vectors are normalised here)."""
        unit = np.array(vectors, dtype=np.float32)  # one copy, normalised in place
        if unit.ndim != 2 or len(unit) != len(vector_ids) or len(message_ids) != len(vector_ids):
            raise ValueError(f"{len(vector_ids)} ids, {len(message_ids)} messages, {unit.shape}")
        # scaled first: the float32 norm of a tiny vector underflows to 0
        scale = np.maximum(unit.max(axis=1, initial=0.0), -unit.min(axis=1, initial=0.0))
        np.divide(unit, scale[:, None], out=unit, where=scale[:, None] > 0)
        norms = np.sqrt(np.einsum("ij,ij->i", unit, unit))[:, None]
        np.divide(unit, norms, out=unit, where=norms > 0)
        return cls(stamp.collection_id, stamp.seq, tuple(vector_ids), tuple(message_ids), unit)

    def __len__(self) -> int:
        hidden = 0 if self.hidden is None else int(self.hidden.sum())
        return len(self.vector_ids) - hidden + (0 if self.since is None else len(self.since))

    def nearest(self, embedding: list[float], k: int) -> list[tuple[str, float]]:
        """(message id, cosine similarity clipped to [0, 1]) of the `k` nearest vectors."""
        query = np.asarray(embedding, dtype=np.float64)  # a float32 norm can underflow to 0
        norm = float(np.linalg.norm(query))
        query = (query / norm if norm > 0 else query).astype(np.float32)
        found = self._scan(query, k)
        if self.since is not None:
            found = sorted([*found, *self.since._scan(query, k)], key=lambda hit: -hit[1])[:k]
        return found

    def _scan(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` nearest of `vectors` not hidden (`since` aside)."""
        scores = self.vectors @ query
        if self.hidden is not None:
            scores[self.hidden] = -np.inf
            k = min(k, len(scores) - int(self.hidden.sum()))
        if k <= 0 or not len(scores):
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.message_ids[i], min(1.0, max(0.0, float(scores[i])))) for i in top]

    def replayed(self, stamp: Stamp, records: list[LogRecord]) -> Snapshot | None:
        """This snapshot with the log's `records` applied, as of `stamp`; None if unsure.

        Chroma's own rules: an add of an id held is ignored, an update of an id not held
        is ignored, an update without a vector keeps the vector. None when a vector is
        not `FLOAT32` of this dimension, or the result does not hold `stamp.count` rows.
        Work in proportion to `records`, not to the rows (the file's stay mapped).
        """
        if self.hidden is not None or self.since is not None:
            return self.flat().replayed(stamp, records)
        dimension = self.vectors.shape[1]
        at = positions(self.vector_ids, {record.vector_id for record in records})
        hidden = np.zeros(len(self.vector_ids), dtype=bool)
        since: dict[str, tuple[np.ndarray, str]] = {}  # rows not as in the file, in order
        for record in records:
            i = at.get(record.vector_id)
            held = since.pop(record.vector_id, None)
            if i is not None and not hidden[i]:
                held = (self.vectors[i], self.message_ids[i])
                hidden[i] = True  # deleted, or its row is in `since` from now on
            row = _row_after(record, held, dimension)
            if row is _Verdict.UNSURE:
                return None
            if row is not None:
                since[record.vector_id] = row
        if len(self.vector_ids) - int(hidden.sum()) + len(since) != stamp.count:
            return None
        rows = [vector for vector, _ in since.values()]
        later = Snapshot.of(
            stamp,
            list(since),
            [owner for _, owner in since.values()],
            np.vstack(rows) if rows else np.zeros((0, dimension), np.float32),
        )
        return replace(
            self,
            seq=stamp.seq,
            hidden=hidden if hidden.any() else None,
            since=later if len(later) else None,
        )

    def flat(self) -> Snapshot:
        """The same rows as one snapshot without `hidden` or `since` (copied)."""
        if self.hidden is None and self.since is None:
            return self
        kept = (
            np.arange(len(self.vector_ids)) if self.hidden is None else np.flatnonzero(~self.hidden)
        ).tolist()
        later = self.since or Snapshot(self.collection_id, self.seq, (), (), self.vectors[:0])
        ids, owners = strings_of(self.vector_ids), strings_of(self.message_ids)
        return Snapshot(
            self.collection_id,
            self.seq,
            (*(ids[i] for i in kept), *later.vector_ids),
            (*(owners[i] for i in kept), *later.message_ids),
            np.vstack([self.vectors[kept], later.vectors]).astype(np.float32, copy=False),
        )

    # -- the file ----------------------------------------------------------------------------

    def save(self, folder: Path, name: str, *, still: Callable[[], bool] | None = None) -> bool:
        """Write the file of collection `name` whole, then put it in place (atomic).

        Returns whether it is in place: not if `still()` (asked once the file is written)
        is false, nor if a forget deleted the temporary file meanwhile (`delete`).
        """
        if self.hidden is not None or self.since is not None:
            return self.flat().save(folder, name, still=still)
        folder.mkdir(exist_ok=True)  # not its parent: the Chroma folder (a purge moves it)
        temporary = folder / f"{name}.{os.getpid()}-{uuid.uuid4().hex}.tmp"
        ids = PackedStrings.of(self.vector_ids)
        owners = PackedStrings.of(self.message_ids)
        arrays = [self.vectors, ids.blob, ids.ends, owners.blob, owners.ends, ids.sorted_order()]
        header = {"format": FORMAT, "collection": self.collection_id, "seq": self.seq}
        try:
            with temporary.open("wb") as file:
                file.write(_MAGIC)
                placed = []
                for array in arrays:
                    file.write(b"\0" * (-file.tell() % _ALIGN))
                    placed.append([file.tell(), array.dtype.str, list(array.shape)])
                    file.write(np.ascontiguousarray(array).tobytes())
                text = json.dumps({**header, "arrays": placed}).encode()
                file.write(text + len(text).to_bytes(8, "little") + _MAGIC)
            if still is not None and not still():
                return False
            try:
                os.replace(temporary, folder / f"{name}{_SUFFIX}")
            except FileNotFoundError:  # deleted by a forget: it may hold what was forgotten
                return False
            return True
        finally:
            temporary.unlink(missing_ok=True)

    @classmethod
    def load(cls, folder: Path, name: str) -> Snapshot | None:
        """The snapshot of collection `name`, mapped from its file; None if none or unreadable.

        Nothing is read until searched: a scan reads the vectors from the page cache.
        """
        path = folder / f"{name}{_SUFFIX}"
        try:
            with path.open("rb") as file:
                size = file.seek(0, os.SEEK_END)
                file.seek(size - 16)
                tail = file.read(16)
                length = int.from_bytes(tail[:8], "little")
                if tail[8:] != _MAGIC or length > size:
                    return None
                file.seek(size - 16 - length)
                header = json.loads(file.read(length))
                if not isinstance(header, dict) or header.get("format") != FORMAT:
                    return None
                # mapped from this handle, not the path: a writer may rename a newer
                # file into place meanwhile, with its arrays at other offsets
                arrays = [_mapped(file, size, *placed) for placed in header["arrays"]]
            vectors, vector_blob, vector_ends, message_blob, message_ends, order = arrays
            snapshot = cls(
                str(header["collection"]),
                int(header["seq"]),
                PackedStrings(vector_blob, vector_ends, order),
                PackedStrings(message_blob, message_ends),
                vectors,
            )
        except (OSError, KeyError, TypeError, ValueError, OverflowError):
            return None
        if vectors.ndim != 2 or vectors.dtype != np.float32:
            return None
        if not len(snapshot.vector_ids) == len(snapshot.message_ids) == len(vectors):
            return None
        return snapshot

    @staticmethod
    def delete(folder: Path, name: str) -> None:
        """Delete the file of collection `name` (no error if there is none).

        Also its temporary files: a writer killed before its rename leaves one behind,
        and a writer still running fails its rename (its copy may hold what is forgotten).
        """
        (folder / f"{name}{_SUFFIX}").unlink(missing_ok=True)
        temporary = re.compile(re.escape(name) + r"\.\d+-[0-9a-f]{32}\.tmp")
        try:
            left = [path for path in folder.iterdir() if temporary.fullmatch(path.name)]
        except FileNotFoundError:
            return
        for path in left:
            path.unlink(missing_ok=True)

    @staticmethod
    def exists(folder: Path, name: str) -> bool:
        """Whether collection `name` has a file (cheap: no read)."""
        return (folder / f"{name}{_SUFFIX}").is_file()


class PackedStrings(Sequence[str]):
    """Strings as one UTF-8 buffer and their end offsets: read one at a time, as needed."""

    def __init__(self, blob: np.ndarray, ends: np.ndarray, order: np.ndarray | None = None) -> None:
        """`blob` (uint8) holds the strings back to back; `ends[i]` is where string i ends.

        `order`: the indexes of the strings in sorted order (`index_of` searches it).
        """
        self.blob = blob
        self.ends = ends
        self.order = order

    @classmethod
    def of(cls, texts: Sequence[str]) -> PackedStrings:
        """Pack `texts`."""
        if isinstance(texts, PackedStrings):
            return texts
        encoded = [text.encode() for text in texts]
        ends = np.cumsum([len(b) for b in encoded], dtype=np.int64)
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), ends)

    def __len__(self) -> int:
        return len(self.ends)

    def sorted_order(self) -> np.ndarray:
        """The indexes of the strings in sorted order (what a file keeps for `index_of`)."""
        if self.order is None:
            self.order = np.array(sorted(range(len(self)), key=self.__getitem__), np.int64)
        return self.order

    def index_of(self, text: str) -> int | None:
        """The index of `text`, by a binary search of `sorted_order` (~17 decodes in 100k)."""
        order = self.sorted_order()
        at = bisect.bisect_left(order, text, key=lambda i: self[int(i)])
        if at < len(order) and self[int(order[at])] == text:
            return int(order[at])
        return None

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        end = int(self.ends[index])  # IndexError past the end, as a sequence should
        start = int(self.ends[index - 1]) if index else 0
        return bytes(self.blob[start:end]).decode()


def _mapped(file: BinaryIO, size: int, at: object, form: str, shape: list[int]) -> np.ndarray:
    """One array of an open snapshot file (ValueError if it is not inside the file)."""
    if not isinstance(at, int) or not 0 <= at <= size:
        raise ValueError(f"an array at {at!r} in a file of {size} bytes")
    if not math.prod(shape):
        return np.zeros(shape, dtype=np.dtype(form))
    return np.memmap(file, dtype=np.dtype(form), mode="r", offset=at, shape=tuple(shape))


def positions(texts: Sequence[str], wanted: set[str]) -> dict[str, int]:
    """The index in `texts` of each string of `wanted` it holds.

    Packed strings are searched in their sorted order, without decoding the others.
    """
    if isinstance(texts, PackedStrings):
        found = {text: texts.index_of(text) for text in wanted}
        return {text: i for text, i in found.items() if i is not None}
    return {text: i for i, text in enumerate(texts) if text in wanted}


def strings_of(texts: Sequence[str]) -> list[str]:
    """`texts` as a list; packed ones decoded in one pass (not one index at a time)."""
    if not isinstance(texts, PackedStrings):
        return list(texts)
    data = texts.blob.tobytes()
    ends = texts.ends.tolist()
    return [data[start:end].decode() for start, end in zip([0, *ends[:-1]], ends, strict=True)]


class _Verdict(Enum):
    UNSURE = "a log row the replay cannot apply as Chroma did"


def _row_after(
    record: LogRecord, held: tuple[np.ndarray, str] | None, dimension: int
) -> tuple[np.ndarray, str] | Literal[_Verdict.UNSURE] | None:
    """The row (vector, message id) a write leaves where `held` was (None: no row).

    `_Verdict.UNSURE` when the row cannot be read, or is not one Chroma would have written.
    """
    if record.operation == DELETE:
        return None
    if (record.operation == ADD and held is not None) or (
        record.operation == UPDATE and held is None
    ):
        return held  # ignored, as Chroma does
    owner = _owner(record, held)
    if owner is None:
        return _Verdict.UNSURE
    if record.vector is None:
        if held is None:
            return _Verdict.UNSURE  # a new record without a vector: not Chroma's
        return held[0], owner
    if record.encoding != "FLOAT32" or len(record.vector) != 4 * dimension:
        return _Verdict.UNSURE
    return np.frombuffer(record.vector, dtype="<f4"), owner


def _owner(record: LogRecord, held: tuple[object, str] | None) -> str | None:
    """The message of a record written: its metadata's, else the one held; None if unreadable.

    Chroma merges an update's metadata into the record's, so a `message_id` left out is kept.
    """
    try:
        metadata = json.loads(record.metadata) if record.metadata else {}
    except ValueError:
        return None
    if not isinstance(metadata, dict):
        return None
    if held is not None and "message_id" not in metadata:
        return held[1]
    return message_id_of(record.vector_id, metadata)
