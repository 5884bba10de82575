"""Keyword search for the SQLite storage: an FTS5 index kept in the messages' transactions.

Schema (version 2 of the file):

- `message_fts` (FTS5): one row per keyword-searchable message (user and assistant
  messages with terms), with its terms (`keywords.message_terms`, already stemmed:
  FTS5 only looks them up) and two scope tokens, so that a search intersects posting
  lists inside one resource or thread instead of filtering every match in the file;
- `message_terms`: links an FTS5 row (`doc`) to its message (VACUUM may renumber the
  messages table's own rowids) and keeps the terms for BM25;
- `thread_terms`: per-thread totals (searchable messages, terms) for BM25's average
  length.

Every function here runs inside the caller's transaction: a message and its keyword
index are written, rewritten and deleted together (`search`, called outside one, reads in
its own). SQL is built by pure functions.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

from langchain_semantic_recall.keywords import (
    BM25Params,
    bm25_ceiling,
    message_terms,
    query_terms,
    rank_bm25,
)
from langchain_semantic_recall.records import MessageRecord, ScopeFilter
from langchain_semantic_recall.storage.sqlite_sql import from_iso, metadata_items

Ranked: TypeAlias = list[tuple[str, float]]

MIN_CANDIDATES: Final = 1000
"""A search re-scores at least this many FTS5 matches (every match, in most scopes)."""
RARE_MOST: Final = 8000
"""Most matches of a query's rarer terms a search scores to find its best exactly
(~30 ms at 6,000; FTS5's ranking of 36,000 matches took 62 ms)."""

KEYWORD_TABLES: Final = (
    "CREATE TABLE message_terms (doc INTEGER PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, "
    "terms TEXT NOT NULL)",
    "CREATE VIRTUAL TABLE message_fts USING fts5(terms, scope, "
    "tokenize = 'unicode61 remove_diacritics 0')",
    "CREATE TABLE thread_terms (thread_id TEXT PRIMARY KEY, docs INTEGER NOT NULL, "
    "terms INTEGER NOT NULL)",
)
"""The statements creating the keyword index (schema version 2)."""

_GET_TERMS: Final = "SELECT doc, terms FROM message_terms WHERE message_id = ?"
_INSERT_TERMS: Final = "INSERT INTO message_terms (message_id, terms) VALUES (?, ?)"
_INSERT_FTS: Final = "INSERT INTO message_fts (rowid, terms, scope) VALUES (?, ?, ?)"
_DELETE_TERMS: Final = "DELETE FROM message_terms WHERE doc = ?"
_DELETE_FTS: Final = "DELETE FROM message_fts WHERE rowid = ?"
_ADD_THREAD_TERMS: Final = (
    "INSERT INTO thread_terms (thread_id, docs, terms) VALUES (?, ?, ?) "
    "ON CONFLICT (thread_id) DO UPDATE SET docs = docs + excluded.docs, "
    "terms = terms + excluded.terms"
)
_COUNT_MATCHES: Final = "SELECT COUNT(*) FROM message_fts WHERE message_fts MATCH ?"
OPTIMIZE: Final = "INSERT INTO message_fts(message_fts) VALUES('optimize')"
"""Merge the FTS5 index into one b-tree: the terms of deleted rows leave the index."""


def forget_sql(column: Literal["thread_id", "resource_id"]) -> tuple[str, ...]:
    """Statements dropping the keyword index of a thread or a resource (before its rows)."""
    return (
        "DELETE FROM message_fts WHERE rowid IN (SELECT t.doc FROM message_terms AS t "
        f"JOIN messages AS m ON m.id = t.message_id WHERE m.{column} = ?)",
        "DELETE FROM message_terms WHERE message_id IN "
        f"(SELECT id FROM messages WHERE {column} = ?)",
        "DELETE FROM thread_terms WHERE thread_id IN "
        f"(SELECT thread_id FROM threads WHERE {column} = ?)",
    )


def _token(kind: str, value: str) -> str:
    return kind + hashlib.sha1(value.encode("utf-8")).hexdigest()[:24]


def scope_tokens(resource_id: str, thread_id: str) -> str:
    """The `scope` column of a message: a token for its resource and one for its thread.

    Hashing keeps any id one safe token; a collision could only add candidates, which the
    search drops again by joining the messages table on the exact scope.
    """
    return f"{_token('r', resource_id)} {_token('t', thread_id)}"


def fts_match(scope: ScopeFilter, terms: Sequence[str]) -> str:
    """An FTS5 query: messages of `scope` holding any of `terms` (quoted literally)."""
    tokens = []
    if scope.resource_id is not None:
        tokens.append(_token("r", scope.resource_id))
    if scope.thread_id is not None:
        tokens.append(_token("t", scope.thread_id))
    in_scope = " AND ".join(f'scope : "{token}"' for token in tokens)
    quoted = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f"{in_scope} AND terms : ({quoted})"


def _exact_scope(scope: ScopeFilter, table: str) -> tuple[str, list[str]]:
    pairs = (("resource_id", scope.resource_id), ("thread_id", scope.thread_id))
    kept = [(column, value) for column, value in pairs if value is not None]
    return "".join(f" AND {table}.{c} = ?" for c, _ in kept), [v for _, v in kept]


def candidates_sql(
    scope: ScopeFilter, terms: Sequence[str], limit: int, *, ranked: bool = True
) -> tuple[str, list[Any]]:
    """Up to `limit` FTS5 matches inside `scope`: rows of (message id, terms).

    `ranked`: FTS5's best by its own ranking (which scores every match first: 60 ms for
    a term in 30,000 messages); otherwise any `limit` of them, as the index yields them.
    With a filter, rows are (message id, terms, created_at, metadata): `search` counts
    frequencies over every match of the scope, then keeps the filter's.
    """
    where, params = _exact_scope(scope, "m")
    order = " ORDER BY rank" if ranked else ""
    sql = (
        f"WITH hits AS (SELECT rowid AS doc FROM message_fts WHERE message_fts MATCH ?{order} "
        "LIMIT ?) "
        f"SELECT t.message_id, t.terms{', m.created_at, m.metadata' if scope.narrowed else ''} "
        "FROM hits JOIN message_terms AS t ON t.doc = hits.doc "
        f"JOIN messages AS m ON m.id = t.message_id WHERE 1 = 1{where}"
    )
    return sql, [fts_match(scope, terms), limit, *params]


def stats_sql(scope: ScopeFilter) -> tuple[str, list[Any]]:
    """Searchable messages, and their terms in total, inside `scope`."""
    where, params = _exact_scope(scope, "h")
    sql = (
        "SELECT COALESCE(SUM(s.docs), 0), COALESCE(SUM(s.terms), 0) FROM threads AS h "
        f"JOIN thread_terms AS s ON s.thread_id = h.thread_id WHERE 1 = 1{where}"
    )
    return sql, params


def add_terms(conn: sqlite3.Connection, record: MessageRecord) -> list[str]:
    """Make a stored message keyword-searchable; its terms (none: nothing indexed)."""
    return _add(conn, record.id, record.thread_id, record.resource_id, (record.role, record.text))


def _add(
    conn: sqlite3.Connection,
    message_id: str,
    thread_id: str,
    resource_id: str,
    content: tuple[str, str],
) -> list[str]:
    """Index one message; `content` is its (role, text). Returns its terms."""
    terms = message_terms(*content)
    if not terms:
        return terms
    joined = " ".join(terms)
    doc = conn.execute(_INSERT_TERMS, (message_id, joined)).lastrowid
    conn.execute(_INSERT_FTS, (doc, joined, scope_tokens(resource_id, thread_id)))
    conn.execute(_ADD_THREAD_TERMS, (thread_id, 1, len(terms)))
    return terms


def drop_terms(conn: sqlite3.Connection, message_id: str, thread_id: str) -> None:
    """Remove a message from the keyword index (before it is rewritten)."""
    row = conn.execute(_GET_TERMS, (message_id,)).fetchone()
    if row is None:
        return
    doc, joined = row
    conn.execute(_DELETE_FTS, (doc,))
    conn.execute(_DELETE_TERMS, (doc,))
    conn.execute(_ADD_THREAD_TERMS, (thread_id, -1, -len(joined.split())))


def forget(
    conn: sqlite3.Connection, column: Literal["thread_id", "resource_id"], value: str
) -> None:
    """Drop the keyword index of a thread or resource (call before deleting its rows)."""
    for statement in forget_sql(column):
        conn.execute(statement, (value,))


def move_thread(conn: sqlite3.Connection, thread_id: str, resource_id: str) -> None:
    """Give the keyword index of a thread's messages a new resource (`adopt_thread`)."""
    conn.execute(
        "UPDATE message_fts SET scope = ? WHERE rowid IN (SELECT t.doc FROM message_terms "
        "AS t JOIN messages AS m ON m.id = t.message_id WHERE m.thread_id = ?)",
        (scope_tokens(resource_id, thread_id), thread_id),
    )


def backfill(conn: sqlite3.Connection) -> None:
    """Index the messages a version-1 file already holds (the migration to version 2)."""
    rows = conn.execute("SELECT id, thread_id, resource_id, role, text FROM messages")
    for message_id, thread_id, resource_id, role, text in rows.fetchall():
        _add(conn, message_id, thread_id, resource_id, (role, text))


def reindex_changed(conn: sqlite3.Connection) -> None:
    """Index anew the messages whose terms changed (the migration to version 4).

    Until version 3, a run of CJK characters was one term (a whole clause, which no
    other sentence repeats), and text was not read in NFKC (an accent typed as a
    combining mark cut its word in two); `keywords.tokenize` now cuts CJK into pairs and
    reads NFKC. ASCII text is cut as before; other messages are indexed anew only when
    their terms differ.
    """
    rows = conn.execute(
        "SELECT m.id, m.thread_id, m.resource_id, m.role, m.text, t.terms FROM messages AS m "
        "LEFT JOIN message_terms AS t ON t.message_id = m.id"
    )
    for message_id, thread_id, resource_id, role, text, stored in rows.fetchall():
        if text.isascii() or message_terms(role, text) == (stored.split() if stored else []):
            continue
        drop_terms(conn, message_id, thread_id)
        _add(conn, message_id, thread_id, resource_id, (role, text))


def _frequencies(terms: Sequence[str], docs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    wanted = set(terms)
    counts: dict[str, int] = {}
    for doc_terms in docs.values():
        for term in wanted.intersection(doc_terms):
            counts[term] = counts.get(term, 0) + 1
    return counts


def search(
    conn: sqlite3.Connection, query: str, *, scope: ScopeFilter, limit: int, params: BM25Params
) -> list[tuple[str, float]]:
    """(message id, BM25 score) of the best `limit` keyword matches inside `scope`.

    Exact BM25 over the scope (what the in-memory postings give) when the scope has
    fewer than `max(10 * limit, MIN_CANDIDATES)` matches (nearly always), or when the
    query's rarer terms have fewer than `RARE_MOST` and their matches, all scored, settle
    the best `limit`: the last one outscores any message holding only the other terms
    (`bm25_ceiling`). Otherwise FTS5's own ranking chooses which matches are re-scored.
    One gap: a stored term with a letter unicode61 takes for a mark (on SQLite 3.40, 21
    code points: New Tai Lue vowel signs, two Vedic signs) is its parts to FTS5, which
    then counts it as holding a common term equal to a part: that term's idf is off.

    Its statements read one snapshot: in the caller's transaction, else in a read
    transaction of its own (another connection's commit between them would mix states).
    """
    if conn.in_transaction:
        return _search(conn, query, scope=scope, limit=limit, params=params)
    conn.execute("BEGIN")
    try:
        return _search(conn, query, scope=scope, limit=limit, params=params)
    finally:
        if conn.in_transaction:  # nothing written: ends the read
            conn.execute("ROLLBACK")


def _search(
    conn: sqlite3.Connection, query: str, *, scope: ScopeFilter, limit: int, params: BM25Params
) -> Ranked:
    terms = query_terms(query)
    if not terms:
        return []
    docs, total = conn.execute(*stats_sql(scope)).fetchone()
    if not docs:
        return []

    def score(
        rows: Sequence[tuple[Any, ...]], held: dict[str, list[str]], doc_freq: Mapping[str, int]
    ) -> Ranked:
        stats = {"limit": limit, "docs": docs, "avg_length": total / docs, "params": params}
        return _rank(terms, scope, rows, held, doc_freq, **stats)

    cap = max(10 * limit, MIN_CANDIDATES)
    # A busy scope counts each term's matches first (cheap: FTS5 reads the doclists).
    doc_freq = _counts(conn, scope, terms) if docs >= cap else None
    if doc_freq is None or sum(doc_freq.values()) < cap:
        rows = conn.execute(*candidates_sql(scope, terms, cap, ranked=False)).fetchall()
        if len(rows) < cap:  # every match
            held = _held(rows)
            return score(rows, held, _frequencies(terms, held))
    doc_freq = doc_freq or _counts(conn, scope, terms)
    # Scoring a match here costs about twice what FTS5's ranking of one does.
    rare = _rare(terms, doc_freq, most=min(RARE_MOST, sum(doc_freq.values()) // 2))
    if rare:
        rows = conn.execute(*candidates_sql(scope, rare, RARE_MOST, ranked=False)).fetchall()
        # FTS5 counts a term it reads as a phrase (a few letters are marks to unicode61)
        # in messages without it; the rows hold every message with it: count them exactly.
        held = _held(rows)
        found = _frequencies(rare, held)
        doc_freq = {**doc_freq, **{term: found.get(term, 0) for term in rare}}
        common = [term for term in terms if term not in rare]
        ceiling = bm25_ceiling(common, doc_freq=doc_freq, docs=docs, params=params)
        settled = score(rows, held, doc_freq) if len(rows) < RARE_MOST else []
        if len(settled) == limit and settled[-1][1] > ceiling * (1.0 + 1e-9):
            return settled  # no message without a rarer term can reach its last one
    rows = conn.execute(*candidates_sql(scope, terms, cap)).fetchall()
    return score(rows, _held(rows), doc_freq)


def _held(rows: Sequence[tuple[Any, ...]]) -> dict[str, list[str]]:
    """Message id -> its indexed terms, from rows of `candidates_sql`."""
    return {row[0]: row[1].split() for row in rows}


def _counts(conn: sqlite3.Connection, scope: ScopeFilter, terms: Sequence[str]) -> dict[str, int]:
    """Each term's matches in the scope, as FTS5 counts them."""
    match = _COUNT_MATCHES
    return {term: conn.execute(match, (fts_match(scope, [term]),)).fetchone()[0] for term in terms}


def _rare(terms: Sequence[str], doc_freq: Mapping[str, int], most: int) -> list[str]:
    """The rarest terms, while their matches stay under `most` (none: FTS5 ranks them all).

    Also none when that would be every term: nothing would be left to bound.
    """
    rare: list[str] = []
    held = 0
    for term in sorted(terms, key=lambda t: (doc_freq[t], t)):
        if held + doc_freq[term] >= most:
            break
        rare.append(term)
        held += doc_freq[term]
    return rare if len(rare) < len(terms) else []


def _rank(
    terms: Sequence[str],
    scope: ScopeFilter,
    rows: Sequence[tuple[Any, ...]],
    candidates: dict[str, list[str]],
    doc_freq: Mapping[str, int],
    *,
    limit: int,
    docs: int,
    avg_length: float,
    params: BM25Params,
) -> Ranked:
    """`rank_bm25` over the rows of `candidates_sql`, less what the scope's filter drops.

    `candidates`: the rows' message ids -> their terms (`_held`).
    """
    if scope.narrowed:  # BM25's statistics are the scope's; the filter drops candidates
        kept = {row[0] for row in rows if scope.matches(metadata_items(row[3]), from_iso(row[2]))}
        candidates = {key: value for key, value in candidates.items() if key in kept}
    return rank_bm25(
        terms,
        candidates,
        doc_freq=doc_freq,
        docs=docs,
        avg_length=avg_length,
        params=params,
        limit=limit,
    )
