"""The message-storage conformance suite: the rules of ``MessageStorage``, as tests.

Every backend runs it by subclassing :class:`StorageConformance` and providing a
``storage`` fixture that yields a fresh, empty storage::

    class TestSQLiteStorage(StorageConformance):
        @pytest.fixture
        def storage(self, tmp_path: Path) -> Iterator[MessageStorage]:
            storage = SQLiteStorage(tmp_path / "messages.db")
            yield storage
            storage.close()
"""

from __future__ import annotations

import pickle
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_semantic_recall.errors import (
    ForgottenThreadError,
    InvalidInputError,
    MessageIdTakenError,
    OwnershipError,
    ThreadOwnerError,
)
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    MessageRecord,
    Role,
    ScopeFilter,
    ThreadPlace,
)
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.memory import InMemoryStorage
from tests.conformance.filter_suite import StorageFilterConformance

BASE_TIME = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


def make_record(
    message_id: str,
    thread_id: str = "t1",
    resource_id: str = "r1",
    *,
    role: Role = "user",
    text: str | None = None,
    minute: int = 0,
    created_at: datetime | None = None,
) -> MessageRecord:
    """A record whose payload is a real LangChain message of the role's type."""
    text = f"text of {message_id}" if text is None else text
    if role == "user":
        message: HumanMessage | AIMessage | SystemMessage | ToolMessage = HumanMessage(text)
    elif role == "assistant":
        message = AIMessage(text)
    elif role == "system":
        message = SystemMessage(text)
    else:
        message = ToolMessage(text, tool_call_id="call-1")
    message.id = message_id
    return MessageRecord(
        id=message_id,
        thread_id=thread_id,
        resource_id=resource_id,
        role=role,
        text=text,
        created_at=BASE_TIME + timedelta(minutes=minute) if created_at is None else created_at,
        payload=MessageRecord.dump(message),
    )


def make_thread(count: int, thread_id: str = "t1", resource_id: str = "r1") -> list[MessageRecord]:
    """``count`` records ``<thread_id>-m0``.. of one thread, a minute apart."""
    return [
        make_record(f"{thread_id}-m{i}", thread_id, resource_id, minute=i) for i in range(count)
    ]


def ids(messages: Sequence[MessageRecord]) -> list[str]:
    return [m.id for m in messages]


@dataclass
class _Model:
    """The expected state of a storage after a random history (for the property test)."""

    owners: dict[str, str] = field(default_factory=dict)
    threads: dict[str, list[str]] = field(default_factory=dict)
    homes: dict[str, str] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)

    def put(self, batch: list[tuple[str, str, str]]) -> bool:
        """Apply (message, thread, resource) records; False (nothing applied) if illegal."""
        owners, threads, homes = dict(self.owners), dict(self.threads), dict(self.homes)
        for message_id, thread_id, resource_id in batch:
            if thread_id in self.forgotten or owners.setdefault(thread_id, resource_id) != (
                resource_id
            ):
                return False
            if homes.setdefault(message_id, thread_id) != thread_id:
                return False
            order = threads[thread_id] = list(threads.get(thread_id, []))
            if message_id not in order:
                order.append(message_id)
        self.owners, self.threads, self.homes = owners, threads, homes
        return True

    def forget(self, thread_id: str, *, retire: bool = True) -> None:
        if retire:
            self.forgotten.add(thread_id)
        self.owners.pop(thread_id, None)
        for message_id in self.threads.pop(thread_id, []):
            del self.homes[message_id]


BAD_IDS: list[object] = ["", "   ", "t\x00", "\x00", "t\ud800", 7, None]
"""Ids no backend may take: blank, not a string, NUL, a lone surrogate."""

Call = Callable[[Callable[..., Any], Any], Any]
"""Calls one storage method (``method(..)``) with a bad value; see :func:`run_call`."""


async def run_call(
    storage: MessageStorage, call: Call, bad: object, *, asynchronous: bool
) -> object:
    """Run ``call`` on the sync method it names, or on its async twin (awaited)."""
    name = call.__name__.split("__")[0]
    method = getattr(storage, f"a{name}" if asynchronous else name)
    result = call(method, bad)
    return await result if asynchronous else result


def get_thread_owner__id(m: Callable[..., Any], bad: object) -> Any:
    return m(bad)


def is_forgotten__id(m: Callable[..., Any], bad: object) -> Any:
    return m(bad)


def delete_thread__id(m: Callable[..., Any], bad: object) -> Any:
    return m(bad)


def delete_thread__id_kept(m: Callable[..., Any], bad: object) -> Any:
    return m(bad, retire=False)


def delete_thread__owner(m: Callable[..., Any], bad: object) -> Any:
    return m("t1", owner=_optional(bad))


def move_thread__owner(m: Callable[..., Any], bad: object) -> Any:
    return m("t1", to_resource="r2", owner=_optional(bad))


def delete_resource__id(m: Callable[..., Any], bad: object) -> Any:
    return m(bad)


def get_windows__message_id(m: Callable[..., Any], bad: object) -> Any:
    return m(["t1-m0", bad], before=1, after=1, scope=ScopeFilter("r1"))


def _optional(bad: object) -> Any:
    """``bad`` for a parameter where None is legal (it means "any"): a list instead."""
    return ["t1"] if bad is None else bad


def get_windows__scope_resource(m: Callable[..., Any], bad: object) -> Any:
    return m(["t1-m0"], before=1, after=1, scope=ScopeFilter(resource_id=_optional(bad)))


def get_windows__scope_thread(m: Callable[..., Any], bad: object) -> Any:
    return m(["t1-m0"], before=1, after=1, scope=ScopeFilter("r1", thread_id=_optional(bad)))


def list_messages__scope_thread(m: Callable[..., Any], bad: object) -> Any:
    return m(ScopeFilter(thread_id=_optional(bad)))


def list_messages__after_thread(m: Callable[..., Any], bad: object) -> Any:
    return m(after=(bad, 0))


def count__scope_resource(m: Callable[..., Any], bad: object) -> Any:
    return m(ScopeFilter(resource_id=_optional(bad)))


def keyword_search__scope_resource(m: Callable[..., Any], bad: object) -> Any:
    return m("text", scope=ScopeFilter(resource_id=_optional(bad)), limit=3)


def list_threads__resource(m: Callable[..., Any], bad: object) -> Any:
    return m(_optional(bad))


ID_CALLS: list[Call] = [
    get_thread_owner__id,
    is_forgotten__id,
    delete_thread__id,
    delete_thread__id_kept,
    delete_thread__owner,
    move_thread__owner,
    delete_resource__id,
    get_windows__message_id,
    get_windows__scope_resource,
    get_windows__scope_thread,
    list_messages__scope_thread,
    list_messages__after_thread,
    count__scope_resource,
    keyword_search__scope_resource,
    list_threads__resource,
]
"""Every public method that takes an id, each given the bad id where it takes one."""


def get_windows__negative_before(m: Callable[..., Any], _: object) -> Any:
    return m(["t1-m1"], before=-1, after=0, scope=ScopeFilter("r1"))


def get_windows__negative_after(m: Callable[..., Any], _: object) -> Any:
    return m(["t1-m1"], before=0, after=-1, scope=ScopeFilter("r1"))


def get_windows__fractional_size(m: Callable[..., Any], _: object) -> Any:
    return m(["t1-m1"], before=1.5, after=0, scope=ScopeFilter("r1"))


def get_windows__ids_as_one_string(m: Callable[..., Any], _: object) -> Any:
    return m("t1-m1", before=1, after=1, scope=ScopeFilter("r1"))


def get_windows__scope_not_a_filter(m: Callable[..., Any], _: object) -> Any:
    return m(["t1-m1"], before=1, after=1, scope="r1")


def list_messages__limit_zero(m: Callable[..., Any], _: object) -> Any:
    return m(limit=0)


def list_messages__limit_negative(m: Callable[..., Any], _: object) -> Any:
    return m(ScopeFilter("r1"), limit=-5)


def list_messages__limit_not_an_int(m: Callable[..., Any], _: object) -> Any:
    return m(limit="10")


def list_messages__after_not_a_pair(m: Callable[..., Any], _: object) -> Any:
    return m(after="t1")


def list_messages__after_seq_not_an_int(m: Callable[..., Any], _: object) -> Any:
    return m(after=("t1", "0"))


def list_messages__scope_not_a_filter(m: Callable[..., Any], _: object) -> Any:
    return m({"resource_id": "r1"})


def count__scope_not_a_filter(m: Callable[..., Any], _: object) -> Any:
    return m("r1")


def keyword_search__limit_zero(m: Callable[..., Any], _: object) -> Any:
    return m("text", scope=ScopeFilter("r1"), limit=0)


def keyword_search__no_scope(m: Callable[..., Any], _: object) -> Any:
    return m("text", scope=None, limit=3)


def keyword_search__query_not_a_string(m: Callable[..., Any], _: object) -> Any:
    return m(["text"], scope=ScopeFilter("r1"), limit=3)


def delete_thread__retire_not_a_bool(m: Callable[..., Any], _: object) -> Any:
    return m("t1", retire="no")


def put__one_record_not_a_list(m: Callable[..., Any], _: object) -> Any:
    return m(make_record("m9"))


def put__not_a_record(m: Callable[..., Any], _: object) -> Any:
    return m([make_record("m9"), {"id": "m10"}])


def put__unknown_role(m: Callable[..., Any], _: object) -> Any:
    return m([make_record("m9"), replace(make_record("m10"), role="robot")])


ARGUMENT_CALLS: list[Call] = [
    get_windows__negative_before,
    get_windows__negative_after,
    get_windows__fractional_size,
    get_windows__ids_as_one_string,
    get_windows__scope_not_a_filter,
    list_messages__limit_zero,
    list_messages__limit_negative,
    list_messages__limit_not_an_int,
    list_messages__after_not_a_pair,
    list_messages__after_seq_not_an_int,
    list_messages__scope_not_a_filter,
    count__scope_not_a_filter,
    keyword_search__limit_zero,
    keyword_search__no_scope,
    keyword_search__query_not_a_string,
    delete_thread__retire_not_a_bool,
    put__one_record_not_a_list,
    put__not_a_record,
    put__unknown_role,
]
"""Calls with a bad window, limit, cursor, scope, flag, query or batch (no bad id)."""


class StorageConformance(StorageFilterConformance):
    """Tests every :class:`MessageStorage` backend must pass. Provide ``storage``."""

    @pytest.fixture
    def storage(self) -> Iterator[MessageStorage]:
        raise NotImplementedError("subclass StorageConformance and provide a storage fixture")

    # --- put / round trip -------------------------------------------------------------

    def test_put_round_trip_keeps_fields_and_message_type(self, storage: MessageStorage) -> None:
        records = [
            make_record("m-user", role="user", minute=0),
            make_record("m-ai", role="assistant", minute=1),
            make_record("m-sys", role="system", minute=2),
            make_record("m-tool", role="tool", text="", minute=3),
        ]
        stored = storage.put(records)
        listed = storage.list_messages(ScopeFilter(thread_id="t1"))
        assert stored == listed
        for record, message in zip(records, listed, strict=True):
            assert (message.id, message.thread_id, message.resource_id) == (
                record.id,
                record.thread_id,
                record.resource_id,
            )
            assert (message.role, message.text, message.payload) == (
                record.role,
                record.text,
                record.payload,
            )
            assert message.created_at == record.created_at
            assert message.created_at.utcoffset() == timedelta(0)
        types = [type(m.to_message()) for m in listed]
        assert types == [HumanMessage, AIMessage, SystemMessage, ToolMessage]
        assert listed[1].to_message().id == "m-ai"

    def test_created_at_is_returned_in_utc(self, storage: MessageStorage) -> None:
        paris = datetime(2024, 3, 1, 9, 15, 30, 123456, tzinfo=timezone(timedelta(hours=2)))
        storage.put([make_record("m1", created_at=paris)])
        [message] = storage.list_messages()
        assert message.created_at == paris
        assert message.created_at.utcoffset() == timedelta(0)
        assert (message.created_at.hour, message.created_at.microsecond) == (7, 123456)

    def test_naive_created_at_is_rejected(self, storage: MessageStorage) -> None:
        with pytest.raises(InvalidInputError, match="time zone"):
            storage.put([make_record("m1", created_at=datetime(2024, 1, 1))])
        assert storage.count() == 0

    def test_seq_is_assigned_in_write_order_per_thread(self, storage: MessageStorage) -> None:
        first = storage.put([make_record("a0", "ta"), make_record("b0", "tb")])
        second = storage.put([make_record("a1", "ta"), make_record("a2", "ta")])
        third = storage.put([make_record("b1", "tb")])
        # One batch over two new threads: each starts its own numbering (not one counter),
        # and the stored records come back in the order given.
        assert [(m.id, m.thread_id) for m in first] == [("a0", "ta"), ("b0", "tb")]
        assert first[0].seq == first[1].seq
        a_seqs = [first[0].seq, second[0].seq, second[1].seq]
        b_seqs = [first[1].seq, third[0].seq]
        assert a_seqs == list(range(a_seqs[0], a_seqs[0] + 3))
        assert b_seqs == [b_seqs[0], b_seqs[0] + 1]
        assert ids(storage.list_messages(ScopeFilter(thread_id="ta"))) == ["a0", "a1", "a2"]

    def test_update_keeps_seq_and_replaces_content(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3))
        [updated] = storage.put([make_record("t1-m1", text="edited", role="assistant")])
        messages = storage.list_messages(ScopeFilter(thread_id="t1"))
        assert ids(messages) == ["t1-m0", "t1-m1", "t1-m2"]
        assert updated == messages[1]
        assert (messages[1].text, messages[1].role) == ("edited", "assistant")
        assert messages[1].to_message().content == "edited"
        assert [m.seq for m in messages] == [messages[0].seq + i for i in range(3)]

    def test_repeat_put_is_idempotent(self, storage: MessageStorage) -> None:
        records = make_thread(4)
        first = storage.put(records)
        again = storage.put(records)
        assert first == again
        assert storage.count() == 4
        assert storage.list_messages() == first

    def test_same_id_twice_in_one_batch_is_one_message(self, storage: MessageStorage) -> None:
        stored = storage.put([make_record("m1", text="v1"), make_record("m1", text="v2")])
        assert stored[0].seq == stored[1].seq
        [message] = storage.list_messages()
        assert message.text == "v2"

    # --- windows ----------------------------------------------------------------------

    def test_window_before_and_after(self, storage: MessageStorage) -> None:
        storage.put(make_thread(7))
        windows = storage.get_windows(["t1-m3"], before=2, after=1, scope=ScopeFilter("r1"))
        assert ids(windows["t1-m3"]) == ["t1-m1", "t1-m2", "t1-m3", "t1-m4"]
        assert windows["t1-m3"] == tuple(storage.list_messages()[1:5])

    def test_window_is_clipped_at_thread_ends(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3))
        windows = storage.get_windows(
            ["t1-m0", "t1-m2"], before=5, after=5, scope=ScopeFilter("r1")
        )
        assert ids(windows["t1-m0"]) == ["t1-m0", "t1-m1", "t1-m2"]
        assert ids(windows["t1-m2"]) == ["t1-m0", "t1-m1", "t1-m2"]
        zero = storage.get_windows(["t1-m1"], before=0, after=0, scope=ScopeFilter("r1"))
        assert ids(zero["t1-m1"]) == ["t1-m1"]

    def test_window_stays_in_the_hits_own_thread(self, storage: MessageStorage) -> None:
        for i in range(4):  # interleaved in time: t1, t2, t1, t2, ...
            storage.put([make_record(f"a{i}", "t1", minute=2 * i)])
            storage.put([make_record(f"b{i}", "t2", minute=2 * i + 1)])
        windows = storage.get_windows(["a1", "b2"], before=1, after=1, scope=ScopeFilter("r1"))
        assert ids(windows["a1"]) == ["a0", "a1", "a2"]
        assert ids(windows["b2"]) == ["b1", "b2", "b3"]

    def test_windows_for_many_hits_and_unknown_ids(self, storage: MessageStorage) -> None:
        storage.put(make_thread(6))
        storage.put(make_thread(2, "t2"))
        hits = ["t1-m5", "nope", "t2-m0", "t1-m0", "t1-m5"]
        windows = storage.get_windows(hits, before=1, after=1, scope=ScopeFilter("r1"))
        assert set(windows) == {"t1-m5", "t2-m0", "t1-m0"}
        assert ids(windows["t1-m5"]) == ["t1-m4", "t1-m5"]
        assert ids(windows["t2-m0"]) == ["t2-m0", "t2-m1"]
        assert ids(windows["t1-m0"]) == ["t1-m0", "t1-m1"]
        assert storage.get_windows([], before=1, after=1, scope=ScopeFilter("r1")) == {}

    def test_negative_window_is_rejected(self, storage: MessageStorage) -> None:
        with pytest.raises(InvalidInputError):
            storage.get_windows(["m"], before=-1, after=0, scope=ScopeFilter("r1"))

    # --- scope enforcement ------------------------------------------------------------

    def test_resource_scope_hides_other_resources(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3, "mine", "r1") + make_thread(3, "theirs", "r2"))
        hits = ["mine-m1", "theirs-m1"]
        windows = storage.get_windows(hits, before=1, after=1, scope=ScopeFilter("r1"))
        assert set(windows) == {"mine-m1"}
        assert all(m.resource_id == "r1" for m in windows["mine-m1"])

    def test_thread_scope_hides_other_threads(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3, "t1") + make_thread(3, "t2"))
        scope = ScopeFilter(thread_id="t1")
        windows = storage.get_windows(["t1-m1", "t2-m1"], before=1, after=1, scope=scope)
        assert set(windows) == {"t1-m1"}
        narrowed = ScopeFilter(resource_id="r2", thread_id="t1")
        assert storage.get_windows(["t1-m1"], before=1, after=1, scope=narrowed) == {}

    def test_reads_respect_scope(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1", "r1") + make_thread(3, "t2", "r1"))
        storage.put(make_thread(4, "t3", "r2"))
        assert storage.count() == 9
        assert storage.count(ScopeFilter("r1")) == 5
        assert storage.count(ScopeFilter(thread_id="t3")) == 4
        assert storage.count(ScopeFilter("r1", "t3")) == 0
        assert {m.thread_id for m in storage.list_messages(ScopeFilter("r1"))} == {"t1", "t2"}
        assert ids(storage.list_messages(ScopeFilter("r2", "t3"))) == ids(make_thread(4, "t3"))

    def test_count_up_to_stops_at_the_bound_within_the_scope(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1", "r1") + make_thread(3, "t2", "r1"))
        storage.put(make_thread(4, "t3", "r2"))
        assert storage.count(ScopeFilter("r1"), up_to=3) == 3
        assert storage.count(ScopeFilter("r1"), up_to=50) == 5
        assert storage.count(ScopeFilter(thread_id="t3"), up_to=4) == 4
        assert storage.count(ScopeFilter("r1", "t3"), up_to=10) == 0
        assert storage.count(up_to=100) == 9
        for bad in (0, -1, 2.5, True):
            with pytest.raises(InvalidInputError):
                storage.count(ScopeFilter("r1"), up_to=bad)  # type: ignore[arg-type]

    # --- ownership and atomicity ------------------------------------------------------

    def test_thread_of_another_resource_writes_nothing(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1", "r1"))
        batch = [
            make_record("new-thread", "t9", "r2"),
            make_record("t1-m0", "t1", "r1", text="an update"),
            make_record("stolen", "t1", "r2"),
        ]
        with pytest.raises(OwnershipError, match="t1"):
            storage.put(batch)
        assert storage.get_thread_owner("t9") is None
        assert storage.count() == 2
        assert storage.list_messages()[0].text == "text of t1-m0"
        assert [t.thread_id for t in storage.list_threads()] == ["t1"]
        [after] = storage.put([make_record("t1-m2")])  # the failed batch consumed no seq
        assert after.seq == storage.list_messages()[1].seq + 1

    def test_new_thread_with_two_owners_in_one_batch(self, storage: MessageStorage) -> None:
        with pytest.raises(OwnershipError):
            storage.put([make_record("a", "t1", "r1"), make_record("b", "t1", "r2")])
        assert storage.count() == 0
        assert storage.get_thread_owner("t1") is None

    def test_message_id_of_another_thread_is_rejected(self, storage: MessageStorage) -> None:
        storage.put([make_record("m1", "t1")])
        # What to do is said: a conversation copied into a new thread needs new ids.
        with pytest.raises(OwnershipError, match=r"'m1'.*copy its messages without their ids"):
            storage.put([make_record("m2", "t2"), make_record("m1", "t2")])
        assert storage.get_thread_owner("t2") is None
        assert ids(storage.list_messages()) == ["m1"]
        with pytest.raises(OwnershipError):
            storage.put([make_record("x", "t3"), make_record("x", "t4")])
        assert storage.count() == 1

    def test_a_message_id_of_another_thread_is_refused_before_the_thread(
        self, storage: MessageStorage
    ) -> None:
        # The engine adopts a thread stored without a resource when the write's refusal is
        # the thread's (`ThreadOwnerError`): a reused message id must be found first.
        storage.put([make_record("m1", "t1", "r1"), make_record("m2", "t2", "r2")])
        with pytest.raises(OwnershipError, match="'m1'") as refused:
            storage.put([make_record("new", "t2", "r3"), make_record("m1", "t2", "r3")])
        assert not isinstance(refused.value, ThreadOwnerError)
        with pytest.raises(ThreadOwnerError, match="'t2'"):
            storage.put([make_record("new", "t2", "r3")])
        assert ids(storage.list_messages()) == ["m1", "m2"]

    def test_every_taken_message_id_of_a_write_is_named(self, storage: MessageStorage) -> None:
        # A graph turn sets aside the history another thread holds, in one go: the
        # refusal names every such id of the write, not only the first.
        storage.put([make_record("m1", "t1", "r1"), make_record("m2", "t2", "r2")])
        with pytest.raises(MessageIdTakenError) as refused:
            storage.put([make_record(m, "t3", "r3") for m in ("m2", "new", "m1")])
        assert refused.value.message_ids == ("m2", "m1")
        assert "'t3'" in str(refused.value)
        assert pickle.loads(pickle.dumps(refused.value)).message_ids == ("m2", "m1")
        assert storage.get_thread_owner("t3") is None
        assert ids(storage.list_messages()) == ["m1", "m2"]

    def test_get_thread_owner(self, storage: MessageStorage) -> None:
        storage.put([make_record("m1", "t1", "r1"), make_record("m2", "t2", "r2")])
        assert storage.get_thread_owner("t1") == "r1"
        assert storage.get_thread_owner("t2") == "r2"
        assert storage.get_thread_owner("t3") is None

    async def test_an_unowned_thread_is_adopted_once_whole(self, storage: MessageStorage) -> None:
        """`adopt_thread` moves a thread stored without a resource to its first owner."""
        storage.put(make_thread(3, "t1", NO_RESOURCE) + make_thread(2, "t2", "r2"))
        assert storage.adopt_thread("t1", "alice") == 3
        assert storage.get_thread_owner("t1") == "alice"
        moved = storage.list_messages(ScopeFilter(thread_id="t1", resource_id="alice"))
        assert ids(moved) == ["t1-m0", "t1-m1", "t1-m2"]
        assert [m.seq for m in moved] == [m.seq for m in storage.list_messages()[:3]]
        assert storage.count(ScopeFilter(resource_id=NO_RESOURCE)) == 0
        if storage.supports_keyword_search:  # the keyword index follows the owner
            alice = ScopeFilter(resource_id="alice")
            assert [h for h, _ in storage.keyword_search("text t1-m1", scope=alice, limit=1)]
            gone = storage.keyword_search(
                "text", scope=ScopeFilter(resource_id=NO_RESOURCE), limit=5
            )
            assert gone == []
        storage.put([make_record("t1-m3", "t1", "alice")])  # the owner writes on
        with pytest.raises(OwnershipError):
            storage.put([make_record("x", "t1", NO_RESOURCE)])
        assert storage.adopt_thread("t1", "alice") == 0  # done already: nothing to move
        with pytest.raises(OwnershipError):
            storage.adopt_thread("t1", "bob")  # once owned, never taken
        with pytest.raises(OwnershipError):
            await storage.aadopt_thread("t2", "bob")  # an owned thread is never adopted
        assert storage.get_thread_owner("t2") == "r2"
        assert await storage.aadopt_thread("unknown", "bob") == 0
        storage.put(make_thread(1, "t3", NO_RESOURCE))
        assert await storage.aadopt_thread("t3", "bob") == 1
        assert storage.get_thread_owner("t3") == "bob"

    # --- forgetting -------------------------------------------------------------------

    def test_delete_thread(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3, "t1") + make_thread(2, "t2"))
        assert storage.delete_thread("t1") == 3
        assert storage.is_forgotten("t1")
        assert not storage.is_forgotten("t2")
        assert ids(storage.list_messages()) == ["t2-m0", "t2-m1"]
        assert [t.thread_id for t in storage.list_threads()] == ["t2"]
        assert storage.get_thread_owner("t1") is None
        assert storage.count(ScopeFilter(thread_id="t1")) == 0
        windows = storage.get_windows(
            ["t1-m1", "t2-m0"], before=1, after=1, scope=ScopeFilter("r1")
        )
        assert set(windows) == {"t2-m0"}
        assert storage.delete_thread("t1") == 0

    def test_delete_thread_holds_to_the_owner_the_caller_found(
        self, storage: MessageStorage
    ) -> None:
        """A forget checks the owner, then deletes: a move landing between must not go."""
        storage.put(make_thread(3, "t1"))  # r1's
        storage.move_thread("t1", to_resource="r2")  # moved after r1's forget read the owner
        with pytest.raises(OwnershipError, match="no longer belongs to 'r1'"):
            storage.delete_thread("t1", owner="r1")
        assert storage.count(ScopeFilter(thread_id="t1")) == 3
        assert storage.get_thread_owner("t1") == "r2"
        assert not storage.is_forgotten("t1")
        assert storage.delete_thread("t1", owner="r2") == 3
        assert storage.is_forgotten("t1")
        assert storage.delete_thread("t1", owner="r1") == 0  # gone: nothing to refuse
        assert storage.delete_thread("never-written", owner="r1") == 0

    def test_move_thread_holds_to_the_owner_the_caller_found(self, storage: MessageStorage) -> None:
        """Two moves read the owner, then move: the later must not take the thread on."""
        storage.put(make_thread(2, "t1"))  # r1's
        if not storage.supports_move:
            with pytest.raises(NotImplementedError):
                storage.move_thread("t1", to_resource="r2", owner="r1")
            return
        assert storage.move_thread("t1", to_resource="r2", owner="r1") == 2
        with pytest.raises(OwnershipError, match="no longer belongs to 'r1'"):
            storage.move_thread("t1", to_resource="r3", owner="r1")  # read before the first
        assert storage.get_thread_owner("t1") == "r2"
        assert storage.count(ScopeFilter(resource_id="r2")) == 2
        assert storage.move_thread("never-written", to_resource="r3", owner="r1") == 0

    async def test_adelete_thread_holds_to_the_owner_the_caller_found(
        self, storage: MessageStorage
    ) -> None:
        storage.put(make_thread(2, "t1"))
        storage.move_thread("t1", to_resource="r2")
        with pytest.raises(OwnershipError, match="no longer belongs"):
            await storage.adelete_thread("t1", owner="r1", retire=False)
        assert storage.count(ScopeFilter(thread_id="t1")) == 2
        assert await storage.adelete_thread("t1", owner="r2", retire=False) == 2
        assert not storage.is_forgotten("t1")

    def test_forgotten_thread_rejects_later_writes(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1"))
        storage.delete_thread("t1")
        with pytest.raises(ForgottenThreadError, match="t1"):
            storage.put([make_record("ok", "t2"), make_record("late", "t1")])
        assert storage.count() == 0
        assert storage.get_thread_owner("t2") is None
        with pytest.raises(ForgottenThreadError):  # under any resource
            storage.put([make_record("late", "t1", "r2")])

    def test_unknown_thread_can_be_retired(self, storage: MessageStorage) -> None:
        assert storage.delete_thread("never-written") == 0
        assert storage.is_forgotten("never-written")
        with pytest.raises(ForgottenThreadError):
            storage.put([make_record("m1", "never-written")])

    def test_delete_resource(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1", "r1") + make_thread(3, "t2", "r1"))
        storage.put(make_thread(4, "t3", "r2"))
        assert storage.delete_resource("r1") == 5
        assert storage.is_forgotten("t1")
        assert storage.is_forgotten("t2")
        assert not storage.is_forgotten("t3")
        assert storage.list_threads("r1") == []
        assert storage.list_messages(ScopeFilter("r1")) == []
        assert storage.count() == 4
        assert storage.get_windows(["t1-m0"], before=1, after=1, scope=ScopeFilter("r1")) == {}
        with pytest.raises(ForgottenThreadError):
            storage.put([make_record("late", "t2", "r1")])
        storage.put([make_record("fresh", "t4", "r1")])  # a new thread of that resource
        assert storage.get_thread_owner("t4") == "r1"
        assert storage.delete_resource("nobody") == 0

    # --- emptying a thread without retiring it (retire=False) ---------------------------

    def test_emptying_a_thread_keeps_its_id_usable(self, storage: MessageStorage) -> None:
        storage.put(
            [
                make_record("t1-m0", text="the violin concert"),
                make_record("t1-m1", text="violin lessons", role="assistant"),
                make_record("t1-m2", text="a cello too"),
            ]
        )
        storage.put(make_thread(2, "t2"))
        assert storage.delete_thread("t1", retire=False) == 3
        assert not storage.is_forgotten("t1")
        assert storage.get_thread_owner("t1") is None
        assert [t.thread_id for t in storage.list_threads()] == ["t2"]
        assert storage.count(ScopeFilter(thread_id="t1")) == 0
        assert ids(storage.list_messages()) == ["t2-m0", "t2-m1"]
        assert storage.get_windows(["t1-m1"], before=1, after=1, scope=ScopeFilter("r1")) == {}
        assert storage.keyword_search("violin cello", scope=ScopeFilter("r1"), limit=5) == []
        # Later writes succeed, old message ids included, and the thread starts afresh.
        storage.put([make_record("t1-m1", text="a new violin"), make_record("fresh")])
        assert storage.get_thread_owner("t1") == "r1"
        messages = storage.list_messages(ScopeFilter(thread_id="t1"))
        assert ids(messages) == ["t1-m1", "fresh"]
        assert messages[1].seq == messages[0].seq + 1
        window = storage.get_windows(["fresh"], before=5, after=5, scope=ScopeFilter("r1"))
        assert ids(window["fresh"]) == ["t1-m1", "fresh"]
        found = storage.keyword_search("violin", scope=ScopeFilter("r1"), limit=5)
        assert [i for i, _ in found] == ["t1-m1"]

    def test_an_emptied_thread_may_go_to_another_resource(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1", "r1"))
        assert storage.delete_thread("t1", retire=False) == 2
        storage.put([make_record("theirs", "t1", "r2", text="a harbour")])
        assert storage.get_thread_owner("t1") == "r2"
        assert storage.list_threads("r1") == []
        assert storage.count(ScopeFilter("r1")) == 0
        assert ids(storage.list_messages(ScopeFilter("r2"))) == ["theirs"]
        assert storage.keyword_search("harbour", scope=ScopeFilter("r1"), limit=5) == []
        with pytest.raises(OwnershipError):  # owned again: the usual rule applies
            storage.put([make_record("mine", "t1", "r1")])

    def test_emptying_neither_retires_nor_revives(self, storage: MessageStorage) -> None:
        assert storage.delete_thread("never-written", retire=False) == 0
        assert not storage.is_forgotten("never-written")
        storage.put([make_record("m1", "never-written")])
        storage.put(make_thread(2, "gone"))
        assert storage.delete_thread("gone", retire=True) == 2
        assert storage.delete_thread("gone", retire=False) == 0
        assert storage.is_forgotten("gone")  # a retired id stays retired
        with pytest.raises(ForgottenThreadError):
            storage.put([make_record("late", "gone")])
        assert storage.count() == 1

    def test_retire_true_refuses_later_writes_under_any_resource(
        self, storage: MessageStorage
    ) -> None:
        storage.put(make_thread(2, "t1"))
        assert storage.delete_thread("t1", retire=True) == 2
        assert storage.is_forgotten("t1")
        for resource_id in ("r1", "r2"):
            with pytest.raises(ForgottenThreadError, match="t1"):
                storage.put([make_record("late", "t1", resource_id)])
        assert storage.count() == 0

    # --- retention: delete_before ------------------------------------------------------
    #
    # Messages created before the cutoff go (with their keyword index); threads keep their
    # owner and their sequence numbers: none is renumbered or reused, and a window never
    # reaches a deleted message (it is shorter). An emptied thread stays, empty, owned.

    def test_delete_before_deletes_only_older_messages(self, storage: MessageStorage) -> None:
        storage.put(make_thread(5, "t1", "r1") + make_thread(3, "t2", "r2"))
        cutoff = BASE_TIME + timedelta(minutes=2)
        deleted = storage.delete_before(cutoff)
        assert [(d.id, d.thread_id, d.resource_id) for d in deleted] == [
            ("t1-m0", "t1", "r1"),
            ("t1-m1", "t1", "r1"),
            ("t2-m0", "t2", "r2"),
            ("t2-m1", "t2", "r2"),
        ]
        assert ids(storage.list_messages()) == ["t1-m2", "t1-m3", "t1-m4", "t2-m2"]
        assert [m.seq for m in storage.list_messages()] == [2, 3, 4, 2]
        assert storage.delete_before(cutoff) == []  # idempotent
        assert storage.count() == 4

    def test_delete_before_stays_in_its_scope(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3, "t1", "r1") + make_thread(3, "t2", "r1"))
        storage.put(make_thread(3, "t3", "r2"))
        later = BASE_TIME + timedelta(days=1)
        gone = storage.delete_before(later, scope=ScopeFilter("r1", "t2"))
        assert {d.id for d in gone} == {"t2-m0", "t2-m1", "t2-m2"}
        gone = storage.delete_before(later, scope=ScopeFilter("r2"))
        assert {d.resource_id for d in gone} == {"r2"}
        assert ids(storage.list_messages()) == ["t1-m0", "t1-m1", "t1-m2"]

    def test_delete_before_keeps_seqs_windows_and_owner(self, storage: MessageStorage) -> None:
        storage.put(make_thread(4, "t1", "r1"))
        late = make_record("late-import", "t1", created_at=BASE_TIME - timedelta(days=9))
        storage.put([late])  # seq 4, but older than everything: a gap in the middle
        storage.put([make_record("t1-m5", "t1", minute=5)])
        storage.delete_before(BASE_TIME + timedelta(minutes=1))
        assert [(m.id, m.seq) for m in storage.list_messages()] == [
            ("t1-m1", 1),
            ("t1-m2", 2),
            ("t1-m3", 3),
            ("t1-m5", 5),
        ]
        scope = ScopeFilter("r1")
        windows = storage.get_windows(["t1-m1", "t1-m5"], before=2, after=1, scope=scope)
        assert ids(windows["t1-m1"]) == ["t1-m1", "t1-m2"]  # clipped at the new start
        assert ids(windows["t1-m5"]) == ["t1-m3", "t1-m5"]  # never across the gap
        stored = storage.put([make_record("next", "t1", minute=9)])
        assert stored[0].seq == 6  # no seq is reused
        assert ids(storage.last_messages(ScopeFilter(thread_id="t1"), limit=2)) == [
            "t1-m5",
            "next",
        ]
        page = storage.list_messages(after=("t1", 1), limit=2)
        assert ids(page) == ["t1-m2", "t1-m3"]

    def test_an_emptied_thread_stays_owned(self, storage: MessageStorage) -> None:
        storage.put(make_thread(2, "t1", "r1"))
        assert len(storage.delete_before(BASE_TIME + timedelta(days=1))) == 2
        assert storage.count(ScopeFilter(thread_id="t1")) == 0
        assert storage.get_thread_owner("t1") == "r1"
        assert not storage.is_forgotten("t1")
        assert [(t.thread_id, t.message_count) for t in storage.list_threads()] == [("t1", 0)]
        with pytest.raises(OwnershipError):
            storage.put([make_record("intruder", "t1", "r2")])
        assert storage.put([make_record("back", "t1", "r1")])[0].seq == 2

    def test_delete_before_drops_the_keyword_index(self, storage: MessageStorage) -> None:
        storage.put(
            [
                make_record("old", text="violin lessons on tuesday", minute=0),
                make_record("new", text="violin concert on friday", minute=5),
            ]
        )
        scope = ScopeFilter("r1")
        assert {h for h, _ in storage.keyword_search("violin", scope=scope, limit=5)} == {
            "old",
            "new",
        }
        storage.delete_before(BASE_TIME + timedelta(minutes=1))
        assert [h for h, _ in storage.keyword_search("violin", scope=scope, limit=5)] == ["new"]
        assert storage.keyword_search("tuesday lessons", scope=scope, limit=5) == []

    def test_keyword_scores_after_delete_before_are_those_of_the_kept_messages(
        self, storage: MessageStorage
    ) -> None:
        words = ["violin", "cello", "harbour", "garden", "lisbon", "tomato"]
        records = [
            make_record(f"m{i}", f"t{i % 3}", text=" ".join(words[i % 6 : i % 6 + 3]), minute=i)
            for i in range(18)
        ]
        storage.put(records)
        storage.delete_before(BASE_TIME + timedelta(minutes=7))
        reference = InMemoryStorage()  # the reference backend, holding only what was kept
        reference.put([r for r in records if r.created_at >= BASE_TIME + timedelta(minutes=7)])
        for query in ("violin cello", "garden lisbon tomato", "harbour"):
            for scope in (ScopeFilter("r1"), ScopeFilter("r1", "t1")):
                got = storage.keyword_search(query, scope=scope, limit=20)
                assert got == reference.keyword_search(query, scope=scope, limit=20), query

    async def test_adelete_before_matches_sync(self, storage: MessageStorage) -> None:
        await storage.aput(make_thread(3, "t1", "r1"))
        cutoff = (BASE_TIME + timedelta(minutes=1)).astimezone(timezone(timedelta(hours=5)))
        deleted = await storage.adelete_before(cutoff, scope=ScopeFilter("r1"))
        assert [d.id for d in deleted] == ["t1-m0"]
        assert ids(await storage.alist_messages()) == ["t1-m1", "t1-m2"]

    @pytest.mark.parametrize("cutoff", [datetime(2024, 1, 1), "2024-01-01", None])
    def test_delete_before_refuses_a_naive_or_missing_cutoff(
        self, storage: MessageStorage, cutoff: object
    ) -> None:
        storage.put(make_thread(1))
        with pytest.raises(InvalidInputError, match="aware datetime"):
            storage.delete_before(cutoff)  # type: ignore[arg-type]
        assert storage.count() == 1

    async def test_emptying_and_forgetting_async_twins(self, storage: MessageStorage) -> None:
        await storage.aput(make_thread(3, "t1") + make_thread(1, "t2"))
        assert await storage.adelete_thread("t1", retire=False) == 3
        assert not await storage.ais_forgotten("t1")
        assert await storage.aget_thread_owner("t1") is None
        [again] = await storage.aput([make_record("again", "t1", "r2")])
        assert again.thread_id == "t1"
        assert await storage.aget_thread_owner("t1") == "r2"
        assert await storage.adelete_thread("t2", retire=True) == 1
        with pytest.raises(ForgottenThreadError):
            await storage.aput([make_record("late", "t2")])
        assert ids(await storage.alist_messages()) == ["again"]

    # --- listing ----------------------------------------------------------------------

    def test_list_messages_pages_by_thread_and_seq(self, storage: MessageStorage) -> None:
        storage.put(make_thread(3, "tb") + make_thread(2, "ta") + make_thread(2, "tc", "r2"))
        expected = ["ta-m0", "ta-m1", "tb-m0", "tb-m1", "tb-m2", "tc-m0", "tc-m1"]
        assert ids(storage.list_messages()) == expected
        pages: list[list[str]] = []
        after: tuple[str, int] | None = None
        for _ in range(len(expected) + 1):  # bounded: a paging bug must fail, not hang
            page = storage.list_messages(after=after, limit=2)
            if not page:
                break
            pages.append(ids(page))
            after = (page[-1].thread_id, page[-1].seq)
        assert pages == [expected[0:2], expected[2:4], expected[4:6], expected[6:]]
        first = storage.list_messages(ScopeFilter("r1"), limit=4)
        rest = storage.list_messages(ScopeFilter("r1"), after=(first[-1].thread_id, first[-1].seq))
        assert ids(first) + ids(rest) == expected[:5]
        assert ids(storage.list_messages(after=("tb", -1))) == expected[2:]
        assert ids(storage.list_messages(after=("tb0", -1))) == expected[5:]
        with pytest.raises(InvalidInputError):
            storage.list_messages(limit=0)

    async def test_last_messages_are_the_newest_of_the_thread_in_order(
        self, storage: MessageStorage
    ) -> None:
        storage.put([*make_thread(30, "t1", "r1"), *make_thread(5, "t2", "r1")])
        storage.put([make_record("t1-m3", "t1", "r1", text="rewritten, keeps its place")])
        newest = storage.last_messages(ScopeFilter("r1", "t1"), limit=4)
        assert ids(newest) == ["t1-m26", "t1-m27", "t1-m28", "t1-m29"]
        assert ids(await storage.alast_messages(ScopeFilter("r1", "t1"), limit=4)) == ids(newest)
        assert len(storage.last_messages(ScopeFilter(thread_id="t2"), limit=50)) == 5
        assert storage.last_messages(ScopeFilter("someone-else", "t1"), limit=4) == []
        assert storage.last_messages(ScopeFilter("r1", "unknown"), limit=4) == []
        with pytest.raises(InvalidInputError, match="thread_id"):
            storage.last_messages(ScopeFilter("r1"), limit=4)
        with pytest.raises(InvalidInputError):
            await storage.alast_messages(ScopeFilter("r1", "t1"), limit=0)

    async def test_move_thread_gives_messages_and_keyword_index_to_the_new_owner(
        self, storage: MessageStorage
    ) -> None:
        storage.put([*make_thread(3, "t1", "old"), make_record("o1", "t2", "old", text="kept")])
        storage.put([make_record("t1-k", "t1", "old", text="the violin lesson")])
        if not storage.supports_move:
            with pytest.raises(NotImplementedError):
                storage.move_thread("t1", to_resource="new")
            return
        assert storage.move_thread("t1", to_resource="new") == 4
        assert storage.get_thread_owner("t1") == "new"
        moved = storage.list_messages(ScopeFilter("new"))
        assert ids(moved) == ["t1-m0", "t1-m1", "t1-m2", "t1-k"]
        assert {m.resource_id for m in moved} == {"new"}
        assert [m.seq for m in moved] == [0, 1, 2, 3]
        assert ids(storage.list_messages(ScopeFilter("old"))) == ["o1"]
        hits = storage.keyword_search("violin", scope=ScopeFilter("new"), limit=5)
        assert [i for i, _ in hits] == ["t1-k"]
        assert storage.keyword_search("violin", scope=ScopeFilter("old"), limit=5) == []
        storage.put([make_record("t1-m9", "t1", "new")])  # the new owner writes on
        with pytest.raises(OwnershipError):
            storage.put([make_record("t1-m10", "t1", "old")])
        assert await storage.amove_thread("t1", to_resource="old") == 5
        assert storage.move_thread("unknown", to_resource="new") == 0
        with pytest.raises(InvalidInputError):
            storage.move_thread("t1", to_resource="")

    async def test_unretire_lets_a_forgotten_thread_id_be_written_again(
        self, storage: MessageStorage
    ) -> None:
        storage.put(make_thread(2, "t1", "r1"))
        storage.delete_thread("t1")
        if not storage.supports_move:
            with pytest.raises(NotImplementedError):
                storage.unretire_thread("t1")
            return
        assert storage.unretire_thread("t1") is True
        assert not storage.is_forgotten("t1")
        assert storage.unretire_thread("t1") is False  # not retired (any more)
        storage.put(make_thread(2, "t1", "someone"))
        assert storage.get_thread_owner("t1") == "someone"
        storage.delete_thread("t1")
        assert await storage.aunretire_thread("t1") is True

    async def test_put_says_which_ids_it_inserted(self, storage: MessageStorage) -> None:
        first = storage.put([make_record("a"), make_record("b")])
        assert [m.created for m in first] == [True, True]
        again = storage.put([make_record("a", text="new text"), make_record("c")])
        assert [m.created for m in again] == [False, True]
        assert [m.created for m in await storage.aput([make_record("c")])] == [False]
        assert not any(m.created for m in storage.list_messages())  # reads: never
        assert again[0] == storage.list_messages()[0]  # not part of equality

    def test_list_threads(self, storage: MessageStorage) -> None:
        storage.put([make_record(f"b{i}", "tb", "r1", minute=10 + i) for i in range(3)])
        storage.put([make_record("a0", "ta", "r2", minute=5)])
        threads = storage.list_threads()
        assert [(t.thread_id, t.resource_id, t.message_count) for t in threads] == [
            ("ta", "r2", 1),
            ("tb", "r1", 3),
        ]
        assert threads[1].first_at == BASE_TIME + timedelta(minutes=10)
        assert threads[1].last_at == BASE_TIME + timedelta(minutes=12)
        assert [t.thread_id for t in storage.list_threads("r1")] == ["tb"]
        assert storage.list_threads("r3") == []

    async def test_reserved_threads_keep_owner_and_numbering(self, storage: MessageStorage) -> None:
        """A copy keeps an empty thread's owner and a thread's seqs (never lowered)."""
        storage.put(make_thread(2, "t1"))
        places = [ThreadPlace("t1", "r1", 5), ThreadPlace("empty", "r1", 3)]
        assert storage.reserve_threads(places) == 1
        threads = {t.thread_id: t for t in storage.list_threads()}
        assert (threads["empty"].resource_id, threads["empty"].message_count) == ("r1", 0)
        assert (threads["empty"].next_seq, threads["t1"].next_seq) == (3, 5)
        with pytest.raises(OwnershipError):  # an empty reserved thread is owned
            storage.put([make_record("x", "empty", "r2")])
        assert await storage.areserve_threads([ThreadPlace("t1", "r1", 2)]) == 0
        storage.put([make_record("t1-m9", "t1"), make_record("e0", "empty")])
        assert {m.id: m.seq for m in storage.list_messages()} == {
            "e0": 3,
            "t1-m0": 0,
            "t1-m1": 1,
            "t1-m9": 5,  # 2 did not lower the numbering
        }
        with pytest.raises(OwnershipError):  # all or nothing
            storage.reserve_threads([ThreadPlace("new", "r2"), ThreadPlace("t1", "r2", 50)])
        with pytest.raises(OwnershipError):
            await storage.areserve_threads([ThreadPlace("new", "r2"), ThreadPlace("new", "r3")])
        assert storage.get_thread_owner("new") is None
        storage.delete_thread("gone")
        with pytest.raises(ForgottenThreadError):
            await storage.areserve_threads([ThreadPlace("gone", "r1")])
        huge = ThreadPlace("t", "r", 2**63)  # no backend's seq holds it
        for bad in ([ThreadPlace("t", "r", -1)], [("t", "r", 0)], [ThreadPlace(" ", "r")], [huge]):
            with pytest.raises(InvalidInputError):
                storage.reserve_threads(bad)  # type: ignore[arg-type]
        assert storage.reserve_threads([]) == 0
        assert [t.thread_id for t in storage.list_threads()] == ["empty", "t1"]

    def test_thread_times_compare_instants_not_offsets(self, storage: MessageStorage) -> None:
        east = timezone(timedelta(hours=5))  # 11:00+05:00 is earlier than 09:00 UTC
        early = datetime(2024, 5, 1, 11, 0, tzinfo=east)
        late = datetime(2024, 5, 1, 9, 0, 0, 1, tzinfo=UTC)
        storage.put([make_record("m1", created_at=late), make_record("m2", created_at=early)])
        [thread] = storage.list_threads()
        assert (thread.first_at, thread.last_at) == (early, late)
        assert thread.first_at is not None
        assert thread.first_at.utcoffset() == timedelta(0)

    # --- async twins ------------------------------------------------------------------

    async def test_async_twins_match_sync(self, storage: MessageStorage) -> None:
        stored = await storage.aput(make_thread(4, "t1") + make_thread(2, "t2", "r2"))
        assert stored == storage.list_messages()
        scope = ScopeFilter("r1")
        assert await storage.aget_windows(
            ["t1-m2", "t2-m0"], before=1, after=1, scope=scope
        ) == storage.get_windows(["t1-m2", "t2-m0"], before=1, after=1, scope=scope)
        assert await storage.alist_messages(scope, after=("t1", 0), limit=2) == (
            storage.list_messages(scope, after=("t1", 0), limit=2)
        )
        assert await storage.alist_threads() == storage.list_threads()
        assert await storage.acount(scope) == storage.count(scope) == 4
        assert await storage.acount(scope, up_to=3) == storage.count(scope, up_to=3) == 3
        assert await storage.aget_thread_owner("t2") == "r2"
        assert await storage.adelete_thread("t2") == 2
        assert await storage.ais_forgotten("t2")
        with pytest.raises(ForgottenThreadError):
            await storage.aput([make_record("late", "t2", "r2")])
        assert await storage.adelete_resource("r1") == 4
        assert await storage.acount() == 0

    # --- input checks (the base class's, the same on every backend) --------------------

    @pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
    @pytest.mark.parametrize("field_name", ["id", "thread_id", "resource_id"])
    async def test_unusable_record_ids_write_nothing(
        self, storage: MessageStorage, field_name: str, bad: object
    ) -> None:
        batch = [make_record("ok"), replace(make_record("m2"), **{field_name: bad})]
        with pytest.raises(InvalidInputError):
            storage.put(batch)
        with pytest.raises(InvalidInputError):
            await storage.aput(batch)
        assert storage.count() == 0
        assert storage.list_threads() == []

    @pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
    @pytest.mark.parametrize("call", ID_CALLS, ids=lambda call: call.__name__)
    async def test_unusable_ids_are_refused_sync_and_async(
        self, storage: MessageStorage, call: Call, bad: object
    ) -> None:
        storage.put(make_thread(2))
        for asynchronous in (False, True):
            with pytest.raises(InvalidInputError):
                await run_call(storage, call, bad, asynchronous=asynchronous)
        assert storage.count() == 2
        assert not storage.is_forgotten("t1")

    @pytest.mark.parametrize("call", ARGUMENT_CALLS, ids=lambda call: call.__name__)
    async def test_bad_arguments_are_refused_sync_and_async(
        self, storage: MessageStorage, call: Call
    ) -> None:
        storage.put(make_thread(3))
        for asynchronous in (False, True):
            with pytest.raises(InvalidInputError):
                await run_call(storage, call, None, asynchronous=asynchronous)
        assert ids(storage.list_messages()) == ["t1-m0", "t1-m1", "t1-m2"]
        assert not storage.is_forgotten("t1")

    async def test_naive_created_at_is_refused_sync_and_async(
        self, storage: MessageStorage
    ) -> None:
        naive = make_record("m2", created_at=datetime(2024, 1, 1, 12, 0))
        for batch in ([naive], [make_record("m1"), naive]):
            with pytest.raises(InvalidInputError, match="time zone"):
                storage.put(batch)
            with pytest.raises(InvalidInputError, match="time zone"):
                await storage.aput(batch)
        assert storage.count() == 0

    async def test_put_returns_times_in_utc_sync_and_async(self, storage: MessageStorage) -> None:
        east = datetime(2024, 3, 1, 9, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))
        [sync] = storage.put([make_record("m1", created_at=east)])
        [asynchronous] = await storage.aput([make_record("m2", created_at=east)])
        for message in (sync, asynchronous):
            assert message.created_at == east
            assert message.created_at.utcoffset() == timedelta(0)
            assert message.created_at.hour == 3

    # --- ids are compared exactly -----------------------------------------------------

    def test_look_alike_and_unicode_ids_are_distinct(self, storage: MessageStorage) -> None:
        composed, decomposed = "caf\u00e9", "cafe\u0301"  # same text, different code points
        owners = {"t1": "r1", "t1 ": "r1 ", "T1": "R1", "t\uff11": "r\u0661", composed: "r1"}
        for n, (thread_id, resource_id) in enumerate(owners.items()):
            storage.put([make_record(f"m{n}", thread_id, resource_id, text="日本語 🧠 é")])
        storage.put([make_record("x", decomposed, "r1 ")])
        for thread_id, resource_id in [*owners.items(), (decomposed, "r1 ")]:
            assert storage.get_thread_owner(thread_id) == resource_id
        assert storage.count(ScopeFilter("r1")) == 2
        assert storage.count(ScopeFilter(thread_id="t1")) == 1
        hits = ["m0", "m1", "m2", "m3", "m4", "x"]
        assert set(storage.get_windows(hits, before=0, after=0, scope=ScopeFilter("r1"))) == {
            "m0",
            "m4",
        }
        storage.put([make_record("M0", "t1"), make_record("m0 ", "t1")])
        assert ids(storage.list_messages(ScopeFilter(thread_id="t1"))) == ["m0", "M0", "m0 "]
        assert storage.list_messages(ScopeFilter(thread_id="T1"))[0].text == "日本語 🧠 é"
        assert storage.delete_thread("t1") == 3
        assert storage.get_thread_owner("t1 ") == "r1 "
        assert not storage.is_forgotten("T1")

    # --- concurrency ------------------------------------------------------------------

    def test_concurrent_writers_lose_nothing(self, storage: MessageStorage) -> None:
        writers, per_writer = 8, 20
        barrier = threading.Barrier(writers)
        errors: list[Exception] = []

        def write(n: int) -> None:
            try:
                barrier.wait()
                for i in range(per_writer):
                    storage.put([make_record(f"s{n}-{i}", "shared")])
                    storage.put([make_record(f"o{n}-{i}", f"own{n}")])
            except Exception as exc:  # reported by the main thread
                errors.append(exc)

        pool = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        assert errors == []
        shared = storage.list_messages(ScopeFilter(thread_id="shared"), limit=10_000)
        seqs = [m.seq for m in shared]
        assert seqs == list(range(seqs[0], seqs[0] + writers * per_writer))
        for n in range(writers):
            mine = [m.id for m in shared if m.id.startswith(f"s{n}-")]
            assert mine == [f"s{n}-{i}" for i in range(per_writer)]
            own = storage.list_messages(ScopeFilter(thread_id=f"own{n}"))
            assert ids(own) == [f"o{n}-{i}" for i in range(per_writer)]
            assert [m.seq for m in own] == list(range(own[0].seq, own[0].seq + per_writer))

    # --- keyword search -----------------------------------------------------------------
    # Semantics every backend keeps: user and assistant messages are searchable by the
    # terms of ``keywords.message_terms`` (stemmed, stop words dropped); results are
    # (message id, score > 0), best first, at most ``limit``, inside the scope; BM25's
    # statistics are those of the scope (another resource's messages never move a score).

    def test_keyword_search_ranks_the_messages_sharing_most_terms_first(
        self, storage: MessageStorage
    ) -> None:
        texts = {
            "lake": "We went camping near the lake",
            "tall": "The mountains are tall this year",
            "both": "We went camping in the mountains",
            "none": "The weather is nice today",
        }
        storage.put([make_record(i, text=t) for i, t in texts.items()])
        hits = storage.keyword_search(
            "camping in the mountains?", scope=ScopeFilter("r1"), limit=10
        )
        assert hits[0][0] == "both"
        assert {i for i, _ in hits} == {"both", "lake", "tall"}
        scores = [score for _, score in hits]
        assert all(score > 0 for score in scores)
        assert scores == sorted(scores, reverse=True)

    def test_keyword_search_matches_word_forms(self, storage: MessageStorage) -> None:
        storage.put(
            [
                make_record("past", text="Melanie painted a sunrise last week"),
                make_record("gerund", text="Painting is how I relax", role="assistant"),
                make_record("other", text="I drew a horse"),
            ]
        )
        hits = storage.keyword_search("Does Melanie paint?", scope=ScopeFilter("r1"), limit=5)
        assert {i for i, _ in hits} == {"past", "gerund"}
        possessive = storage.keyword_search("Melanie's", scope=ScopeFilter("r1"), limit=5)
        assert [i for i, _ in possessive] == ["past"]

    def test_keyword_search_stays_in_the_scope(self, storage: MessageStorage) -> None:
        storage.put(
            [
                make_record("a1", "ta", "alice", text="secret plan for the garden"),
                make_record("a2", "tb", "alice", text="the garden plan again"),
                make_record("b1", "tc", "bob", text="secret plan for the garden"),
            ]
        )

        def found(scope: ScopeFilter) -> set[str]:
            return {
                i for i, _ in storage.keyword_search("secret garden plan", scope=scope, limit=10)
            }

        assert found(ScopeFilter("alice")) == {"a1", "a2"}
        assert found(ScopeFilter("bob")) == {"b1"}
        assert found(ScopeFilter(thread_id="tb")) == {"a2"}
        assert found(ScopeFilter("alice", "tb")) == {"a2"}
        assert found(ScopeFilter("bob", "ta")) == set()
        assert found(ScopeFilter("nobody")) == set()

    def test_keyword_statistics_are_those_of_the_scope(self, storage: MessageStorage) -> None:
        storage.put(
            [
                make_record("a1", "ta", "alice", text="the blue boat on the river"),
                make_record("a2", "ta", "alice", text="a red boat"),
                make_record("a3", "ta", "alice", text="nothing to see"),
            ]
        )
        before = storage.keyword_search("blue boat", scope=ScopeFilter("alice"), limit=5)
        storage.put([make_record(f"b{n}", "tb", "bob", text="blue blue boat") for n in range(9)])
        after = storage.keyword_search("blue boat", scope=ScopeFilter("alice"), limit=5)
        assert [i for i, _ in after] == [i for i, _ in before] == ["a1", "a2"]
        assert [s for _, s in after] == pytest.approx([s for _, s in before])

    def test_forgotten_and_rewritten_messages_are_never_found(
        self, storage: MessageStorage
    ) -> None:
        storage.put(
            [
                make_record("k1", "t1", "r1", text="the violin concert"),
                make_record("k2", "t2", "r1", text="violin lessons on friday"),
                make_record("k3", "t3", "r2", text="violin strings"),
                make_record("k4", "t4", "r1", text="old words about a violin"),
            ]
        )
        storage.delete_thread("t1")
        storage.delete_resource("r2")
        storage.put([make_record("k4", "t4", "r1", text="new words about a cello")])
        everywhere = [ScopeFilter("r1"), ScopeFilter("r2"), ScopeFilter(thread_id="t1")]
        for scope in everywhere:
            found = {i for i, _ in storage.keyword_search("violin", scope=scope, limit=10)}
            assert found <= {"k2"}
        assert [
            i for i, _ in storage.keyword_search("cello", scope=ScopeFilter("r1"), limit=5)
        ] == ["k4"]
        assert storage.keyword_search("old", scope=ScopeFilter("r1"), limit=5) == []

    def test_only_user_and_assistant_messages_are_searchable(self, storage: MessageStorage) -> None:
        storage.put(
            [
                make_record("u", role="user", text="the harbour at dawn"),
                make_record("a", role="assistant", text="harbour views"),
                make_record("s", role="system", text="harbour rules"),
                make_record("t", role="tool", text="harbour api result"),
            ]
        )
        hits = storage.keyword_search("harbour", scope=ScopeFilter("r1"), limit=10)
        assert {i for i, _ in hits} == {"u", "a"}

    def test_keyword_search_limits_and_odd_queries(self, storage: MessageStorage) -> None:
        storage.put([make_record(f"m{n}", text=f"apple number {n}") for n in range(8)])
        scope = ScopeFilter("r1")
        assert len(storage.keyword_search("apple", scope=scope, limit=3)) == 3
        assert storage.keyword_search("", scope=scope, limit=3) == []
        assert storage.keyword_search("what is the", scope=scope, limit=3) == []  # stop words
        for hostile in ('"apple', "apple OR NEAR(", "apple*", "a:b ^apple -(", "'; DROP"):
            assert len(storage.keyword_search(hostile, scope=scope, limit=10)) <= 8
        with pytest.raises(InvalidInputError):
            storage.keyword_search("apple", scope=scope, limit=0)

    def test_words_longer_than_a_postgres_lexeme_are_found_exactly(
        self, storage: MessageStorage
    ) -> None:
        # PostgreSQL keeps at most 2,047 bytes per lexeme; a pasted key or URL may be longer.
        key, other, wide = "k" * 3000, "k" * 2999 + "j", "é" * 1100  # `wide`: 2,200 bytes
        storage.put(
            [
                make_record("key", text=f"my key is {key} remember it"),
                make_record("other", text=f"another key {other}"),
                make_record("wide", text=f"accents {wide}"),
                make_record("plain", text="nothing long here"),
            ]
        )
        scope = ScopeFilter("r1")
        assert [i for i, _ in storage.keyword_search(key, scope=scope, limit=5)] == ["key"]
        assert [i for i, _ in storage.keyword_search(wide, scope=scope, limit=5)] == ["wide"]
        both = storage.keyword_search(f"{key} remember", scope=scope, limit=5)
        assert [i for i, _ in both] == ["key"]
        assert storage.keyword_search("q" * 5000, scope=scope, limit=5) == []
        found = {i for i, _ in storage.keyword_search(f"{key} nothing", scope=scope, limit=5)}
        assert found == {"key", "plain"}

    async def test_keyword_search_async_twin_matches_sync(self, storage: MessageStorage) -> None:
        storage.put([*make_thread(3), make_record("x", text="unique zebra text")])
        scope = ScopeFilter("r1")
        expected = storage.keyword_search("zebra text", scope=scope, limit=5)
        assert await storage.akeyword_search("zebra text", scope=scope, limit=5) == expected
        assert expected[0][0] == "x"

    # --- property: windows never leave the scope and are contiguous --------------------

    def test_windows_property(self, storage: MessageStorage) -> None:
        # A fresh @given function per run: one storage serves every example (each example
        # writes under fresh ids), and each backend's subclass gets its own executor.
        @settings(max_examples=40, deadline=None)
        @given(data=st.data())
        def run(data: st.DataObject) -> None:
            check_windows_property(storage, data)

        run()


def check_windows_property(storage: MessageStorage, data: st.DataObject) -> None:
    """Random histories and window queries under random scopes, checked against a model."""
    ns = uuid.uuid4().hex[:8]
    model = _Model()
    record = st.tuples(st.integers(0, 11), st.integers(0, 3), st.integers(0, 2))
    deletion = st.tuples(st.integers(0, 3), st.booleans())  # (thread, retire)
    step = st.one_of(st.lists(record, min_size=1, max_size=4), deletion)
    for action in data.draw(st.lists(step, max_size=14), label="history"):
        if isinstance(action, tuple):
            thread, retire = action
            storage.delete_thread(f"{ns}t{thread}", retire=retire)
            model.forget(f"{ns}t{thread}", retire=retire)
            continue
        batch = [(f"{ns}m{m}", f"{ns}t{t}", f"{ns}r{r}") for m, t, r in action]
        if model.put(batch):
            storage.put([make_record(*row) for row in batch])
        else:
            with pytest.raises((OwnershipError, ForgottenThreadError)):
                storage.put([make_record(*row) for row in batch])

    for _ in range(data.draw(st.integers(1, 4), label="queries")):
        hits = [f"{ns}m{i}" for i in data.draw(st.lists(st.integers(0, 13), max_size=6))]
        before, after = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
        resource = data.draw(st.sampled_from([None, *(f"{ns}r{r}" for r in range(3))]))
        thread = data.draw(st.sampled_from([None, *(f"{ns}t{t}" for t in range(4))]))
        if resource is None and thread is None:
            thread = f"{ns}t0"
        scope = ScopeFilter(resource_id=resource, thread_id=thread)
        windows = storage.get_windows(hits, before=before, after=after, scope=scope)

        homes = model.homes
        expected = {
            h for h in hits if h in homes and scope.admits(model.owners[homes[h]], homes[h])
        }
        assert set(windows) == expected
        for hit, window in windows.items():
            assert all(scope.admits(m.resource_id, m.thread_id) for m in window)
            assert {m.thread_id for m in window} == {model.homes[hit]}
            seqs = [m.seq for m in window]
            assert seqs == list(range(seqs[0], seqs[0] + len(window)))
            order = model.threads[model.homes[hit]]
            at = order.index(hit)
            assert ids(window) == order[max(0, at - before) : at + after + 1]

    for r in range(3):
        listed = storage.list_messages(ScopeFilter(f"{ns}r{r}"))
        owned = sorted(t for t, owner in model.owners.items() if owner == f"{ns}r{r}")
        assert ids(listed) == [m for t in owned for m in model.threads[t]]
