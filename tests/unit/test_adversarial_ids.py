"""Ids as an attack surface: two resources whose ids look alike never share anything.

`test_isolation` generates histories over a few look-alike ids and checks what a
search returns. Here the pairs are built to collide wherever an id becomes a name:
case, Unicode normalisation (NFC/NFD, NFKC's full-width and compatibility forms),
spaces, zero-width characters, long ids sharing a prefix, the separators names are
built with, a vector id of a later chunk (`m#1`), path traversal, the reserved
`(no resource)` mark, SQL wildcards. Every operation (index, search, stats, counts,
listing, forget, move) must leave the other resource exactly as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.errors import InvalidInputError, SemanticRecallError
from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter
from langchain_semantic_recall.storable import MAX_ID_BYTES
from langchain_semantic_recall.vectors.langchain import LangChainVectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings


class SplitEmbeddings(FakeEmbeddings):
    """Splits a text at `|`: a message of two pieces has two vectors (`m`, `m#1`)."""

    def split_text(self, text: str) -> list[str]:
        return text.split("|")


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


# How the second id of a pair is made from the first: each a name some layer might
# fold, trim, truncate, escape or split.
TWISTS: list[Callable[[str], str]] = [
    str.upper,
    str.lower,
    str.swapcase,
    lambda s: unicodedata.normalize("NFD", s + "é"),
    lambda s: unicodedata.normalize("NFC", s + "e\u0301"),
    _fullwidth,
    lambda s: s + "\ufb01",  # the "fi" ligature NFKC folds to "fi"
    lambda s: s + "fi",
    lambda s: s + "\u2460",  # circled one, NFKC "1"
    lambda s: s + " ",
    lambda s: " " + s,
    lambda s: s + "\t",
    lambda s: s + "\u200b",
    lambda s: "\ufeff" + s,
    lambda s: s * 300 + "a",  # long ids sharing a prefix (refused past MAX_ID_BYTES)
    lambda s: s * 300 + "b",
    lambda s: s * 80 + "a",
    lambda s: s * 80 + "b",
    lambda s: s + "#1",  # the vector id of chunk 1 of message `s`
    lambda s: s + "#2",
    lambda s: s + "-1",
    lambda s: s + "_1",
    lambda s: s + ".1",
    lambda s: s + "/1",
    lambda s: s + ":1",
    lambda s: s + "--r",
    lambda s: "../" + s,
    lambda s: s + "/..",
    lambda s: s + "%",
    lambda s: s.replace(s[0], "_", 1),
    lambda s: s + "' OR '1'='1",
    lambda s: NO_RESOURCE,
    lambda s: f"t:{s}",  # the other's thread id (`check_pair` names threads `t:<id>`)
]

bases = st.text(alphabet=st.sampled_from("aAeé1-_.#:/ %"), min_size=1, max_size=6).filter(
    lambda s: bool(s.strip())
)
pairs = st.tuples(bases, st.sampled_from(TWISTS)).map(lambda p: (p[0], p[1](p[0])))


def _engine(sqlite: bool, *, postings: bool = False, langchain: bool = False) -> SemanticRecall:
    """One vector index for every resource (ids may meet there); `postings`: SQLite with
    every resource's keyword postings in memory, built at its first search."""
    storage: InMemoryStorage | SQLiteStorage = InMemoryStorage()
    if sqlite or postings:
        storage = SQLiteStorage(":memory:", keyword_cache_min_docs=1 if postings else 500)
        storage._postings.first_search_in_sql = not postings
    embeddings = SplitEmbeddings()
    vectors: InMemoryVectorIndex | LangChainVectorIndex = InMemoryVectorIndex()
    if langchain:
        vectors = LangChainVectorIndex(InMemoryVectorStore(embedding=embeddings))
    return SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=embeddings,
        top_k=8,
        message_range=1,
    )


def _state(memory: SemanticRecall, resource: str) -> tuple[Any, ...]:
    """All a resource has: messages, threads, vectors (with their rows' owners) and stats."""
    name = memory.ensure_index().name
    scope = ScopeFilter(resource_id=resource)
    messages = sorted(
        (m.id, m.thread_id, m.resource_id, m.text)
        for m in memory.storage.list_messages(scope, limit=1000)
    )
    exported = sorted(
        (r.id, r.message_id, r.thread_id, r.resource_id, r.content)
        for r in memory.vector_store.export(name, scope)
    )
    threads = sorted(t.thread_id for t in memory.storage.list_threads(resource))
    stats = memory.stats(resource_id=resource)
    return messages, exported, threads, stats.messages, stats.missing_vectors


def _index(memory: SemanticRecall, resource: str, thread: str, message_id: str) -> bool:
    """Index a two-chunk message; False when the id is refused (nothing of it stored)."""
    said = HumanMessage("lisbon tomato|garden peanut", id=message_id)
    try:
        memory.index([said], thread_id=thread, resource_id=resource)
    except InvalidInputError:
        return False
    return True


def _only_own(memory: SemanticRecall, resource: str, thread: str) -> None:
    for scope in ("resource", "thread"):
        for query in ("lisbon", "peanut garden"):
            hits = memory.with_options(scope=scope).search(
                query, thread_id=thread, resource_id=resource
            )
            for hit in hits:
                for message in hit.window:
                    assert message.resource_id == resource
                    assert memory.storage.get_thread_owner(message.thread_id) == resource


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pair=pairs,
    sqlite=st.booleans(),
    postings=st.booleans(),
    langchain=st.booleans(),
    op=st.integers(0, 4),
)
# a message id naming the other's chunk, in a shared in-memory or LangChain index
@example(pair=("m", "m#1"), postings=False, sqlite=False, langchain=True, op=0)
@example(pair=("m", "m#1"), postings=False, langchain=False, sqlite=False, op=0)
@example(pair=("m#1", "m"), postings=False, langchain=False, sqlite=True, op=0)
@example(pair=("Alice", "alice"), langchain=False, sqlite=True, postings=True, op=3)
@example(pair=("e\u0301", "\u00e9"), postings=False, langchain=False, sqlite=True, op=2)
@example(pair=("a", "a" * 300 + "b"), postings=False, langchain=False, sqlite=False, op=4)
@example(pair=("x", NO_RESOURCE), postings=False, langchain=False, sqlite=True, op=3)
def test_look_alike_ids_share_nothing(
    *, pair: tuple[str, str], sqlite: bool, postings: bool, langchain: bool, op: int
) -> None:
    """Ids of one pair as resource, thread and message ids: each side keeps its own."""
    if pair[0] != pair[1]:
        check_pair(_engine(sqlite, postings=postings, langchain=langchain), *pair, op=op)


def check_pair(memory: SemanticRecall, a: str, b: str, *, op: int) -> None:
    """Index a two-chunk message for `a` and for `b` (each id is its resource's, thread's
    and message's), check each sees only its own, run operation `op` (0-4) as `a`, and
    check that `b` kept exactly what it had (the integration tier runs it on its backends)."""
    ids = {a: f"t:{a}", b: f"t:{b}"}  # threads as distinct as the resources
    stored = {x: _index(memory, x, ids[x], x) for x in (a, b)}
    for x in (a, b):  # the message id is the resource id: twists of each other
        # refused only as a chunk's name, longer than any backend takes, or the mark
        chunk_name = x.rstrip("0123456789").endswith("#")
        assert stored[x] or chunk_name or len(ids[x].encode()) > MAX_ID_BYTES or x == NO_RESOURCE
        assert not (stored[x] and x == NO_RESOURCE)  # nobody's threads are not written to
        assert len(_state(memory, x)[0]) == int(stored[x])
        assert len(_state(memory, x)[1]) == 2 * int(stored[x])
        if x != NO_RESOURCE:
            _only_own(memory, x, ids[x])
    before = _state(memory, b)
    operations: list[Callable[[], object]] = [
        lambda: memory.forget_thread(ids[b], resource_id=a),  # another's thread
        lambda: memory.move_thread(ids[b], resource_id=a, to=a),
        lambda: memory.forget_resource(a),
        lambda: memory.forget_thread(ids[a], resource_id=a),
        lambda: memory.clear_thread(ids[a], resource_id=a),
    ]
    with contextlib.suppress(SemanticRecallError):  # refused or not: what it leaves counts
        operations[op]()
    assert _state(memory, b) == before
    if op in (2, 3):  # a's thread is gone: b may not take its id over either
        assert _state(memory, a)[:3] == ([], [], [])
        if _index(memory, b, ids[a], b + "!") and b != NO_RESOURCE:
            _only_own(memory, b, ids[a])
        assert _state(memory, a)[:3] == ([], [], [])


@pytest.mark.parametrize("first", ["owner", "other"])
@pytest.mark.parametrize("sqlite", [False, True])
def test_a_message_id_naming_another_messages_chunk_is_refused(first: str, sqlite: bool) -> None:
    """`m#1` is the vector id of chunk 1 of message `m`: in an index shared by resources,
    bob's message `m#1` replaced alice's chunk (her search no longer found it, and her
    stats counted no missing vector), or her chunk replaced his message's vector."""
    memory = _engine(sqlite)

    def alice() -> None:
        memory.index(
            [HumanMessage("lisbon trip|tomato garden", id="m")], thread_id="ta", resource_id="alice"
        )

    def bob() -> None:
        memory.index([HumanMessage("peanut allergy", id="m#1")], thread_id="tb", resource_id="bob")

    if first == "owner":
        alice()
        with pytest.raises(InvalidInputError, match="chunk 1 of message 'm'"):
            bob()
    else:
        with pytest.raises(InvalidInputError, match="chunk 1 of message 'm'"):
            bob()
        alice()
    rows = memory.vector_store.export(memory.ensure_index().name)
    assert sorted((r.id, r.message_id, r.resource_id) for r in rows) == [
        ("m", "m", "alice"),
        ("m#1", "m", "alice"),
    ]
    assert memory.stats(resource_id="bob").messages == 0


@pytest.mark.parametrize("message_id", ["m#0", "m#01", "#1", "m#1a", "m#", "a#b", "m#1 "])
def test_ids_that_name_no_chunk_are_kept(message_id: str) -> None:
    """Only `<id>#<n>` with n a chunk number (1, 2, ...) is a chunk's vector id."""
    memory = _engine(False)
    memory.index([HumanMessage("lisbon", id=message_id)], thread_id="t", resource_id="alice")
    assert memory.stats(resource_id="alice").messages == 1


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_signed_in_user_named_like_the_no_owner_mark_is_refused(asynchronous: bool) -> None:
    """A user signed in as "(no resource)" once stored threads with no owner: the next
    user to write such a thread id adopted it and read every message of it."""
    from langchain_core.runnables import RunnableLambda

    memory = _engine(True)

    def index() -> object:
        said = [HumanMessage("my secret lisbon", id="s1")]
        if asynchronous:
            import asyncio

            return asyncio.run(memory.aindex(said, thread_id="mine"))
        return memory.index(said, thread_id="mine")

    signed_in: RunnableLambda[None, object] = RunnableLambda(lambda _: index())
    with pytest.raises(InvalidInputError, match="mark of threads stored without a resource"):
        signed_in.invoke(None, {"configurable": {"langgraph_auth_user_id": NO_RESOURCE}})
    assert memory.storage.get_thread_owner("mine") is None


PLANTED = [HumanMessage("wire the money to account 0000", id="planted")]
WRITES_AS_THE_MARK: dict[str, Callable[[SemanticRecall], object]] = {
    "index": lambda m: m.index(PLANTED, thread_id="shared", resource_id=NO_RESOURCE),
    "aindex": lambda m: asyncio.run(m.aindex(PLANTED, thread_id="shared", resource_id=NO_RESOURCE)),
    "chat_history.add_messages": lambda m: m.chat_history(
        "shared", resource_id=NO_RESOURCE
    ).add_messages(PLANTED),
    "save_context": lambda m: m.for_thread("shared", NO_RESOURCE).save_context(
        {"input": "wire the money to account 0000"}, {"output": "ok"}
    ),
    "move_thread": lambda m: m.move_thread("own", to=NO_RESOURCE),
}


@pytest.mark.parametrize("write", sorted(WRITES_AS_THE_MARK))
def test_a_write_naming_the_no_owner_mark_is_refused(write: str) -> None:
    """Messages written for "(no resource)" were nobody's: the next user to write that
    thread adopted them as their own history and recall served them to that user."""
    memory = _engine(True).with_options(scope="thread")
    memory.index([HumanMessage("lisbon", id="o1")], thread_id="own", resource_id="bob")
    with pytest.raises(InvalidInputError, match="mark of threads stored without a resource"):
        WRITES_AS_THE_MARK[write](memory)
    assert memory.storage.get_thread_owner("shared") is None
    assert memory.storage.get_thread_owner("own") == "bob"
    memory.index([HumanMessage("hello", id="a1")], thread_id="shared", resource_id="alice")
    assert [m.id for m in memory.chat_history("shared", resource_id="alice").messages] == ["a1"]


@pytest.mark.parametrize("which", ["resource", "thread", "message", "to"])
@pytest.mark.parametrize("sqlite", [False, True])
def test_an_id_too_long_for_every_backend_is_refused_on_write(which: str, sqlite: bool) -> None:
    """An id over 2.7 KB stored here but failed on PostgreSQL ("index row size exceeds
    btree maximum", reported as a StorageError about the server): one rule for all."""
    memory = _engine(sqlite)
    longest = "é" * (MAX_ID_BYTES // 2)  # two bytes a character
    ids = {"resource": "r", "thread": "t", "message": "m"}
    memory.index([HumanMessage("lisbon", id="m0")], thread_id="t0", resource_id="r")
    if which == "to":
        memory.move_thread("t0", resource_id="r", to=longest)
        assert memory.stats(resource_id=longest).messages == 1
        with pytest.raises(InvalidInputError, match="bytes in UTF-8"):
            memory.move_thread("t0", resource_id=longest, to=longest + "x")
        assert memory.storage.get_thread_owner("t0") == longest
        return
    ids[which] = longest
    said = HumanMessage("lisbon", id=ids["message"])
    memory.index([said], thread_id=ids["thread"], resource_id=ids["resource"])
    ids = {"resource": "r", "thread": "t", "message": "m2", which: longest + "x"}
    said = HumanMessage("lisbon", id=ids["message"])
    with pytest.raises(InvalidInputError, match=f"is {MAX_ID_BYTES + 1:,} bytes in UTF-8"):
        memory.index([said], thread_id=ids["thread"], resource_id=ids["resource"])
    assert memory.stats(resource_id="r").messages == 1 + (which != "resource")


def test_a_jsonl_import_skips_the_lines_whose_ids_a_write_refuses() -> None:
    """A chunk's name or a too long id skips its line (reported), not the whole import."""
    import json

    from langchain_semantic_recall.importers.jsonl import read_jsonl_lines

    def line(**fields: str) -> str:
        return json.dumps({"resource": "r", "thread": "t", "role": "user", **fields})

    report = read_jsonl_lines(
        [
            line(content="kept", id="m"),
            line(content="a chunk's name", id="m#1"),
            line(content="long thread", thread="t" * (MAX_ID_BYTES + 1)),
            line(content="long resource", resource="r" * (MAX_ID_BYTES + 1)),
        ]
    )
    assert [m.id for c in report.conversations for m in c.messages] == ["m"]
    reasons = [s.reason for s in report.skipped]
    assert len(reasons) == 3, reasons
    assert "chunk 1 of message 'm'" in reasons[0]
    assert all("bytes in UTF-8" in reason for reason in reasons[1:])


@pytest.mark.parametrize("asynchronous", [False, True])
def test_int_ids_a_write_took_reach_the_same_data_on_every_maintenance_call(
    asynchronous: bool,
) -> None:
    """`index(thread_id=5, resource_id=7)` stores under "5" and "7", as every write takes
    an int; stats, move, clear and forget refused the same ints, so an app writing with
    them could not erase what it wrote without knowing to pass text."""
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        if asynchronous:
            return asyncio.run(getattr(memory, f"a{name}")(*args, **kwargs))
        return getattr(memory, name)(*args, **kwargs)

    for thread in (5, 6, 8):
        memory.index(
            [HumanMessage(f"note {thread}", id=f"n{thread}")], thread_id=thread, resource_id=7
        )
    memory.index([HumanMessage("bob's", id="b")], thread_id=9, resource_id="bob")
    assert call("stats", resource_id=7).messages == 3
    assert call("stats", thread_id=5).messages == 1
    assert call("move_thread", 8, to=70, resource_id=7) == 1
    assert memory.storage.get_thread_owner("8") == "70"
    assert call("clear_thread", 6, resource_id=7) == 1
    assert call("forget_thread", 5, resource_id=7) == 1
    assert call("forget_resource", 70) == 1
    assert memory.storage.get_thread_owner("9") == "bob"  # the other resource untouched
    with pytest.raises(InvalidInputError):
        call("stats", resource_id=7.0)  # a float is not an id
