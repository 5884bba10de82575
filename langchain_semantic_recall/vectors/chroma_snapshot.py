"""A copy of one resource collection's vectors that loads without Chroma's index.

`chroma_snapshots` says when one is made and used. A snapshot is the unit vectors of a
collection (float32) with their vector and message ids, as of one write of Chroma's log
(`chroma_log.Stamp.seq`); it answers a query by an exact scan, and it can be brought up
to date by applying the log's rows written after it (`replayed`). One file per
collection, written whole to a temporary name and renamed, so a reader never sees half.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, overload

import numpy as np

from langchain_semantic_recall.vectors.chroma_log import ADD, DELETE, UPDATE, LogRecord, Stamp

__all__ = ["FORMAT", "Snapshot", "message_id_of"]

FORMAT: Final = "semantic-recall-snapshot-1"
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
    """One collection's vectors as of write `seq` of Chroma's log."""

    collection_id: str
    seq: int
    vector_ids: Sequence[str]
    message_ids: Sequence[str]
    vectors: np.ndarray
    """(n, dimension) float32, each row of unit length (or zero)."""

    @classmethod
    def of(
        cls,
        stamp: Stamp,
        vector_ids: list[str],
        message_ids: list[str],
        vectors: np.ndarray,
    ) -> Snapshot:
        """A snapshot of rows read at `stamp` (the vectors are normalised here)."""
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim != 2 or len(rows) != len(vector_ids) or len(message_ids) != len(vector_ids):
            raise ValueError(f"{len(vector_ids)} ids, {len(message_ids)} messages, {rows.shape}")
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        unit = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
        return cls(stamp.collection_id, stamp.seq, tuple(vector_ids), tuple(message_ids), unit)

    def __len__(self) -> int:
        return len(self.vector_ids)

    def nearest(self, embedding: list[float], k: int) -> list[tuple[str, float]]:
        """(message id, cosine similarity clipped to [0, 1]) of the `k` nearest vectors."""
        if not self.vector_ids:
            return []
        query = np.asarray(embedding, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if norm > 0:
            query = query / norm
        scores = self.vectors @ query
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.message_ids[i], min(1.0, max(0.0, float(scores[i])))) for i in top]

    def replayed(self, stamp: Stamp, records: list[LogRecord]) -> Snapshot | None:
        """This snapshot with the log's `records` applied, as of `stamp`; None if unsure.

        Chroma's own rules: an add of an id held is ignored, an update of an id not held
        is ignored, an update without a vector keeps the vector. None when a vector is
        not `FLOAT32` of this dimension, or the result does not hold `stamp.count` rows.
        """
        dimension = self.vectors.shape[1]
        rows: dict[str, tuple[int | np.ndarray, str]] = {
            vector_id: (i, message_id)
            for i, (vector_id, message_id) in enumerate(
                zip(self.vector_ids, self.message_ids, strict=True)
            )
        }
        for record in records:
            held = rows.get(record.vector_id)
            if record.operation == DELETE:
                rows.pop(record.vector_id, None)
                continue
            if (record.operation == ADD and held is not None) or (
                record.operation == UPDATE and held is None
            ):
                continue
            owner = _owner(record, held)
            if owner is None:
                return None
            if record.vector is None:
                if held is None:
                    return None  # a new record without a vector: not Chroma's
                rows[record.vector_id] = (held[0], owner)
                continue
            if record.encoding != "FLOAT32" or len(record.vector) != 4 * dimension:
                return None
            rows[record.vector_id] = (np.frombuffer(record.vector, dtype="<f4"), owner)
        if len(rows) != stamp.count:
            return None
        vectors = [self.vectors[at] if isinstance(at, int) else at for at, _ in rows.values()]
        matrix = np.vstack(vectors) if vectors else np.zeros((0, dimension), np.float32)
        return Snapshot.of(stamp, list(rows), [owner for _, owner in rows.values()], matrix)

    # -- the file ----------------------------------------------------------------------------

    def save(self, folder: Path, name: str, *, still: Callable[[], bool] | None = None) -> bool:
        """Write the file of collection `name` whole, then put it in place (atomic).

        Returns whether it is in place: not if `still()` (asked once the file is written)
        is false, nor if a forget deleted the temporary file meanwhile (`delete`).
        """
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f"{name}.{os.getpid()}-{uuid.uuid4().hex}.tmp"
        ids = PackedStrings.of(self.vector_ids)
        owners = PackedStrings.of(self.message_ids)
        arrays = [self.vectors, ids.blob, ids.ends, owners.blob, owners.ends]
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
            arrays = [
                np.memmap(path, dtype=np.dtype(form), mode="r", offset=at, shape=tuple(shape))
                if math.prod(shape)
                else np.zeros(shape, dtype=np.dtype(form))
                for at, form, shape in header["arrays"]
            ]
            vectors, vector_blob, vector_ends, message_blob, message_ends = arrays
            snapshot = cls(
                str(header["collection"]),
                int(header["seq"]),
                PackedStrings(vector_blob, vector_ends),
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

    def __init__(self, blob: np.ndarray, ends: np.ndarray) -> None:
        """`blob` (uint8) holds the strings back to back; `ends[i]` is where string i ends."""
        self.blob = blob
        self.ends = ends

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
