"""Which vectors of an index an embedded Chroma folder holds, read without chromadb.

`semantic-recall stats` counts an embedded store's vectors from Chroma's own SQLite
file: importing chromadb alone took 0.6-0.9 s, most of the command's time. It reads what
`ChromaVectorIndex` would answer (`open`'s check of the index's model and dimension,
then `vector_ids`), as measured with chromadb 1.5.9 (`tests/integration/
test_chroma_file.py` compares the two on stores the package wrote):

* a collection is a row of `collections` in the default tenant's `default_database`,
  its metadata rows of `collection_metadata` (one per key, typed columns), its distance
  space in the JSON of `schema_str` (`config_json_str` holds an `hnsw` or `spann` section
  only when given that way);
* its live records are the rows of `embeddings` of its one METADATA segment, each
  record's metadata rows of `embedding_metadata` (one per key, typed columns), written
  as each write is made (`chroma_log`): logged in `embeddings_queue`, then applied in a
  second transaction; while the log holds a write the segment has not applied
  (`max_seq_id`), chromadb would apply it first, and the file gives None.

These are Chroma's internal tables: a read that fails or finds another shape (a
collection not in cosine space, a metadata value of another type, an index without our
layout) gives None, and the caller asks chromadb; never a guess.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from langchain_semantic_recall.filters import VECTOR_PREFIX
from langchain_semantic_recall.records import HeldVectors, ScopeFilter
from langchain_semantic_recall.vectors.chroma_layout import (
    INDEX_KEY,
    LAYOUT,
    collection_prefix,
    resource_collection_name,
)
from langchain_semantic_recall.vectors.chroma_log import (
    logged_after,
    metadata_segment,
    read_chroma_file,
)
from langchain_semantic_recall.vectors.rows import collect_held

__all__ = ["ChromaFile", "FileIndex"]

_DATABASE: Final = """
SELECT d.id FROM databases AS d
WHERE d.name = 'default_database' AND d.tenant_id = 'default_tenant'
"""
_COLLECTIONS: Final = """
SELECT c.id, c.name, c.config_json_str, c.schema_str FROM collections AS c WHERE c.database_id = ?
"""
_METADATA: Final = """
SELECT m.key, m.str_value, m.int_value, m.float_value, m.bool_value
FROM collection_metadata AS m WHERE m.collection_id = ?
"""
_ROOTS: Final = """
SELECT c.name, m.key, m.str_value, m.int_value, m.float_value, m.bool_value
FROM collections AS c JOIN collection_metadata AS m ON m.collection_id = c.id
WHERE c.database_id = ? AND c.id IN (
    SELECT collection_id FROM collection_metadata WHERE key = 'layout'
)
"""
_KEYS: Final = ("message_id", "resource_id", "thread_id")
"""The metadata `vector_ids` reads of a record, in this order."""
_COLUMNS: Final = ", ".join(
    f"{t}.key, {t}.string_value, {t}.int_value, {t}.float_value, {t}.bool_value"
    for t in ("m", "r", "t")
)
_ROWS: Final = f"""
SELECT e.embedding_id, {_COLUMNS}, EXISTS (
    SELECT 1 FROM embedding_metadata AS x WHERE x.id = e.id AND x.key >= ? AND x.key < ?
)
FROM embeddings AS e
LEFT JOIN embedding_metadata AS m ON m.id = e.id AND m.key = '{_KEYS[0]}'
LEFT JOIN embedding_metadata AS r ON r.id = e.id AND r.key = '{_KEYS[1]}'
LEFT JOIN embedding_metadata AS t ON t.id = e.id AND t.key = '{_KEYS[2]}'
WHERE e.segment_id = ?
"""
_PREFIXED: Final = (VECTOR_PREFIX, VECTOR_PREFIX[:-1] + chr(ord(VECTOR_PREFIX[-1]) + 1))
"""The key range of a message's metadata on its vector (`meta_<key>`): a seek per record
on `embedding_metadata`'s primary key (id, key)."""
_ABSENT: Final = object()
"""A metadata key a row does not hold (distinct from a value of another type)."""
_OTHER: Final = object()
"""A metadata value in a shape this module does not read (the caller asks chromadb)."""


@dataclass(frozen=True)
class FileIndex:
    """What Chroma's file says of one index: its model and dimension, and vectors in scope."""

    model: str
    dimension: int
    held: HeldVectors
    """Each message's vector ids in the scope read, and which carry message metadata (a
    `meta_<key>`; one written before 0.3 carries none): what `vector_ids` answers."""

    @property
    def message_ids(self) -> frozenset[str]:
        """The messages holding at least one vector in the scope read (`message_ids`)."""
        return self.held.messages


@dataclass(frozen=True)
class _Collection:
    id: str
    name: str
    metadata: dict[str, object]
    config: object
    schema: object

    @property
    def cosine(self) -> bool:
        """Whether it is in cosine space (parsed when asked: only the collections read)."""
        return _cosine(self.config, self.schema, self.metadata)


class ChromaFile:
    """Read-only reads of the `chroma.sqlite3` of one embedded Chroma folder.

    A connection per call, in one read transaction (`chroma_log.read_chroma_file`):
    never holds Chroma's file open, never writes it.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        """Read the Chroma folder `folder` (the embedded store's `chroma/`)."""
        self._path = Path(folder) / "chroma.sqlite3"

    def index(self, name: str, scope: ScopeFilter | None) -> FileIndex | None:
        """Index `name`'s model, dimension and each message's vector ids in `scope`.

        As `ChromaVectorIndex.vector_ids(name, scope)` answers once the index is open:
        the collection of the scope's resource (by its name), or every collection of the
        index; rows outside the scope's resource or thread left out. None when the file
        cannot be read, or the index has no root collection of this layout (which opening
        it through chromadb would create, adopt or refuse), or a scope with a filter or
        time range, or anything read has another shape.
        """
        if scope is not None and scope.narrowed:
            return None
        return read_chroma_file(self._path, lambda cursor: _index(cursor, name, scope))

    def indexes(self) -> dict[str, tuple[str, int]] | None:
        """Our indexes in the folder: name -> (embedding model, dimension).

        Only the root collections (those recording a layout) are read: one query, however
        many resources the store holds. None when the file cannot be read or a root's
        metadata has another shape; an empty dict when it holds none (or does not exist).
        """
        if not self._path.is_file():
            return {}
        return read_chroma_file(self._path, _indexes)


def _collections(cursor: sqlite3.Cursor) -> dict[str, _Collection] | None:
    """Every collection by name; None if one reads in another shape (or a name twice)."""
    databases = cursor.execute(_DATABASE).fetchall()
    if len(databases) != 1:
        return None
    listed = cursor.execute(_COLLECTIONS, databases[0]).fetchall()  # one cursor: read whole
    collections = [_collection(cursor, row) for row in listed]
    by_name = {c.name: c for c in collections if c is not None}
    return by_name if len(by_name) == len(collections) else None


def _indexes(cursor: sqlite3.Cursor) -> dict[str, tuple[str, int]] | None:
    databases = cursor.execute(_DATABASE).fetchall()
    if len(databases) != 1:
        return None
    metadata: dict[str, dict[str, object]] = {}
    for name, key, *typed in cursor.execute(_ROOTS, databases[0]).fetchall():
        value = _value(key, typed)
        if not isinstance(name, str) or not isinstance(key, str) or value is _OTHER:
            return None
        metadata.setdefault(name, {})[key] = value
    roots = {name: _root(held) for name, held in metadata.items()}
    return {name: root for name, root in roots.items() if root is not None}


def _root(metadata: dict[str, object]) -> tuple[str, int] | None:
    """(model, dimension) of one of our indexes' root collections; None for another."""
    model = metadata.get("embedding_model")
    dimension = metadata.get("dimension")
    if metadata.get("layout") != LAYOUT or not isinstance(model, str) or not model:
        return None
    if not isinstance(dimension, int) or isinstance(dimension, bool) or dimension <= 0:
        return None
    return model, dimension


def _index(cursor: sqlite3.Cursor, name: str, scope: ScopeFilter | None) -> FileIndex | None:
    by_name = _collections(cursor)
    root = None if by_name is None else by_name.get(name)
    if by_name is None or root is None or not root.cosine or (made := _root(root.metadata)) is None:
        return None
    model, dimension = made
    if scope is not None and scope.resource_id is not None:
        found = by_name.get(resource_collection_name(name, scope.resource_id))
        reached = [] if found is None else [found]
    else:
        prefix = collection_prefix(name)
        reached = [
            c
            for c in by_name.values()
            if c.name.startswith(prefix) and c.metadata.get(INDEX_KEY) == name
        ]
    rows: list[tuple[str, str, bool]] = []
    applied: dict[str, int] = {}
    for collection in reached:
        if not collection.cosine:
            return None
        read = _rows(cursor, collection.id, scope)
        if read is None:
            return None
        applied[collection.id], held = read
        rows += held
    if logged_after(cursor, applied):
        return None  # chromadb applies them before it reads: it tells
    return FileIndex(model, dimension, collect_held(rows))


def _collection(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> _Collection | None:
    collection_id, name, config, schema = row
    if not (isinstance(collection_id, str) and isinstance(name, str)):
        return None
    metadata: dict[str, object] = {}
    for key, *typed in cursor.execute(_METADATA, (collection_id,)).fetchall():
        value = _value(key, typed)
        if not isinstance(key, str) or value is _OTHER or value is _ABSENT:
            return None
        metadata[key] = value
    return _Collection(collection_id, name, metadata, config, schema)


def _cosine(config: object, schema: object, metadata: dict[str, object]) -> bool:
    """Whether the collection is in cosine space, as both its configuration and schema say.

    False for anything else, unreadable or unsaid included: the caller then asks chromadb,
    which tells an index in another space (`chroma_layout.check_space`) from ours.
    """
    if not (isinstance(config, str) and isinstance(schema, str)):
        return False
    try:
        configured = json.loads(config)
        vectors = json.loads(schema)["keys"]["#embedding"]["float_list"]["vector_index"]
        space, enabled = vectors["config"]["space"], vectors["enabled"]
    except (ValueError, KeyError, TypeError):
        return False
    if not isinstance(configured, dict) or space != "cosine" or enabled is not True:
        return False
    for section in ("hnsw", "spann"):
        given = configured.get(section)
        if given is not None and (
            not isinstance(given, dict) or given.get("space", "cosine") != "cosine"
        ):
            return False
    legacy = metadata.get("hnsw:space")
    return legacy is None or legacy == "cosine"


def _rows(
    cursor: sqlite3.Cursor, collection_id: str, scope: ScopeFilter | None
) -> tuple[int, list[tuple[str, str, bool]]] | None:
    """One collection's last write applied, and its records in `scope`.

    Each record as (vector id, message id, whether it carries message metadata), for
    `rows.collect_held`. None: another shape.

    As `ChromaCollections.rows` then `ChromaVectorIndex._vector_ids`: a thread scope's
    `where` keeps the records whose `thread_id` is that text; then a record whose
    metadata names another resource or thread is left out (`ScopeFilter.admits`, which
    tells the same for text values, the only ones read). A record's message is its
    `message_id`, else its own id (one vector of a message).
    """
    found = metadata_segment(cursor, collection_id)
    if found is None:
        return None
    segment, applied = found
    rows: list[tuple[str, str, bool]] = []
    for row in cursor.execute(_ROWS, (*_PREFIXED, segment)):
        vector_id = row[0]
        values = [_value(row[1 + 5 * i], row[2 + 5 * i : 6 + 5 * i]) for i in range(len(_KEYS))]
        if not isinstance(vector_id, str) or any(
            v is _OTHER or not (v is _ABSENT or isinstance(v, str)) for v in values
        ):
            return None
        message_id, resource_id, thread_id = (None if v is _ABSENT else v for v in values)
        if scope is not None and (
            (scope.thread_id is not None and thread_id is None)
            or not scope.admits(str(resource_id), str(thread_id))
        ):
            continue  # a thread's `where` (a text, checked above: never a missing key), `admits`
        message = str(vector_id if message_id is None else message_id)
        rows.append((vector_id, message, bool(row[-1])))
    return applied, rows


def _value(key: object, typed: tuple[object, ...] | list[object]) -> object:
    """A metadata row's value: `_ABSENT` when no row (`key` NULL), `_OTHER` if unreadable.

    Chroma writes exactly one of the typed columns (text, integer, float, bool).
    """
    if key is None:
        return _ABSENT
    text, integer, real, flag = typed
    given = [v for v in (text, integer, real, flag) if v is not None]
    if len(given) != 1:
        return _OTHER
    if text is not None:
        return text if isinstance(text, str) else _OTHER
    if integer is not None:
        return integer if isinstance(integer, int) else _OTHER
    if real is not None:
        return real if isinstance(real, float) else _OTHER
    return bool(flag) if flag in (0, 1) else _OTHER
