"""The in-memory keyword postings: the same answers as SQL, in step with every writer.

A resource's postings are built in the background on its first search (issue 24: the
first search after reopening a 100k-message resource waited ~1 s for them); the writes
made during the build are replayed on them, and any other change discards them.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.records import MessageRecord, ScopeFilter
from langchain_semantic_recall.storage.postings import ResourcePostings
from langchain_semantic_recall.storage.sqlite import SQLiteStorage

WORDS = [
    *("apple", "banana", "cherry", "dog", "garden", "house", "kite", "lemon", "paint"),
    *("painting", "painted", "run", "running"),
]
QUERIES = ["apple", "paint dog", "running kite lemon", "zebra", "house garden painted cherry"]


def record(n: int, thread: str, resource: str, text: str, role: str = "user") -> MessageRecord:
    return MessageRecord(
        id=f"m{n}",
        thread_id=thread,
        resource_id=resource,
        role=role,
        text=text,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        payload=MessageRecord.dump(HumanMessage(text)),
    )


def random_records(rng: random.Random, ids: range, resources: int = 2) -> list[MessageRecord]:
    out = []
    for n in ids:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        role = rng.choice(["user", "assistant", "assistant", "system"])
        out.append(record(n, f"t{n % 7}", f"r{n % 7 % resources}", text, role))
    return out


def scopes() -> list[ScopeFilter]:
    return [
        ScopeFilter(resource_id="r0"),
        ScopeFilter(resource_id="r1"),
        ScopeFilter(resource_id="r1", thread_id="t1"),
        ScopeFilter(resource_id="r0", thread_id="t2"),
        ScopeFilter(resource_id="r0", thread_id="t1"),  # a thread of another resource
    ]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SQLiteStorage, SQLiteStorage]:
    """Two engines on one file: SQL only, and in-memory postings for every resource."""
    path = tmp_path / "m.db"
    sql = SQLiteStorage(path, keyword_cache_docs=0)
    memory = SQLiteStorage(path, keyword_cache_min_docs=1)
    memory._postings.background_docs = 1  # every build in the background (default: 20,000+)
    memory._postings.first_search_in_sql = False  # and started by the first search
    yield sql, memory
    sql.close()
    memory.close()


def assert_same(sql: SQLiteStorage, memory: SQLiteStorage, limit: int = 10) -> None:
    """Same answers; first with the postings being built (SQL), then with them built."""
    for scope in scopes():
        memory.keyword_search("apple", scope=scope, limit=limit)  # starts the builds
    assert memory._postings.join(timeout=30)
    for query in QUERIES:
        for scope in scopes():
            expected = sql.keyword_search(query, scope=scope, limit=limit)
            assert memory.keyword_search(query, scope=scope, limit=limit) == expected


def test_same_ids_scores_and_order_as_sql(pair: tuple[SQLiteStorage, SQLiteStorage]) -> None:
    sql, memory = pair
    sql.put(random_records(random.Random(1), range(400)))
    assert_same(sql, memory)
    assert_same(sql, memory, limit=1)
    assert_same(sql, memory, limit=500)
    found = memory.keyword_search("paint", scope=ScopeFilter(resource_id="r0"), limit=3)
    assert len(found) == 3
    assert [score for _, score in found] == sorted((s for _, s in found), reverse=True)


def test_sees_writes_through_itself(pair: tuple[SQLiteStorage, SQLiteStorage]) -> None:
    sql, memory = pair
    rng = random.Random(2)
    memory.put(random_records(rng, range(300)))
    assert_same(sql, memory)  # loads r0 and r1
    memory.put(random_records(rng, range(280, 340)))  # rewrites and new messages
    assert_same(sql, memory)
    memory.put([record(5, "t5", "r1", "")])  # a rewrite that leaves no terms
    memory.put([record(9000, "t9", "r0", "apple apple kite"), record(9000, "t9", "r0", "dog")])
    assert_same(sql, memory)
    memory.delete_thread("t2")
    assert_same(sql, memory)
    memory.delete_resource("r1")
    assert_same(sql, memory)
    memory.put([record(9001, "t10", "r1", "apple paint")])
    assert_same(sql, memory)


def test_sees_writes_of_another_engine_on_the_same_file(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    sql, memory = pair
    rng = random.Random(3)
    sql.put(random_records(rng, range(300)))
    assert_same(sql, memory)
    sql.put(random_records(rng, range(250, 320)))  # the other engine writes
    assert_same(sql, memory)
    sql.delete_thread("t4", retire=False)
    assert_same(sql, memory)
    memory.put(random_records(rng, range(320, 330)))  # then this one, on top
    assert_same(sql, memory)
    sql.delete_resource("r0")
    assert_same(sql, memory)
    assert memory.keyword_search("apple", scope=ScopeFilter(resource_id="r0"), limit=5) == []


def test_a_failed_write_leaves_the_postings_right(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    sql, memory = pair
    memory.put(random_records(random.Random(4), range(200)))
    assert_same(sql, memory)
    bad = [record(1000, "t0", "r0", "apple kite"), record(1001, "t0", "someone-else", "apple")]
    with pytest.raises(Exception, match="belongs to another resource"):
        memory.put(bad)  # rolled back: m1000 must not be found
    assert_same(sql, memory)
    found = memory.keyword_search("kite", scope=ScopeFilter(resource_id="r0"), limit=500)
    assert "m1000" not in {message_id for message_id, _ in found}


def test_a_commit_by_another_connection_right_after_ours_is_seen(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    """Another connection commits between this engine's COMMIT and its bookkeeping.

    The change marker must be the one read inside this engine's own transaction, so the
    other commit (made in that gap, here deterministically from the commit hook) still
    counts as an outside change and the postings are rebuilt.
    """
    sql, memory = pair
    memory.put(random_records(random.Random(5), range(200)))
    assert_same(sql, memory)  # r0 and r1 are loaded in memory
    commit = memory._postings.commit

    def commit_after_an_outside_write(conn: object) -> None:
        sql.put([record(5000, "t0", "r0", "zebra")])  # the other connection, in the gap
        commit(conn)  # type: ignore[arg-type]

    memory._postings.commit = commit_after_an_outside_write  # type: ignore[method-assign]
    memory.put([record(5001, "t0", "r0", "apple")])
    memory._postings.commit = commit  # type: ignore[method-assign]
    found = memory.keyword_search("zebra", scope=ScopeFilter(resource_id="r0"), limit=5)
    assert [message_id for message_id, _ in found] == ["m5000"]
    assert_same(sql, memory)


def test_memory_bound_evicts_least_recently_searched(tmp_path: Path) -> None:
    sql = SQLiteStorage(tmp_path / "m.db", keyword_cache_docs=0)
    memory = SQLiteStorage(tmp_path / "m.db", keyword_cache_min_docs=1, keyword_cache_docs=150)
    sql.put(random_records(random.Random(5), range(420), resources=3))
    for _ in range(2):  # each resource holds ~100-150 documents: at most one stays loaded
        assert_same(sql, memory)
        assert memory._postings.docs_held <= 150  # the documented bound
    small = SQLiteStorage(tmp_path / "m.db")  # default: resources of 2,000+ messages only
    small.keyword_search("apple", scope=ScopeFilter(resource_id="r0"), limit=5)
    assert len(small._postings) == 0
    for storage in (sql, memory, small):
        storage.close()


WORD = st.sampled_from(WORDS[:6])
EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.integers(0, 40),  # message number (repeats are rewrites)
            st.sampled_from(["a", "A", "a ", "b"]),  # resource
            st.integers(0, 2),  # thread within the resource
            st.lists(WORD, max_size=5).map(" ".join),
            st.booleans(),  # through the engine under test, or the other one
        ),
        st.tuples(st.just("forget"), st.sampled_from(["a", "A", "a ", "b"]), st.integers(0, 2)),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=EVENTS)
def test_isolation_and_agreement_property(
    tmp_path_factory: pytest.TempPathFactory, events: list
) -> None:
    """Whatever the writes, the postings answer as SQL does, and only from the scope."""
    path = tmp_path_factory.mktemp("kw") / "m.db"
    sql = SQLiteStorage(path, keyword_cache_docs=0)
    memory = SQLiteStorage(path, keyword_cache_min_docs=1)
    memory._postings.background_docs = 1  # builds race with the writes
    memory._postings.first_search_in_sql = False
    owner: dict[str, str] = {}
    try:
        for event in events:
            if event[0] == "put":
                _, n, resource, thread, text, through_memory = event
                thread_id = f"{resource}/t{thread}"
                if owner.setdefault(f"m{n}", thread_id) != thread_id:
                    continue  # message ids stay in one thread
                writer = memory if through_memory else sql
                try:
                    writer.put([record(n, thread_id, resource, text or "-")])
                except Exception:  # a forgotten thread: its id is retired
                    continue
            else:
                _, resource, thread = event
                memory.delete_thread(f"{resource}/t{thread}")
            for resource in ("a", "A", "a ", "b"):
                for thread_id in (None, f"{resource}/t0", f"{resource}/t1"):
                    scope = ScopeFilter(resource_id=resource, thread_id=thread_id)
                    for query in ("apple banana", "cherry dog garden", "house"):
                        found = memory.keyword_search(query, scope=scope, limit=8)
                        assert found == sql.keyword_search(query, scope=scope, limit=8)
                        for message_id, _ in found:
                            stored = owner[message_id]
                            assert stored.startswith(f"{resource}/t")
                            assert stored.rsplit("/", 1)[0] == resource
                            assert thread_id is None or stored == thread_id
    finally:
        sql.close()
        memory.close()


# --- background builds ---------------------------------------------------------------------


class GatedBuild:
    """`ResourcePostings.build` held until `release` is set; records the thread it ran on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.threads: list[threading.Thread] = []
        real = ResourcePostings.build

        def build(rows: Sequence[tuple[str, str, str]]) -> ResourcePostings:
            self.threads.append(threading.current_thread())
            self.entered.set()
            self.release.wait(timeout=5)  # the old code ran it on the caller: it waited here
            return real(rows)

        monkeypatch.setattr(ResourcePostings, "build", staticmethod(build))


R0 = ScopeFilter(resource_id="r0")


def test_the_first_search_answers_in_sql_while_the_postings_build_elsewhere(
    pair: tuple[SQLiteStorage, SQLiteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    sql, memory = pair
    sql.put(random_records(random.Random(6), range(300)))
    gate = GatedBuild(monkeypatch)
    first = memory.keyword_search("apple paint", scope=R0, limit=10)
    assert first == sql.keyword_search("apple paint", scope=R0, limit=10)
    assert not gate.release.is_set()
    assert gate.entered.wait(timeout=30)  # the build reads its rows first
    assert gate.threads[0] is not threading.current_thread()
    assert memory._postings.building("r0")
    assert memory.keyword_search("dog", scope=R0, limit=5) == sql.keyword_search(
        "dog", scope=R0, limit=5
    )  # still building: SQL again, no second build
    assert len(gate.threads) == 1
    gate.release.set()
    assert memory._postings.join(timeout=30)
    assert len(memory._postings) == 1
    assert not memory._postings.building("r0")
    assert_same(sql, memory)


def test_a_big_resource_is_built_from_its_second_search(
    pair: tuple[SQLiteStorage, SQLiteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first search waits for Chroma to load the resource's index: no build beside it."""
    sql, memory = pair
    sql.put(random_records(random.Random(12), range(200)))
    memory._postings.first_search_in_sql = True  # the default
    gate = GatedBuild(monkeypatch)
    gate.release.set()
    first = memory.keyword_search("apple", scope=R0, limit=5)
    assert first == sql.keyword_search("apple", scope=R0, limit=5)
    assert not memory._postings.building("r0")
    assert memory._postings.join(timeout=30)
    assert gate.threads == []
    assert len(memory._postings) == 0
    memory.keyword_search("apple", scope=R0, limit=5)  # the second: the build starts
    assert memory._postings.join(timeout=30)
    assert len(gate.threads) == 1
    assert gate.threads[0] is not threading.current_thread()
    assert len(memory._postings) == 1
    assert_same(sql, memory)


def test_writes_during_the_build_are_replayed_on_the_postings(
    pair: tuple[SQLiteStorage, SQLiteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    sql, memory = pair
    rng = random.Random(7)
    memory.put(random_records(rng, range(300)))
    gate = GatedBuild(monkeypatch)
    memory.keyword_search("apple", scope=R0, limit=10)  # the build reads its snapshot now
    memory.put(random_records(rng, range(280, 360)))  # rewrites and new messages
    memory.put([record(2, "t2", "r0", ""), record(9000, "t9", "r0", "apple apple kite")])
    memory.delete_thread("t4")
    memory.put([record(9001, "t9", "r0", "dog")])
    gate.release.set()
    assert memory._postings.join(timeout=30)
    assert len(memory._postings) == 1  # installed, with the writes replayed
    for query in QUERIES:
        for scope in (R0, ScopeFilter(resource_id="r0", thread_id="t9")):
            assert memory.keyword_search(query, scope=scope, limit=50) == sql.keyword_search(
                query, scope=scope, limit=50
            )
    assert_same(sql, memory)


@pytest.mark.parametrize("change", ["another engine writes", "the resource is deleted"])
def test_a_change_the_journal_cannot_replay_discards_the_build(
    pair: tuple[SQLiteStorage, SQLiteStorage], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    sql, memory = pair
    rng = random.Random(8)
    memory.put(random_records(rng, range(300)))
    gate = GatedBuild(monkeypatch)
    memory.keyword_search("apple", scope=R0, limit=10)
    if change == "another engine writes":
        sql.put(random_records(rng, range(250, 330)))
    else:
        memory.delete_resource("r0")
    gate.release.set()
    assert memory._postings.join(timeout=30)
    for query in QUERIES:  # never the snapshot's stale answers
        assert memory.keyword_search(query, scope=R0, limit=50) == sql.keyword_search(
            query, scope=R0, limit=50
        )
    assert_same(sql, memory)  # and once rebuilt from a fresh snapshot


def test_a_small_resource_builds_on_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few ms of build cost less than a thread and a second connection."""
    memory = SQLiteStorage(tmp_path / "m.db", keyword_cache_min_docs=1)
    memory.put(random_records(random.Random(10), range(100)))
    gate = GatedBuild(monkeypatch)
    gate.release.set()
    memory.keyword_search("apple", scope=R0, limit=5)
    assert gate.threads == [threading.current_thread()]
    assert len(memory._postings) == 1
    memory.close()


def test_a_file_that_cannot_be_opened_again_builds_on_the_caller(
    pair: tuple[SQLiteStorage, SQLiteStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    sql, memory = pair
    sql.put(random_records(random.Random(11), range(200)))

    def refused() -> sqlite3.Connection:
        raise StorageError("too many open files")

    monkeypatch.setattr(memory._postings, "_opener", refused)
    gate = GatedBuild(monkeypatch)
    gate.release.set()
    found = memory.keyword_search("apple", scope=R0, limit=5)  # answered, not failed
    assert found == sql.keyword_search("apple", scope=R0, limit=5)
    assert gate.threads == [threading.current_thread()]
    assert len(memory._postings) == 1


def test_an_in_memory_database_builds_on_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = SQLiteStorage(":memory:", keyword_cache_min_docs=1)
    memory.put(random_records(random.Random(9), range(100)))
    gate = GatedBuild(monkeypatch)
    gate.release.set()  # no second connection to an in-memory database: no background
    memory.keyword_search("apple", scope=R0, limit=5)
    assert gate.threads == [threading.current_thread()]
    assert len(memory._postings) == 1
    memory.close()


def test_sees_a_retention_through_itself(pair: tuple[SQLiteStorage, SQLiteStorage]) -> None:
    """`delete_before` on the storage holding postings: they never answer from before it."""
    sql, memory = pair
    rng = random.Random(26)
    old = random_records(rng, range(300))
    new = [
        dataclasses.replace(r, created_at=datetime(2025, 1, 1, tzinfo=UTC))
        for r in random_records(rng, range(300, 420))
    ]
    memory.put(old + new)
    assert_same(sql, memory)  # postings loaded for r0 and r1
    assert len(memory.delete_before(datetime(2024, 6, 1, tzinfo=UTC))) == 300
    assert_same(sql, memory)
    kept = {r.id for r in new}
    for scope in scopes():
        found = memory.keyword_search("apple paint dog", scope=scope, limit=500)
        assert {i for i, _ in found} <= kept


def _statements(storage: SQLiteStorage) -> list[str]:
    """The SQL the storage runs from now on."""
    seen: list[str] = []
    storage._conn.set_trace_callback(seen.append)
    return seen


def busy_resource(rng: random.Random, rare: dict[str, int]) -> list[MessageRecord]:
    """1,500 messages holding 'apple' (more than a search's 1,000 candidates), and
    `rare[word]` of them holding `word` as well, the longer ones more often."""
    texts = [
        " ".join(["apple", *rng.choices(WORDS[1:9], k=rng.randint(0, 14))]) for _ in range(1500)
    ]
    for word, count in rare.items():
        for n in rng.sample(range(1500), count):
            texts[n] += f" {word}" * rng.randint(1, 2)
    return [record(n, f"t{n % 5}", "r0", text) for n, text in enumerate(texts)]


@pytest.mark.parametrize("limit", [1, 10, 40])
def test_rare_terms_settle_a_busy_scope_exactly(
    pair: tuple[SQLiteStorage, SQLiteStorage], limit: int
) -> None:
    """Past 1,000 matches, SQL scores every match of the rarer terms, not FTS5's top 1,000.

    What it returns is proved to be the exact best (no message with only 'apple' can
    reach it), so SQL and the postings (exact over every match) agree, and FTS5's own
    ranking of all 1,500 matches (60 ms for 30,000) is never asked for.
    """
    sql, memory = pair
    sql.put(busy_resource(random.Random(7), {"zebra": 60, "yak": 90}))
    scope = ScopeFilter(resource_id="r0")
    memory.keyword_search("apple", scope=scope, limit=1)  # starts the build
    assert memory._postings.join(timeout=30)
    statements = _statements(sql)
    found = sql.keyword_search("apple zebra yak", scope=scope, limit=limit)
    assert found == memory.keyword_search("apple zebra yak", scope=scope, limit=limit)
    assert len(found) == limit
    assert not any("ORDER BY rank" in statement for statement in statements)
    filtered = ScopeFilter(resource_id="r0", thread_id="t1")
    assert sql.keyword_search("apple yak", scope=filtered, limit=limit) == memory.keyword_search(
        "apple yak", scope=filtered, limit=limit
    )


def test_too_few_rare_matches_fall_back_to_fts5s_ranking(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    """When the rarer terms hold fewer messages than asked for, 'apple' alone decides
    the rest: FTS5 ranks the 1,500 matches and its best 1,000 are scored (as before)."""
    sql, _ = pair
    sql.put(busy_resource(random.Random(8), {"zebra": 3}))
    scope = ScopeFilter(resource_id="r0")
    statements = _statements(sql)
    found = sql.keyword_search("apple zebra", scope=scope, limit=20)
    assert any("ORDER BY rank" in statement for statement in statements)
    assert len(found) == 20
    zebras = {r.id for r in busy_resource(random.Random(8), {"zebra": 3}) if "zebra" in r.text}
    assert {message_id for message_id, _ in found[:3]} == zebras


RARE_WORDS = ["zebra", "yak", "walrus"]


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**16),
    rare=st.tuples(*(st.integers(0, 400) for _ in RARE_WORDS)),
    tagged=st.sampled_from([0.1, 0.5, 0.9]),
)
def test_busy_scopes_answer_as_the_postings_whenever_sql_claims_exactness(
    tmp_path_factory: pytest.TempPathFactory, seed: int, rare: tuple[int, ...], tagged: float
) -> None:
    """Over 1,000 matches of 'apple' (in every message): when SQL does not ask FTS5 to rank
    (it then claims its answer exact), it equals the postings', across limits, threads and
    filters; otherwise it stays inside the scope and its filter."""
    path = tmp_path_factory.mktemp("busy") / "m.db"
    sql = SQLiteStorage(path, keyword_cache_docs=0)
    memory = SQLiteStorage(path, keyword_cache_min_docs=1)
    rng = random.Random(seed)
    records = []
    for n in range(1300):  # r0: 1,200 messages in 3 threads; r1: 100 holding every word
        words = ["apple", *rng.choices(WORDS[1:6], k=rng.randint(0, 3))]
        words += [
            w for w, count in zip(RARE_WORDS, rare, strict=True) if rng.random() < count / 1200
        ]
        resource = "r0" if n < 1200 else "r1"
        tag = "a" if rng.random() < tagged else "b"
        records.append(
            dataclasses.replace(
                record(n, f"{resource}/t{n % 3}", resource, " ".join(words)),
                created_at=datetime(2024, 1, 1 + n % 28, tzinfo=UTC),
                metadata=(("tag", tag),),
            )
        )
    try:
        sql.put(records)
        where = {r.id: r for r in records}
        memory.keyword_search("apple", scope=ScopeFilter(resource_id="r0"), limit=1)
        assert memory._postings.join(timeout=30)
        statements = _statements(sql)
        exact = 0
        for thread in (None, "r0/t1"):
            for narrowed in (
                {},
                {"metadata": (("tag", ("a",)),)},
                {"since": datetime(2024, 1, 15, tzinfo=UTC)},
            ):
                scope = ScopeFilter(resource_id="r0", thread_id=thread, **narrowed)
                for query in ("apple zebra", "apple zebra yak walrus", "banana apple yak"):
                    for limit in (1, 7, 50, 300):
                        statements.clear()
                        found = sql.keyword_search(query, scope=scope, limit=limit)
                        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
                        for message_id, _ in found:
                            held = where[message_id]
                            assert held.resource_id == "r0"
                            assert thread is None or held.thread_id == thread
                            assert scope.matches(held.metadata, held.created_at)
                        if not any("ORDER BY rank" in s for s in statements):
                            exact += 1
                            assert found == memory.keyword_search(query, scope=scope, limit=limit)
        assert len(memory._postings) == 1  # the answers compared were the postings'
        assert exact  # always some: scopes under 1,000 matches, or settled by rarer terms
    finally:
        sql.close()
        memory.close()


def test_a_term_fts5_reads_as_a_phrase_is_counted_exactly(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    """FTS5's tokenizer reads U+19B1 (a New Tai Lue vowel sign, a letter to Python) as a
    separator, so FTS5 counts the 360 messages holding 'zebraᦱ' as holding 'zebra' too.
    The 40 that hold 'zebra' settle the best, with zebra's idf from its 40 messages."""
    sql, memory = pair
    rng = random.Random(11)
    texts = [
        " ".join(["apple", *rng.choices(WORDS[1:4], k=rng.randint(0, 4))]) for _ in range(1500)
    ]
    texts = [
        t + (" zebra" if n < 40 else " zebra\u19b1" if n < 400 else "") for n, t in enumerate(texts)
    ]
    sql.put([record(n, f"t{n % 3}", "r0", text) for n, text in enumerate(texts)])
    memory.keyword_search("apple", scope=R0, limit=1)  # starts the build
    assert memory._postings.join(timeout=30)
    statements = _statements(sql)
    for limit in (1, 5, 30):
        found = sql.keyword_search("apple zebra", scope=R0, limit=limit)
        assert found == memory.keyword_search("apple zebra", scope=R0, limit=limit)
    assert not any("ORDER BY rank" in statement for statement in statements)


def test_a_busy_scopes_sql_search_reads_one_snapshot(tmp_path: Path) -> None:
    """Another connection commits while SQL counts the terms: the answer is still the
    one of the state it began on (statistics, counts and matches of one snapshot)."""
    path = tmp_path / "m.db"
    sql, other = SQLiteStorage(path, keyword_cache_docs=0), SQLiteStorage(path)
    try:
        texts = ["apple" + (" zebra" if n < 40 else "") for n in range(1500)]
        sql.put([record(n, f"t{n % 3}", "r0", text) for n, text in enumerate(texts)])
        before = sql.keyword_search("apple zebra", scope=R0, limit=5)
        later = [record(n, "t0", "r0", "apple zebra zebra") for n in range(2000, 2600)]

        def write_meanwhile(statement: str) -> None:
            if "COUNT(*)" in statement and later:
                other.put([later.pop() for _ in range(len(later))])

        sql._conn.set_trace_callback(write_meanwhile)
        found = sql.keyword_search("apple zebra", scope=R0, limit=5)
        sql._conn.set_trace_callback(None)
        assert not later  # written during the search
        assert found == before
        assert sql.keyword_search("apple zebra", scope=R0, limit=5) != before
    finally:
        sql.close()
        other.close()


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from("花生过敏娘は今ピーナッツー땅콩은ㅋ丽𠀀 a1，。é\u0301ＳＱ１ﾋﾟ'’ß"),
        max_size=30,
    )
)
def test_every_cjk_term_is_one_fts5_token(text: str) -> None:
    """FTS5 (unicode61) re-reads the stored terms: each CJK pair or character must stay
    one token, or the SQL path would count other terms than the in-memory postings."""
    from langchain_semantic_recall.keywords import index_terms

    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(terms, tokenize = 'unicode61 remove_diacritics 0')"
    )
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'row')")
    terms = index_terms(text)
    conn.execute("INSERT INTO f (terms) VALUES (?)", (" ".join(terms),))
    assert {row[0] for row in conn.execute("SELECT term FROM v")} == set(terms)
    conn.close()


CJK_FACTS = [
    "我对花生过敏，请记住。",
    "我女儿小美上周刚满五岁。",
    "我们的项目把所有数据都存在PostgreSQL 16里。",
    "私の犬の名前はビスケットで、ビーグルです。",
    "저는 땅콩 알레르기가 있어요.",
    "Our project stores everything in PostgreSQL 16.",
]
CJK_QUESTIONS = {
    "我对什么过敏？": "m0",
    "小美现在几岁了？": "m1",
    "我们的项目用什么数据库？": "m2",
    "私の犬の名前は何ですか？": "m3",
    "제가 무슨 알레르기가 있죠?": "m4",
}


def test_a_cjk_question_finds_its_sentence_alike_in_sql_postings_and_memory(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    """A question written without spaces shares words, not whole clauses, with the
    message it asks about: the CJK pairs of both keyword paths find it, with one score."""
    from langchain_semantic_recall.storage.memory import InMemoryStorage

    sql, memory = pair
    reference = InMemoryStorage()
    records = [record(n, f"t{n}", "r0", text) for n, text in enumerate(CJK_FACTS)]
    sql.put(records)
    reference.put(records)
    memory.keyword_search("花生", scope=R0, limit=1)  # starts the build
    assert memory._postings.join(timeout=30)
    for question, expected in CJK_QUESTIONS.items():
        found = sql.keyword_search(question, scope=R0, limit=3)
        assert found, question
        assert found[0][0] == expected, question
        assert memory.keyword_search(question, scope=R0, limit=3) == found
        assert [i for i, _ in reference.keyword_search(question, scope=R0, limit=3)] == [
            i for i, _ in found
        ]
