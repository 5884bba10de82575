"""Windows held in memory: the same windows as SQL, after any write.

`SQLiteStorage` answers `get_windows` from the messages earlier windows read
(`held_windows`) when it holds the whole span asked for. Every check here compares with a
second connection to the same file that holds nothing (`window_cache_bytes=0`), so a
stale or foreign message in the held copy shows up as a difference.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sqlite3
import tracemalloc
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langchain_semantic_recall.errors import (
    ForgottenThreadError,
    InvalidInputError,
    ThreadOwnerError,
)
from langchain_semantic_recall.filters import metadata_conditions
from langchain_semantic_recall.records import MessageRecord, ScopeFilter, StoredMessage
from langchain_semantic_recall.storage.held_windows import _Thread
from langchain_semantic_recall.storage.sqlite import SQLiteStorage

START = datetime(2024, 1, 1, tzinfo=UTC)
THREADS = {"t0": "r0", "t1": "r0", "t2": "r1", "t3": "r1"}  # thread -> its resource


def record(n: int, thread: str, text: str, *, day: int = 0, tag: str = "a") -> MessageRecord:
    return MessageRecord(
        id=f"m{n}",
        thread_id=thread,
        resource_id=THREADS[thread],
        role="user" if n % 2 else "assistant",
        text=text,
        created_at=START + timedelta(days=day),
        payload=MessageRecord.dump(HumanMessage(text)),
        metadata={"tag": tag},
    )


def scopes() -> list[ScopeFilter]:
    return [
        ScopeFilter(resource_id="r0"),
        ScopeFilter(resource_id="r1"),
        ScopeFilter(resource_id="r0", thread_id="t1"),
        ScopeFilter(resource_id="r1", thread_id="t0"),  # a thread of another resource
        ScopeFilter(resource_id="r0", metadata=metadata_conditions({"tag": "b"})),
        ScopeFilter(resource_id="r1", since=START + timedelta(days=2)),
    ]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SQLiteStorage, SQLiteStorage]:
    """(holds windows, reads SQL only): two connections to one file."""
    path = tmp_path / "m.sqlite3"
    held = SQLiteStorage(path)
    plain = SQLiteStorage(path, window_cache_bytes=0)
    yield held, plain
    held.close()
    plain.close()


def same_windows(
    held: SQLiteStorage, plain: SQLiteStorage, ids: Sequence[str], before: int, after: int
) -> None:
    for scope in scopes():
        for _ in range(2):  # the second read answers from held messages
            got = held.get_windows(list(ids), before=before, after=after, scope=scope)
            want = plain.get_windows(list(ids), before=before, after=after, scope=scope)
            assert got == want, scope
            assert list(got) == list(want)  # the hits' order too
            for hit, window in got.items():
                assert all(scope.admits_message(m) for m in window)
                assert [m.seq for m in window] == sorted(m.seq for m in window)
                assert hit in {m.id for m in window}


def test_a_window_read_again_comes_from_memory(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    held, plain = pair
    held.put([record(n, "t0", f"message {n}") for n in range(30)])
    ids = ["m3", "m15", "m29"]
    scope = ScopeFilter(resource_id="r0")
    first = held.get_windows(ids, before=2, after=3, scope=scope)
    assert first == plain.get_windows(ids, before=2, after=3, scope=scope)
    assert [m.id for m in first["m29"]] == ["m27", "m28", "m29"]
    with held._lock:  # what the next read finds held, and what it reads in SQL
        again, rest = held._held.windows(held._conn, ids, before=2, after=3, scope=scope)
        inside, none = held._held.windows(held._conn, ["m28"], before=1, after=3, scope=scope)
        assert len(held._held._by_id) == 15  # the three windows' messages
        wider, more = held._held.windows(held._conn, ids, before=3, after=3, scope=scope)
    assert again == first
    assert rest == []
    assert inside == {"m28": first["m29"]}  # not a hit before, but its span is held whole
    assert none == []
    # A window not held, of a thread read before, while there is room: the thread whole.
    assert more == []
    assert len(held._held._by_id) == 30
    assert wider == plain.get_windows(ids, before=3, after=3, scope=scope)
    filtered = ScopeFilter(resource_id="r0", metadata=metadata_conditions({"tag": "a"}))
    held._held.clear()
    held.get_windows(ids, before=2, after=3, scope=filtered)
    assert len(held._held) == 0  # a filtered read may leave messages out: it teaches nothing


@settings(max_examples=200, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(-3, 30), st.integers(0, 6)), max_size=12))
def test_spans_know_exactly_the_seqs_learned(spans: list[tuple[int, int]]) -> None:
    thread = _Thread("r0")
    known: set[int] = set()
    for low, width in spans:
        thread.learn(low, low + width)
        known.update(range(low, low + width + 1))
    assert all(a < b - 1 for a, b in zip(thread.ends, thread.starts[1:], strict=False))
    for low in range(-5, 40):
        for high in range(low, low + 8):
            assert thread.knows(low, high) == (set(range(low, high + 1)) <= known)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, tuple[object, ...]]]:
    ops: list[tuple[str, tuple[object, ...]]] = []
    for _ in range(draw(st.integers(3, 14))):
        kind = draw(st.sampled_from(["put", "put", "put", "read", "read", "drop", "expire"]))
        if kind == "put":  # new ids, or rewrites of earlier ones (same thread)
            n = draw(st.integers(0, 40))
            tag, day = draw(st.sampled_from("ab")), draw(st.integers(0, 4))
            ops.append(("put", (n, f"t{n % 4}", draw(st.sampled_from(["x", "y z"])), day, tag)))
        elif kind == "read":
            ids = draw(st.lists(st.integers(0, 45), min_size=1, max_size=6))
            ops.append(("read", (ids, draw(st.integers(0, 3)), draw(st.integers(0, 3)))))
        elif kind == "drop":
            ops.append(("drop", (draw(st.sampled_from(["t0", "t1", "t2", "t3", "r0", "r1"])),)))
        else:
            ops.append(("expire", (draw(st.integers(0, 4)),)))
    return ops


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations())
def test_held_windows_equal_sql_after_any_writes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, tuple[object, ...]]]
) -> None:
    """Puts, rewrites, deleted threads and resources, and unhooked deletes, interleaved."""
    path = tmp_path_factory.mktemp("held") / "m.sqlite3"
    held, plain = SQLiteStorage(path), SQLiteStorage(path, window_cache_bytes=0)
    try:
        held.put([record(n, f"t{n % 4}", f"seed {n}") for n in range(24)])
        for kind, args in ops:
            if kind == "put":
                n, thread, text, day, tag = args
                with contextlib.suppress(ForgottenThreadError):  # a deleted resource's thread
                    held.put(
                        [record(int(n), str(thread), f"{text} {n}", day=int(day), tag=str(tag))]
                    )  # type: ignore[call-overload]
            elif kind == "read":
                ids, before, after = args
                same_windows(held, plain, [f"m{i}" for i in ids], int(before), int(after))  # type: ignore[union-attr, call-overload]
            elif kind == "drop":
                (target,) = args
                if str(target).startswith("t"):  # emptied, not retired: written again later
                    held.delete_thread(str(target), retire=False)
                else:
                    held.delete_resource(str(target))
            else:
                (day,) = args
                held.delete_before(START + timedelta(days=int(day)))  # type: ignore[call-overload]
        same_windows(held, plain, [f"m{i}" for i in range(0, 46, 3)], 2, 3)
    finally:
        held.close()
        plain.close()


def test_another_connections_write_is_seen(pair: tuple[SQLiteStorage, SQLiteStorage]) -> None:
    held, plain = pair
    held.put([record(n, "t0", f"message {n}") for n in range(10)])
    scope = ScopeFilter(resource_id="r0")
    for _ in range(2):
        held.get_windows(["m9"], before=0, after=3, scope=scope)
    assert len(held._held) == 1
    plain.put([record(10, "t0", "written elsewhere"), record(3, "t0", "rewritten elsewhere")])
    got = held.get_windows(["m9", "m3"], before=0, after=3, scope=scope)
    assert [m.text for m in got["m9"]] == ["message 9", "written elsewhere"]
    assert got["m3"][0].text == "rewritten elsewhere"
    plain.delete_thread("t0")
    assert held.get_windows(["m9"], before=0, after=3, scope=scope) == {}


def holding(path: Path, count: int, hit: str) -> tuple[SQLiteStorage, ScopeFilter]:
    """A storage of `count` messages in t0 that holds them, read around `hit` twice."""
    held = SQLiteStorage(path)
    held.put([record(n, "t0", f"message {n}") for n in range(count)])
    scope = ScopeFilter(resource_id="r0")
    for _ in range(2):
        held.get_windows([hit], before=1, after=1, scope=scope)
    assert len(held._held) == 1
    return held, scope


def test_a_failed_write_empties_the_held_windows(tmp_path: Path) -> None:
    held, scope = holding(tmp_path / "m.sqlite3", 10, "m5")
    with pytest.raises(ThreadOwnerError):  # t0 is r0's: the write fails half-way
        held.put(
            [record(10, "t0", "ok"), dataclasses.replace(record(11, "t0", "no"), resource_id="r1")]
        )
    assert len(held._held) == 0
    window = held.get_windows(["m5", "m9"], before=1, after=1, scope=scope)
    assert [m.id for m in window["m9"]] == ["m8", "m9"]  # m10 was rolled back
    held.close()


def test_a_full_cache_holds_what_it_read_not_whole_threads(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "m.sqlite3", window_cache_bytes=30_000)
    storage.put([record(n, "t0", f"message {n}") for n in range(100)])  # ~100 KB whole
    scope = ScopeFilter(resource_id="r0")
    for hit in ("m10", "m50", "m90", "m10"):
        storage.get_windows([hit], before=2, after=2, scope=scope)
    assert len(storage._held._by_id) == 15  # three windows learned, none read whole
    assert storage._held.bytes_held <= 30_000
    storage.close()


def test_the_bound_holds(tmp_path: Path) -> None:
    small = SQLiteStorage(tmp_path / "m.sqlite3", window_cache_bytes=20_000)
    for thread in ("t0", "t1"):
        base = 0 if thread == "t0" else 100
        small.put([record(base + n, thread, "word " * 20) for n in range(20)])
    scope = ScopeFilter(resource_id="r0")
    for _ in range(3):
        for hit in ("m5", "m105"):
            small.get_windows([hit], before=8, after=8, scope=scope)
            assert 0 < small._held.bytes_held <= 20_000
    assert len(small._held) == 1  # 17 messages cost ~13 KB: the latest read is held
    small.put([record(100 + n, "t1", "word " * 40) for n in range(20, 40)])  # into it
    assert small._held.bytes_held <= 20_000  # the held thread grew past it: evicted
    small.close()


def test_a_write_on_the_same_connection_outside_the_hooks_empties_them(tmp_path: Path) -> None:
    held, scope = holding(tmp_path / "m.sqlite3", 6, "m2")
    conn: sqlite3.Connection = held._conn
    with held._lock:
        conn.execute("UPDATE messages SET text = 'changed' WHERE id = 'm1'")
        conn.commit()
    assert held.get_windows(["m2"], before=1, after=1, scope=scope)["m2"][0].text == "changed"
    held.close()


@pytest.mark.parametrize("forget", ["thread", "resource"])
def test_a_forgotten_thread_or_resource_is_never_read_back(tmp_path: Path, forget: str) -> None:
    held = SQLiteStorage(tmp_path / "m.sqlite3")
    held.put([record(n, "t0", f"message {n}") for n in range(6)])
    held.put([record(n, "t1", f"message {n}") for n in range(6, 9)])
    scope = ScopeFilter(resource_id="r0")
    for _ in range(2):
        held.get_windows(["m2", "m7"], before=1, after=1, scope=scope)
    assert len(held._held) == 2
    if forget == "thread":
        held.delete_thread("t0")
    else:
        held.delete_resource("r0")
    left = held.get_windows(["m2", "m7"], before=1, after=1, scope=scope)
    assert list(left) == ([] if forget == "resource" else ["m7"])
    held.close()


def test_a_window_past_any_thread_is_refused_whatever_is_held(
    pair: tuple[SQLiteStorage, SQLiteStorage],
) -> None:
    held, plain = pair
    held.put([record(n, "t0", f"message {n}") for n in range(6)])
    scope = ScopeFilter(resource_id="r0")
    wide = held.get_windows(["m3"], before=2**31 - 1, after=2**31 - 1, scope=scope)
    assert [m.id for m in wide["m3"]] == [f"m{n}" for n in range(6)]
    for storage in (held, plain):  # held or not, the same clear error (SQLite overflowed)
        with pytest.raises(InvalidInputError, match="window sizes must be integers from 0"):
            storage.get_windows(["m3"], before=2**63, after=0, scope=scope)


@pytest.mark.parametrize("text", ["hi", "😀 " * 300])
def test_the_bound_counts_metadata_and_wide_characters(tmp_path: Path, text: str) -> None:
    """What is held, measured by tracemalloc, stays within `window_cache_bytes`."""
    bound = 300_000
    path = tmp_path / "m.sqlite3"
    setup = SQLiteStorage(path, window_cache_bytes=0)
    meta = {f"k{i}": "v" * 1_000 for i in range(8)}  # 8 of the 32 keys allowed
    for t in range(12):
        records = [record(t * 100 + n, "t0", text) for n in range(20)]
        setup.put([dataclasses.replace(r, thread_id=f"x{t}", metadata=meta) for r in records])
    setup.close()
    store = SQLiteStorage(path, window_cache_bytes=bound)
    everyone = ScopeFilter(resource_id="r0")
    store.get_windows(["m0"], before=0, after=0, scope=everyone)  # the connection warm
    gc.collect()
    tracemalloc.start()
    try:
        for t in range(12):
            store.get_windows([f"m{t * 100 + 10}"], before=9, after=9, scope=everyone)
        gc.collect()
        grown, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(store._held) >= 1
    assert grown <= bound * 1.1, (grown, store._held.bytes_held)
    store.close()


def test_a_full_cache_learns_one_sql_read_in_eight_whatever_memory_answered() -> None:
    from langchain_semantic_recall.storage.held_windows import _FULL_SAMPLE, HeldWindows

    def message(thread: str, seq: int) -> StoredMessage:
        return StoredMessage(
            f"{thread}-{seq}", thread, "r", "user", "x" * 200, START, "{}", seq=seq
        )

    held, scope = HeldWindows(max_bytes=20_000), ScopeFilter(resource_id="r")
    conn = sqlite3.connect(":memory:")  # never asked: the cache is past half full
    seq = 0
    while held.bytes_held < held.max_bytes - held.max_bytes // 16:  # full of thread "a"
        held.learn({f"a-{seq}": (message("a", seq),)}, before=0, after=0, scope=scope)
        seq += 1
    for _ in range(5):  # reads memory answered whole: nothing read in SQL to learn
        found, rest = held.windows(conn, ["a-0"], before=0, after=0, scope=scope)
        assert list(found) == ["a-0"]
        assert not rest
        held.learn({}, before=0, after=0, scope=scope)
    learned = []
    for n in range(_FULL_SAMPLE):  # reads of new threads in SQL: only the last is held
        hit = message(f"new{n}", 0)
        held.learn({hit.id: (hit,)}, before=0, after=0, scope=scope)
        found, _ = held.windows(conn, [hit.id], before=0, after=0, scope=scope)
        learned.append(bool(found))
    assert learned == [False] * (_FULL_SAMPLE - 1) + [True]
