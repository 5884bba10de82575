"""The PostgreSQL storage's schema: its tables, migrations and set-up, without I/O.

The database carries its schema version (table `semantic_recall_schema_version`, one
row per applied version). `setup_steps` creates or migrates the schema in one
transaction under an advisory lock, so many processes may start at once; a database
migrated by a later release is refused. Like every operation of `sql`, it is a
generator of statements that `storage` runs on a sync or an async connection.
"""

from __future__ import annotations

import logging
from typing import Final

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.filters import METADATA_KEY
from langchain_semantic_recall.keywords import message_terms
from langchain_semantic_recall.storage.checks import (
    payload_metadata_columns,
    refused_metadata_note,
)
from langchain_semantic_recall.storage.postgres.sql import (
    FORGOTTEN,
    MAX_LEXEME_BYTES,
    MESSAGES,
    THREADS,
    Query,
    Steps,
    lexemes,
)

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 5
VERSIONS: Final = "semantic_recall_schema_version"
_LOCK_SETUP: Final = 0x53525F5345545550  # advisory lock key of schema set-up ("SR_SETUP")
_M, _T, _F = MESSAGES, THREADS, FORGOTTEN  # short names for the SQL below

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        f'CREATE TABLE {_T} (thread_id TEXT COLLATE "C" PRIMARY KEY, '
        'resource_id TEXT COLLATE "C" NOT NULL, next_seq BIGINT NOT NULL DEFAULT 0, '
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        f"CREATE INDEX {_T}_resource ON {_T} (resource_id, thread_id)",
        f'CREATE TABLE {_M} (id TEXT COLLATE "C" PRIMARY KEY, '
        f'thread_id TEXT COLLATE "C" NOT NULL REFERENCES {_T} (thread_id), '
        'resource_id TEXT COLLATE "C" NOT NULL, seq BIGINT NOT NULL, role TEXT NOT NULL, '
        "text TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL, payload TEXT NOT NULL, "
        "UNIQUE (thread_id, seq))",
        f"CREATE INDEX {_M}_resource ON {_M} (resource_id, thread_id, seq)",
        f'CREATE TABLE {_F} (thread_id TEXT COLLATE "C" PRIMARY KEY, '
        'resource_id TEXT COLLATE "C", forgotten_at TIMESTAMPTZ NOT NULL DEFAULT now())',
    ),
    2: (  # keyword search; rows written before it are backfilled by _backfill_terms
        f"ALTER TABLE {_M} ADD COLUMN terms TEXT[] NOT NULL DEFAULT '{{}}', "
        "ADD COLUMN term_count INTEGER NOT NULL DEFAULT 0, ADD COLUMN tsv TSVECTOR",
        f"CREATE INDEX {_M}_tsv ON {_M} USING GIN (tsv)",
        # BM25's scope statistics from the index alone (an index-only scan).
        f"DROP INDEX IF EXISTS {_M}_resource",
        f"CREATE INDEX {_M}_resource ON {_M} (resource_id, thread_id, seq) INCLUDE (term_count)",
    ),
    # Terms over 2,046 bytes, left out of `tsv` before, get their digest lexeme
    # (`sql.lexeme`): done by _index_long_terms, no statement of its own.
    3: (),
    # Message metadata (NULL for none), for search filters (`sql._filter_sql`).
    4: (f"ALTER TABLE {_M} ADD COLUMN metadata JSONB",),
    # CJK text is indexed by character pairs, other text in NFKC (`keywords.tokenize`):
    # the messages whose terms changed get them anew (_backfill_terms), no statement.
    5: (),
}
"""Version -> the statements that bring a database from the previous version to it."""


def setup_steps() -> Steps[int]:
    """Create or migrate the schema (one transaction, under an advisory lock)."""
    yield Query("SELECT pg_advisory_xact_lock(%s)", (_LOCK_SETUP,))
    # Asked only when missing: PostgreSQL refuses even `IF NOT EXISTS` without the
    # schema's CREATE right, which an app role given its tables need not have.
    if (yield Query("SELECT to_regclass(%s)", (VERSIONS,))).rows[0][0] is None:
        yield Query(
            f"CREATE TABLE {VERSIONS} (version INTEGER NOT NULL, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
    version = (yield Query(f"SELECT max(version) FROM {VERSIONS}")).rows[0][0] or 0
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"the PostgreSQL schema is at version {version}, newer than this package "
            f"understands ({SCHEMA_VERSION}); upgrade langchain-semantic-recall"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[target]:
            yield Query(statement)
        if target == 2:
            yield from _backfill_terms()
        if target == 3:
            yield from _index_long_terms()
        if target == 4:
            yield from _backfill_metadata()
        if target == 5:
            yield from _backfill_terms(changed_only=True)
        yield Query(f"INSERT INTO {VERSIONS} (version) VALUES (%s)", (target,))
        logger.info("PostgreSQL storage: schema migrated to v%d", target)
    return int(version)


def _backfill_terms(*, changed_only: bool = False) -> Steps[None]:
    """Index the keyword terms of messages written before schema version 2.

    `changed_only`: only those whose terms changed in version 5 (CJK text cut into
    pairs, text read in NFKC; ASCII text is cut as before).
    """
    after = ""
    while True:
        sql = f"SELECT id, role, text, resource_id, thread_id, terms FROM {_M} WHERE id > %s "
        page = (yield Query(sql + "ORDER BY id LIMIT 1000", (after,))).rows
        if not page:
            return
        ids, terms, counts, words = [], [], [], []
        for id_, role, text, resource_id, thread_id, stored in page:
            if changed_only and text.isascii():
                continue
            found = message_terms(role, text)
            if changed_only and found == list(stored or ()):
                continue
            ids.append(id_)
            terms.append(found)
            counts.append(len(found))
            words.append(lexemes(found, resource_id, thread_id))
        yield Query(
            f"UPDATE {_M} AS m SET terms = v.terms, term_count = v.n, tsv = v.tsv FROM "
            "(SELECT i, string_to_array(t, ' ') AS terms, n, "
            "array_to_tsvector(string_to_array(l, ' ')) AS tsv FROM "
            "unnest(%s::text[], %s::text[], %s::int[], %s::text[]) AS u(i, t, n, l)) AS v "
            "WHERE m.id = v.i",
            (ids, [" ".join(t) for t in terms], counts, [" ".join(x) for x in words]),
        )
        after = page[-1][0]


def _index_long_terms() -> Steps[None]:
    """Rebuild the tsvector of messages holding a term too long for one lexeme."""
    sql = (
        f"SELECT id, terms, resource_id, thread_id FROM {_M} WHERE EXISTS "
        "(SELECT 1 FROM unnest(terms) AS x WHERE octet_length(x) > %s)"
    )
    rows = (yield Query(sql, (MAX_LEXEME_BYTES,))).rows
    for start in range(0, len(rows), 1000):
        page = rows[start : start + 1000]
        yield Query(
            f"UPDATE {_M} AS m SET tsv = array_to_tsvector(string_to_array(u.l, ' ')) "
            "FROM unnest(%s::text[], %s::text[]) AS u(i, l) WHERE m.id = u.i",
            (
                [id_ for id_, *_ in page],
                [" ".join(lexemes(terms, r, t)) for _, terms, r, t in page],
            ),
        )
    if rows:
        logger.info("PostgreSQL storage: %d messages with long terms re-indexed", len(rows))


def _backfill_metadata() -> Steps[None]:
    """Copy the metadata of messages stored before schema version 4 into their column.

    A message's `additional_kwargs["metadata"]` is its filterable metadata since then;
    one stored before kept it in its payload only, where every filter passed it by. One
    whose metadata today's `index` would refuse keeps none (a warning counts them).
    """
    after = ""
    refused: list[str] = []
    sql = f"SELECT id, payload FROM {_M} WHERE id > %s AND strpos(payload, %s) > 0 "
    while True:
        page = (yield Query(sql + "ORDER BY id LIMIT 1000", (after, f'"{METADATA_KEY}"'))).rows
        if not page:
            break
        columns, invalid = payload_metadata_columns(page)
        refused += invalid
        if columns:
            ids, texts = zip(*columns, strict=True)
            yield Query(
                f"UPDATE {_M} AS m SET metadata = u.j::jsonb "
                "FROM unnest(%s::text[], %s::text[]) AS u(i, j) WHERE m.id = u.i",
                (list(ids), list(texts)),
            )
        after = page[-1][0]
    if refused:
        logger.warning("PostgreSQL storage: %s", refused_metadata_note(refused))
