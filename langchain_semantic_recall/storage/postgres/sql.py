"""The PostgreSQL storage's SQL: every operation, without I/O.

Each operation is a generator of `Query` objects that receives each statement's `Result`
back and returns the operation's value; `storage` runs it on a sync or an async
connection. Keeping the logic here, written once, is what makes the two twins behave
identically. Tables are prefixed `semantic_recall_` (a database is often shared); ids
are `COLLATE "C"` so they compare and sort by code point, like every other backend. The
schema and its migrations are `schema`'s. Inputs arrive checked by `MessageStorage` (ids
without NUL, aware times, sane windows and limits); only PostgreSQL's own limit is
checked here: `text` columns cannot hold NUL, so a message's text and payload must not
either.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Final, TypeVar

from langchain_semantic_recall.errors import (
    InvalidInputError,
)
from langchain_semantic_recall.keywords import BM25Params, bm25_score, message_terms, query_terms
from langchain_semantic_recall.records import (
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
)
from langchain_semantic_recall.storage.checks import (
    message_id_of_another,
    refuse_taken_ids,
    thread_of_another,
    thread_retired,
)

T = TypeVar("T")
MESSAGES: Final = "semantic_recall_messages"
THREADS: Final = "semantic_recall_threads"
FORGOTTEN: Final = "semantic_recall_forgotten_threads"
_M, _T, _F = MESSAGES, THREADS, FORGOTTEN  # short names for the SQL below
MAX_LEXEME_BYTES: Final = 2046  # PostgreSQL's limit for one tsvector lexeme
_MAX_TSV_BYTES: Final = 500_000  # well under the 1 MB limit of one tsvector
_COLUMNS: Final = "id, thread_id, resource_id, role, text, created_at, payload, seq, metadata"


@dataclass(frozen=True, slots=True)
class Query:
    """One statement to run: SQL with `%s` or `%(name)s` placeholders and its parameters."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any] = ()


@dataclass(frozen=True, slots=True)
class Result:
    """What a statement returned: its rows (if any) and its row count."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    rowcount: int = 0


Steps = Generator[Query, Result, T]

# --- pure helpers -----------------------------------------------------------------------


def _lock_key(thread_id: str) -> int:
    """A signed 64-bit advisory lock key for a thread id (stable across processes)."""
    digest = hashlib.blake2b(f"semantic-recall:thread:{thread_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def _lock_steps(thread_ids: Sequence[str]) -> Steps[None]:
    """Advisory locks on the threads, always in key order (no deadlock between writers)."""
    for key in sorted({_lock_key(t) for t in thread_ids}):
        yield Query("SELECT pg_advisory_xact_lock(%s)", (key,))


def _scope_token(kind: str, value: str) -> str:
    """A lexeme naming a message's resource (`r`) or thread (`t`).

    Terms are letters and digits only, so a token with a colon never meets a real term.
    With it in the tsvector, the GIN index intersects a query's terms with one scope
    instead of matching the whole table and filtering.
    """
    return f"{kind}:{hashlib.blake2b(value.encode(), digest_size=12).hexdigest()}"


def lexeme(term: str) -> str:
    """The tsvector lexeme of a term: itself, or a digest when PostgreSQL cannot hold it.

    A lexeme (and a tsquery word) holds at most 2,047 bytes; a pasted key or a long URL
    makes a longer term. It is indexed and looked up as `h:<digest>` (same rule at write
    and at query time), so it still matches exactly, as on SQLite; BM25 scores the full
    terms, kept in the `terms` column.
    """
    if len(term.encode()) <= MAX_LEXEME_BYTES:
        return term
    return "h:" + hashlib.blake2b(term.encode(), digest_size=16).hexdigest()


def lexemes(terms: Sequence[str], resource_id: str, thread_id: str) -> list[str]:
    """The tsvector of a message: its distinct terms' lexemes that fit, and its scope tokens.

    A message without terms gets none (it is not keyword-searchable).
    """
    if not terms:
        return []
    kept = [_scope_token("r", resource_id), _scope_token("t", thread_id)]
    size = 0
    for word in sorted({lexeme(term) for term in terms}):
        length = len(word.encode())
        if size + length > _MAX_TSV_BYTES:
            continue
        kept.append(word)
        size += length
    return kept


def _tsquery(terms: Sequence[str], scope: ScopeFilter) -> str:
    """Any of the terms, inside the scope (terms are letters and digits: quoting suffices)."""
    words = (lexeme(t) for t in terms if "'" not in t and "\\" not in t)
    query = "(" + " | ".join(f"'{w}'" for w in words) + ")"
    for kind, value in (("r", scope.resource_id), ("t", scope.thread_id)):
        if value is not None:
            query = f"'{_scope_token(kind, value)}' & {query}"
    return query


def _check_storable(record: MessageRecord) -> None:
    """PostgreSQL's `text` holds no NUL: refuse a message whose text or payload has one."""
    for name in ("text", "payload"):
        if "\x00" in getattr(record, name):
            raise InvalidInputError(
                f"message {record.id!r}: its {name} contains a NUL character (\\x00), which "
                "PostgreSQL cannot store in text; remove it (e.g. text.replace('\\x00', ''))"
            )


def _scope_sql(
    scope: ScopeFilter | None, alias: str = "", *, filtered: bool = True
) -> tuple[str, dict[str, Any]]:
    """`AND`-clauses restricting rows to `scope`, with named parameters.

    With `filtered`, the scope's filter too (`_filter_sql`).
    """
    if scope is None:
        return "", {}
    prefix = f"{alias}." if alias else ""
    pairs = {"scope_resource": scope.resource_id, "scope_thread": scope.thread_id}
    columns = {"scope_resource": "resource_id", "scope_thread": "thread_id"}
    kept: dict[str, Any] = {name: value for name, value in pairs.items() if value is not None}
    where = "".join(f" AND {prefix}{columns[name]} = %({name})s" for name in kept)
    if filtered and scope.narrowed:
        condition, params = _filter_sql(scope, prefix)
        where += f" AND {condition}"
        kept.update(params)
    return where, kept


def _filter_sql(scope: ScopeFilter, prefix: str = "") -> tuple[str, dict[str, Any]]:
    """The scope's metadata filter and time range as one condition ("TRUE" if none).

    A metadata value matches by JSONB containment: by kind and value (a bool only a bool,
    numbers as numbers, `filters.same_value`).
    """
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if scope.since is not None:
        clauses.append(f"{prefix}created_at >= %(filter_since)s")
        params["filter_since"] = scope.since
    if scope.until is not None:
        clauses.append(f"{prefix}created_at < %(filter_until)s")
        params["filter_until"] = scope.until
    for n, (key, values) in enumerate(scope.metadata):
        options = []
        for m, value in enumerate(values):
            params[f"filter_{n}_{m}"] = json.dumps({key: value})
            options.append(f"{prefix}metadata @> %(filter_{n}_{m})s::jsonb")
        clauses.append("(" + " OR ".join(options) + ")")
    return " AND ".join(clauses) or "TRUE", params


def _metadata_json(record: MessageRecord) -> str | None:
    return json.dumps(dict(record.metadata), ensure_ascii=False) if record.metadata else None


def _message(row: Sequence[Any]) -> StoredMessage:
    id_, thread_id, resource_id, role, text, created_at, payload, seq, metadata = row
    return StoredMessage(
        *(id_, thread_id, resource_id, role, text, created_at.astimezone(UTC), payload, seq),
        metadata=tuple(sorted((metadata or {}).items())),
    )


@dataclass(slots=True)
class _ThreadState:
    owner: str
    next_seq: int
    new: bool = False


@dataclass(slots=True)
class _PutPlan:
    stored: list[StoredMessage]
    rows: dict[str, StoredMessage]
    threads: dict[str, _ThreadState]


def plan_put(
    records: Sequence[MessageRecord],
    *,
    forgotten: set[str],
    threads: Mapping[str, tuple[str, int]],
    places: Mapping[str, tuple[str, int]],
) -> _PutPlan:
    """Check a batch against the stored state and assign sequence numbers (pure).

    Args:
        records: The batch, in order.
        forgotten: Retired thread ids among the batch's threads.
        threads: Known thread id -> (owner, next seq).
        places: Known message id -> (thread id, seq).

    Raises:
        ForgottenThreadError: a record targets a retired thread.
        OwnershipError: a thread of another resource, or a message id of another thread.
    """
    refuse_taken_ids(records, places.get)  # first: a thread error means none is taken
    states: dict[str, _ThreadState] = {}
    seen = dict(places)
    stored: list[StoredMessage] = []
    for record in records:
        state = states.get(record.thread_id)
        if state is None:
            if record.thread_id in forgotten:
                raise thread_retired(record.thread_id)
            owner, next_seq = threads.get(record.thread_id, (record.resource_id, -1))
            state = _ThreadState(owner, max(next_seq, 0), new=next_seq < 0)
            states[record.thread_id] = state
        if state.owner != record.resource_id:
            raise thread_of_another(record.thread_id, record.resource_id)
        place = seen.get(record.id)
        if place is not None and place[0] != record.thread_id:
            raise message_id_of_another(record.id, record.thread_id)
        if place is None:
            place = seen[record.id] = (record.thread_id, state.next_seq)
            state.next_seq += 1
        stored.append(
            StoredMessage(
                record.id,
                record.thread_id,
                record.resource_id,
                record.role,
                record.text,
                record.created_at,
                record.payload,
                place[1],
                record.id not in places,
                metadata=record.metadata,
            )
        )
    return _PutPlan(stored=stored, rows={m.id: m for m in stored}, threads=states)


# --- operations (statement generators) --------------------------------------------------


def put_steps(records: Sequence[MessageRecord]) -> Steps[list[StoredMessage]]:
    """Write a batch atomically under its threads' locks; the stored messages, in order.

    Raises:
        OwnershipError: a thread or message id belongs to another owner or thread.
        ForgottenThreadError: a thread of the batch was forgotten.
    """
    for record in records:
        _check_storable(record)
    thread_ids = list(dict.fromkeys(r.thread_id for r in records))
    yield from _lock_steps(thread_ids)
    sql = f"SELECT thread_id FROM {_F} WHERE thread_id = ANY(%s)"
    forgotten = (yield Query(sql, (thread_ids,))).rows
    sql = f"SELECT thread_id, resource_id, next_seq FROM {_T} WHERE thread_id = ANY(%s)"
    known = (yield Query(sql, (thread_ids,))).rows
    ids = list(dict.fromkeys(r.id for r in records))
    sql = f"SELECT id, thread_id, seq FROM {_M} WHERE id = ANY(%s)"
    places = (yield Query(sql, (ids,))).rows
    plan = plan_put(
        records,
        forgotten={row[0] for row in forgotten},
        threads={row[0]: (row[1], row[2]) for row in known},
        places={row[0]: (row[1], row[2]) for row in places},
    )
    new = [(t, s.owner) for t, s in plan.threads.items() if s.new]
    if new:
        yield Query(
            f"INSERT INTO {_T} (thread_id, resource_id) SELECT * FROM unnest(%s::text[], "
            "%s::text[])",
            ([t for t, _ in new], [o for _, o in new]),
        )
    rows = list(plan.rows.values())
    terms = [message_terms(m.role, m.text) for m in rows]
    words = [lexemes(t, m.resource_id, m.thread_id) for m, t in zip(rows, terms, strict=True)]
    written = yield Query(
        f"INSERT INTO {_M} ({_COLUMNS}, terms, term_count, tsv) SELECT u.i, u.t, u.r, u.ro, "
        "u.tx, u.c, u.p, u.s, u.md::jsonb, string_to_array(u.te, ' '), u.n, "
        "array_to_tsvector(string_to_array(u.l, ' ')) FROM unnest(%s::text[], %s::text[], "
        "%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::text[], %s::bigint[], "
        "%s::text[], %s::text[], %s::int[], %s::text[]) "
        "AS u(i, t, r, ro, tx, c, p, s, md, te, n, l) "
        f"ON CONFLICT (id) DO UPDATE SET role = excluded.role, text = excluded.text, "
        "created_at = excluded.created_at, payload = excluded.payload, "
        "metadata = excluded.metadata, "
        "terms = excluded.terms, term_count = excluded.term_count, tsv = excluded.tsv "
        f"WHERE {_M}.thread_id = excluded.thread_id RETURNING id",
        (
            *([getattr(m, f) for m in rows] for f in ("id", "thread_id", "resource_id")),
            *([getattr(m, f) for m in rows] for f in ("role", "text", "created_at")),
            [m.payload for m in rows],
            [m.seq for m in rows],
            [_metadata_json(m) for m in rows],
            [" ".join(t) for t in terms],
            [len(t) for t in terms],
            [" ".join(x) for x in words],
        ),
    )
    if written.rowcount != len(rows):  # a concurrent writer took a message id first
        lost = sorted(set(plan.rows) - {row[0] for row in written.rows})
        raise message_id_of_another(lost[0])
    moved = [(t, s.next_seq) for t, s in plan.threads.items()]
    yield Query(
        f"UPDATE {_T} AS t SET next_seq = u.n FROM unnest(%s::text[], %s::bigint[]) "
        "AS u(t, n) WHERE t.thread_id = u.t AND t.next_seq <> u.n",
        ([t for t, _ in moved], [n for _, n in moved]),
    )
    return plan.stored


def windows_steps(
    message_ids: Sequence[str], before: int, after: int, scope: ScopeFilter
) -> Steps[dict[str, tuple[StoredMessage, ...]]]:
    """Each hit inside `scope` with `before`/`after` neighbours, by hit id.

    With a filter, every message returned passes it (neighbours too).
    """
    where, params = _scope_sql(scope)
    around = f" AND {_filter_sql(scope, 'm.')[0]}" if scope.narrowed else ""
    columns = ", ".join(f"m.{c}" for c in _COLUMNS.split(", "))
    rows = (
        yield Query(
            f"WITH hits AS (SELECT id, thread_id, seq FROM {_M} WHERE id = ANY(%(ids)s)"
            f"{where}) SELECT hits.id, {columns} FROM hits JOIN {_M} AS m "
            "ON m.thread_id = hits.thread_id AND m.seq BETWEEN hits.seq - %(before)s "
            f"AND hits.seq + %(after)s{around} ORDER BY hits.id, m.seq",
            {"ids": list(message_ids), "before": before, "after": after, **params},
        )
    ).rows
    windows: dict[str, list[StoredMessage]] = {}
    for row in rows:
        windows.setdefault(row[0], []).append(_message(row[1:]))
    return {hit: tuple(windows[hit]) for hit in message_ids if hit in windows}


def in_scope_steps(message_ids: Sequence[str], scope: ScopeFilter) -> Steps[set[str]]:
    """Which of `message_ids` lie inside `scope` (its filter too): ids only, by the key."""
    where, params = _scope_sql(scope)
    sql = f"SELECT id FROM {_M} WHERE id = ANY(%(ids)s){where}"
    return {row[0] for row in (yield Query(sql, {"ids": list(message_ids), **params})).rows}


def list_steps(
    scope: ScopeFilter | None, after: tuple[str, int] | None, limit: int
) -> Steps[list[StoredMessage]]:
    """A page of messages ordered by (thread_id, seq), strictly after `after`."""
    where, params = _scope_sql(scope)
    page: dict[str, Any] = {**params, "limit": limit}
    if after is not None:
        where += " AND (thread_id, seq) > (%(after_thread)s, %(after_seq)s)"
        page.update(after_thread=after[0], after_seq=after[1])
    sql = f"SELECT {_COLUMNS} FROM {_M} WHERE TRUE{where} ORDER BY thread_id, seq LIMIT %(limit)s"
    return [_message(row) for row in (yield Query(sql, page)).rows]


def last_steps(scope: ScopeFilter, limit: int) -> Steps[list[StoredMessage]]:
    """The newest `limit` messages of the scope's thread, oldest first (its seq key)."""
    where, params = _scope_sql(scope)
    sql = f"SELECT {_COLUMNS} FROM {_M} WHERE TRUE{where} ORDER BY seq DESC LIMIT %(limit)s"
    rows = (yield Query(sql, {**params, "limit": limit})).rows
    return [_message(row) for row in reversed(rows)]


def threads_steps(resource_id: str | None) -> Steps[list[ThreadInfo]]:
    """The threads of a resource (every thread when None), with sizes and dates."""
    where = " WHERE t.resource_id = %s" if resource_id is not None else ""
    rows = (
        yield Query(
            "SELECT t.thread_id, t.resource_id, count(m.id), min(m.created_at), "
            f"max(m.created_at), t.next_seq FROM {_T} AS t LEFT JOIN {_M} AS m ON "
            f"m.thread_id = t.thread_id{where} GROUP BY t.thread_id, t.resource_id "
            "ORDER BY t.thread_id",
            () if resource_id is None else (resource_id,),
        )
    ).rows
    return [
        ThreadInfo(t, r, n, first.astimezone(UTC), last.astimezone(UTC), seq)
        if n
        else ThreadInfo(t, r, 0, None, None, seq)
        for t, r, n, first, last, seq in rows
    ]


def one_value_steps(sql: str, value: str, default: Any) -> Steps[Any]:
    """The first column of the first row of `sql` for `value`, else `default`."""
    rows = (yield Query(sql, (value,))).rows
    return rows[0][0] if rows else default


def count_steps(scope: ScopeFilter | None, up_to: int | None = None) -> Steps[int]:
    """The number of messages inside `scope` (at most `up_to`, reading no further)."""
    where, scope_params = _scope_sql(scope)
    params: dict[str, Any] = {**scope_params, "up_to": up_to}
    sql = f"SELECT 1 FROM {_M} WHERE TRUE{where}" + (" LIMIT %(up_to)s" if up_to else "")
    return int((yield Query(f"SELECT count(*) FROM ({sql}) AS scope", params)).rows[0][0])


def keyword_steps(
    query: str, scope: ScopeFilter, limit: int, params: BM25Params
) -> Steps[list[tuple[str, float]]]:
    """(message id, BM25 score) of the best `limit` keyword matches inside `scope`."""
    terms = query_terms(query)
    if not terms:
        return []
    where, scope_params = _scope_sql(scope, filtered=False)
    sql = f"SELECT count(*), coalesce(sum(term_count), 0) FROM {_M} WHERE term_count > 0"
    stats = (yield Query(sql + where, scope_params)).rows[0]
    docs, total = int(stats[0]), int(stats[1])
    if not docs:
        return []
    # BM25's statistics are the scope's; the filter only says which matches are kept.
    admitted, filter_params = _filter_sql(scope) if scope.narrowed else ("TRUE", {})
    found = (
        yield Query(
            f"SELECT id, term_count, ARRAY(SELECT x FROM unnest(terms) AS x "
            f"WHERE x = ANY(%(terms)s)), {admitted} FROM {_M} "
            f"WHERE tsv @@ %(query)s::tsquery{where}",
            {"terms": terms, "query": _tsquery(terms, scope), **scope_params, **filter_params},
        )
    ).rows
    counts = {id_: (Counter(matched), length) for id_, length, matched, _ in found}
    kept = {row[0] for row in found if row[3]}
    doc_freq = Counter(term for c, _ in counts.values() for term in c)
    scored: list[tuple[str, float]] = []
    for id_, (c, length) in counts.items():
        if id_ not in kept:
            continue
        score = bm25_score(
            terms, c, length, doc_freq=doc_freq, docs=docs, avg_length=total / docs, params=params
        )
        if score > 0:
            scored.append((id_, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


OWNER_SQL: Final = f"SELECT resource_id FROM {_T} WHERE thread_id = %s"
FORGOTTEN_SQL: Final = f"SELECT TRUE FROM {_F} WHERE thread_id = %s"


COMPACTED: Final = (MESSAGES, THREADS, FORGOTTEN)
"""The tables `compact_steps` rewrites (the schema-version table holds no user data)."""
_TABLE_BYTES: Final = (
    "SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest(%s::text[]) AS t"
)


def compact_steps() -> Steps[tuple[int, int]]:
    """`VACUUM (FULL, ANALYZE)` of the package's tables; (bytes before, bytes after).

    `VACUUM FULL` writes each table and its indexes anew (GIN keyword index included)
    and drops the old files, so deleted rows leave the table files. It cannot run in a
    transaction: run these steps on an autocommit connection, outside `transaction()`.
    """
    tables = list(COMPACTED)
    before = int((yield Query(_TABLE_BYTES, (tables,))).rows[0][0] or 0)
    for table in tables:
        yield Query(f"VACUUM (FULL, ANALYZE) {table}")
    after = int((yield Query(_TABLE_BYTES, (tables,))).rows[0][0] or 0)
    return before, after
