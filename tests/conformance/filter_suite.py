"""Metadata filters and time ranges: the rules every backend keeps, as tests.

`StorageConformance` and `VectorIndexConformance` inherit these classes, so every
backend that runs the conformance suites runs them too. A filter narrows: the scope's
ids still hold; every message returned passes it (hits and their neighbours); values
match by kind (a bool only a bool, numbers as numbers); since is inclusive, until
exclusive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from langchain_semantic_recall.filters import metadata_conditions
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)

# id -> (thread, resource, day offset, metadata)
ROWS: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "p1": ("t1", "alice", 0, {"project": "apollo", "n": 1}),
    "p2": ("t1", "alice", 1, {"project": "gemini", "n": 2.0}),
    "p3": ("t1", "alice", 2, {}),
    "p4": ("t2", "alice", 3, {"project": "apollo", "urgent": True}),
    "p5": ("t2", "alice", 4, {"project": "apollo", "n": True}),
    "b1": ("t3", "bob", 0, {"project": "apollo"}),
}


def scoped(
    resource: str | None = "alice",
    thread: str | None = None,
    *,
    filter: dict[str, Any] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> ScopeFilter:
    return ScopeFilter(
        resource_id=resource,
        thread_id=thread,
        metadata=metadata_conditions(filter),
        since=since,
        until=until,
    )


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"project": "apollo"}, {"p1", "p4", "p5"}),
    ({"project": {"$in": ["gemini", "mercury"]}}, {"p2"}),
    ({"project": {"$eq": "apollo"}, "urgent": True}, {"p4"}),
    ({"n": 1}, {"p1"}),  # the bool True of p5 is not the number 1
    ({"n": 2}, {"p2"}),  # numbers compare as numbers: 2 == 2.0
    ({"n": True}, {"p5"}),
    ({"missing": "x"}, set()),
]


class StorageFilterConformance:
    """Filters on `MessageStorage`: round trip, keyword search, windows, counts, pages."""

    @pytest.fixture
    def filled(self, storage: MessageStorage) -> Iterator[MessageStorage]:
        from tests.conformance.storage_suite import make_record

        records = [
            replace(
                make_record(mid, thread, resource, text=f"shared lighthouse words {mid}"),
                created_at=day(offset),
                metadata=tuple(sorted(meta.items())),
            )
            for mid, (thread, resource, offset, meta) in ROWS.items()
        ]
        storage.put(records)
        return storage

    def test_metadata_round_trips_and_is_rewritten(self, filled: MessageStorage) -> None:
        windows = filled.get_windows(list(ROWS), before=0, after=0, scope=ScopeFilter("alice"))
        assert {mid: dict(w[0].metadata) for mid, w in windows.items()} == {
            mid: meta for mid, (_, owner, _, meta) in ROWS.items() if owner == "alice"
        }
        zeta = scoped(filter={"project": "zeta"})
        assert filled.keyword_search("lighthouse", scope=zeta, limit=10) == []
        (p1,) = windows["p1"]
        filled.put([replace(p1, metadata=(("project", "zeta"),))])
        again = filled.get_windows(["p1"], before=0, after=0, scope=ScopeFilter("alice"))
        assert dict(again["p1"][0].metadata) == {"project": "zeta"}
        assert [i for i, _ in filled.keyword_search("lighthouse", scope=zeta, limit=10)] == ["p1"]

    @pytest.mark.parametrize(("where", "expected"), CASES)
    async def test_keyword_search_keeps_the_filter_sync_and_async(
        self, filled: MessageStorage, where: dict[str, Any], expected: set[str]
    ) -> None:
        scope = scoped(filter=where)
        sync = filled.keyword_search("lighthouse words", scope=scope, limit=10)
        assert {i for i, _ in sync} == expected
        assert await filled.akeyword_search("lighthouse words", scope=scope, limit=10) == sync

    async def test_a_filter_leaves_keyword_scores_as_they_were(
        self, filled: MessageStorage
    ) -> None:
        """BM25's statistics are the scope's (docs/filtering.md): a filter only drops
        candidates. The in-memory storage once counted document frequencies on the
        filtered messages alone, so a filter raised the scores it kept."""
        whole = dict(filled.keyword_search("lighthouse words", scope=scoped(), limit=10))
        for scope in (
            *(scoped(filter=where) for where, _ in CASES),
            scoped(since=day(1), until=day(3)),
            scoped(thread="t1", filter={"project": "apollo"}),
        ):
            kept = await filled.akeyword_search("lighthouse words", scope=scope, limit=10)
            if scope.thread_id is None:
                assert kept == [(i, pytest.approx(whole[i])) for i, _ in kept]
            else:
                thread = dict(
                    filled.keyword_search("lighthouse words", scope=scoped(thread="t1"), limit=10)
                )
                assert kept == [(i, pytest.approx(thread[i])) for i, _ in kept]

    async def test_time_range_since_inclusive_until_exclusive(self, filled: MessageStorage) -> None:
        scope = scoped(since=day(1), until=day(3))
        found = filled.keyword_search("lighthouse", scope=scope, limit=10)
        assert {i for i, _ in found} == {"p2", "p3"}
        assert await filled.akeyword_search("lighthouse", scope=scope, limit=10) == found
        both = scoped(filter={"project": "apollo"}, since=day(1))
        assert {i for i, _ in filled.keyword_search("lighthouse", scope=both, limit=10)} == {
            "p4",
            "p5",
        }

    @pytest.mark.parametrize(("where", "expected"), CASES)
    async def test_ids_in_scope_are_the_windows_ids_sync_and_async(
        self, filled: MessageStorage, where: dict[str, Any], expected: set[str]
    ) -> None:
        """What a filtered vector search keeps of its candidates: ids only, same answer."""
        if filled.supports_keyword_search:  # loads in-memory postings where a backend has them
            filled.keyword_search("lighthouse", scope=ScopeFilter("alice"), limit=1)
        asked = [*ROWS, "unknown"]
        assert filled.ids_in_scope(asked, scoped(filter=where)) == expected
        for scope in (
            scoped(filter=where),
            scoped(thread="t2", filter=where),
            scoped(filter=where, since=day(1), until=day(4)),
            scoped("bob", filter=where),
        ):
            windows = set(filled.get_windows(asked, before=0, after=0, scope=scope))
            assert filled.ids_in_scope(asked, scope) == windows
            assert await filled.aids_in_scope(asked, scope) == windows

    async def test_the_kept_share_is_unknown_or_about_right(self, filled: MessageStorage) -> None:
        if filled.supports_keyword_search:
            filled.keyword_search("lighthouse", scope=ScopeFilter("alice"), limit=1)
        apollo = scoped(filter={"project": "apollo"})  # 3 of alice's 5
        for share in (filled.kept_share(apollo), await filled.akept_share(apollo)):
            assert share is None or share == pytest.approx(0.6)
        assert filled.kept_share(scoped()) == 1.0  # no filter: all of it

    def test_a_filter_never_widens_the_scope(self, filled: MessageStorage) -> None:
        apollo = {"project": "apollo"}
        assert "b1" not in {
            i for i, _ in filled.keyword_search("lighthouse", scope=scoped(filter=apollo), limit=10)
        }
        thread = scoped(thread="t1", filter=apollo)
        assert [i for i, _ in filled.keyword_search("lighthouse", scope=thread, limit=10)] == ["p1"]
        windows = filled.get_windows(list(ROWS), before=0, after=0, scope=scoped(filter=apollo))
        assert set(windows) == {"p1", "p4", "p5"}

    async def test_windows_keep_only_messages_that_pass(self, filled: MessageStorage) -> None:
        scope = scoped(filter={"project": "gemini"})
        windows = filled.get_windows(["p1", "p2"], before=1, after=1, scope=scope)
        assert list(windows) == ["p2"]
        assert [m.id for m in windows["p2"]] == ["p2"]  # its neighbours are other projects
        assert await filled.aget_windows(["p1", "p2"], before=1, after=1, scope=scope) == windows
        late = filled.get_windows(["p1", "p2"], before=2, after=2, scope=scoped(since=day(1)))
        assert {hit: [m.id for m in w] for hit, w in late.items()} == {"p2": ["p2", "p3"]}
        apollo = filled.get_windows(
            ["p4"], before=1, after=1, scope=scoped(filter={"project": "apollo"})
        )
        assert [m.id for m in apollo["p4"]] == ["p4", "p5"]  # in thread order, gaps allowed

    async def test_counts_and_pages_keep_the_filter(self, filled: MessageStorage) -> None:
        apollo = scoped(filter={"project": "apollo"})
        assert filled.count(apollo) == 3
        assert await filled.acount(apollo) == 3
        assert filled.count(apollo, up_to=2) == 2
        assert filled.count(scoped(until=day(1))) == 1
        page = filled.list_messages(apollo, limit=10)
        assert [m.id for m in page] == ["p1", "p4", "p5"]
        assert [m.id for m in await filled.alist_messages(apollo, limit=10)] == ["p1", "p4", "p5"]
        newest = filled.last_messages(scoped(thread="t2", since=day(4)), limit=5)
        assert [m.id for m in newest] == ["p5"]

    async def test_filters_hold_after_retention_left_gaps_in_a_thread(
        self, filled: MessageStorage
    ) -> None:
        """After `delete_before`, seqs have gaps: each filter still checks its own message."""
        assert {m.id for m in filled.delete_before(day(1))} == {"p1", "b1"}
        apollo = scoped(filter={"project": "apollo"})
        found = filled.keyword_search("lighthouse words", scope=apollo, limit=10)
        assert {i for i, _ in found} == {"p4", "p5"}  # p2 (gemini) now sits where p1 was
        assert await filled.akeyword_search("lighthouse words", scope=apollo, limit=10) == found
        late = filled.keyword_search("lighthouse", scope=scoped(since=day(2)), limit=10)
        assert {i for i, _ in late} == {"p3", "p4", "p5"}
        windows = filled.get_windows(["p2", "p3"], before=2, after=2, scope=scoped(since=day(2)))
        assert {hit: [m.id for m in w] for hit, w in windows.items()} == {"p3": ["p3"]}
        assert filled.count(apollo) == 2


class VectorFilterConformance:
    """Filters on `VectorIndex`: queries, nearest ids, counts and exports keep them."""

    @pytest.fixture
    def loaded(self, vectors: VectorIndex, name: str) -> tuple[VectorIndex, str]:
        from tests.conformance.vector_suite import unit

        records = [
            VectorRecord(
                id=mid,
                vector=unit(1.0, 0.1 * n),
                message_id=mid,
                thread_id=thread,
                resource_id=resource,
                role="user",
                content=f"text {mid}",
                created_at=day(offset),
                metadata=tuple(sorted(meta.items())),
            )
            for n, (mid, (thread, resource, offset, meta)) in enumerate(ROWS.items())
        ]
        vectors.upsert(name, records)
        return vectors, name

    @pytest.mark.parametrize(("where", "expected"), CASES)
    async def test_query_keeps_the_filter_sync_and_async(
        self, loaded: tuple[VectorIndex, str], where: dict[str, Any], expected: set[str]
    ) -> None:
        from tests.conformance.vector_suite import unit

        vectors, name = loaded
        scope = scoped(filter=where)
        hits = vectors.query(name, unit(1.0), k=10, scope=scope)
        assert {h.message_id for h in hits} == expected
        again = await vectors.aquery(name, unit(1.0), k=10, scope=scope)
        assert [h.message_id for h in again] == [h.message_id for h in hits]
        nearest = vectors.nearest(name, unit(1.0), k=10, scope=scope)
        assert {message_id for message_id, _ in nearest} == expected
        anear = await vectors.anearest(name, unit(1.0), k=10, scope=scope)
        assert {message_id for message_id, _ in anear} == expected

    async def test_time_range_and_top_k_fill_from_the_range(
        self, loaded: tuple[VectorIndex, str]
    ) -> None:
        from tests.conformance.vector_suite import unit

        vectors, name = loaded
        scope = scoped(since=day(1), until=day(3))
        hits = vectors.query(name, unit(1.0), k=10, scope=scope)
        assert {h.message_id for h in hits} == {"p2", "p3"}
        # the nearest vector overall (p1) is outside the range: k=1 still finds one inside
        one = await vectors.aquery(name, unit(1.0), k=1, scope=scope)
        assert [h.message_id for h in one] == ["p2"]
        both = scoped(thread="t2", filter={"project": "apollo"}, since=day(4))
        assert [h.message_id for h in vectors.query(name, unit(1.0), k=5, scope=both)] == ["p5"]

    def test_a_filter_never_widens_the_scope(self, loaded: tuple[VectorIndex, str]) -> None:
        from tests.conformance.vector_suite import unit

        vectors, name = loaded
        for scope in (scoped(filter={"project": "apollo"}), scoped("bob", filter={"n": 1})):
            hits = vectors.query(name, unit(1.0), k=10, scope=scope)
            assert all(h.resource_id == scope.resource_id for h in hits)
        bob = scoped("bob", filter={"project": "apollo"})
        assert {h.message_id for h in vectors.query(name, unit(1.0), k=10, scope=bob)} == {"b1"}

    async def test_counts_ids_and_exports_keep_the_filter(
        self, loaded: tuple[VectorIndex, str]
    ) -> None:
        vectors, name = loaded
        apollo = scoped(filter={"project": "apollo"})
        assert vectors.count(name, apollo) == 3
        assert await vectors.acount(name, apollo) == 3
        assert vectors.message_ids(name, apollo) == {"p1", "p4", "p5"}
        held = {"p1": frozenset({"p1"}), "p4": frozenset({"p4"}), "p5": frozenset({"p5"})}
        assert vectors.vector_ids(name, apollo).by_message() == held
        assert (await vectors.avector_ids(name, apollo)).by_message() == held
        ranged = scoped(since=day(1), until=day(3))
        assert vectors.vector_ids(name, ranged).by_message().keys() == {"p2", "p3"}
        # the vectors that carry message metadata: all of alice's but p3's (it has none)
        assert vectors.vector_ids(name, scoped()).carrying == {"p1", "p2", "p4", "p5"}
        exported = list(vectors.export(name, apollo))
        assert {r.id for r in exported} == {"p1", "p4", "p5"}
        assert {dict(r.metadata)["project"] for r in exported} == {"apollo"}
        assert {r.created_at for r in exported} == {day(0), day(3), day(4)}
