"""Retention on the embedded default: the constructors take the policy, and a purge after it
leaves no byte of the old messages (real SQLite files and embedded Chroma).
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.records import ScopeFilter
from tests.fakes import FakeEmbeddings
from tests.integration.test_purge import _markers, leftovers, sign_key
from tests.unit.conftest import START
from tests.unit.test_purge import SignEmbeddings
from tests.unit.test_retention import CUTOFF, OLD


def test_the_local_and_url_constructors_take_the_policy(tmp_path: Path) -> None:
    local = SemanticRecall.local(
        tmp_path / "m", embeddings=FakeEmbeddings(), retention=timedelta(days=7)
    )
    url = SemanticRecall.from_url(
        storage=f"sqlite:///{tmp_path / 'u.sqlite3'}",
        vector=f"chroma:///{tmp_path / 'chroma'}",
        embeddings=FakeEmbeddings(),
        retention=timedelta(days=8),
    )
    try:
        assert (local.retention, url.retention) == (timedelta(days=7), timedelta(days=8))
        assert local.with_options(top_k=3).retention == timedelta(days=7)
    finally:
        local.storage.close()
        url.storage.close()


def test_purge_after_retention_leaves_no_byte_of_the_old_messages(tmp_path: Path) -> None:
    store = tmp_path / "memory"
    memory = SemanticRecall.local(store, embeddings=SignEmbeddings(), search_mode="dense")
    old: list[BaseMessage] = []
    new: list[BaseMessage] = []
    markers = iter(_markers(random.Random(26), 120))
    for t in range(4):
        for n in range(30):
            is_old = n < 20
            when = (OLD if is_old else START) + timedelta(minutes=n)
            kind = HumanMessage if n % 2 == 0 else AIMessage
            message = kind(
                f"note {next(markers)} of the trip",
                id=f"t{t}-m{n}",
                additional_kwargs={"created_at": when.isoformat()},
            )
            (old if is_old else new).append(message)
    for t in range(4):
        thread = [m for m in old + new if str(m.id).startswith(f"t{t}-")]
        thread.sort(key=lambda m: int(str(m.id).split("-m")[1]))
        memory.index(thread, thread_id=f"t{t}", resource_id="alice")
    index = memory.ensure_index().name
    exported = memory.vector_store.export(index, ScopeFilter(resource_id="alice"))
    gone_ids = {str(m.id) for m in old}
    vectors = {sign_key(r.vector) for r in exported if r.message_id in gone_ids}
    tails = {str(m.content).split()[1][-6:].encode() for m in old}
    assert len(vectors) == len(old) == 80

    result = memory.forget_before(CUTOFF)
    assert result.deleted == {"alice": 80}
    found = leftovers(store, tails, vectors)
    assert sum(texts for texts, _ in found.values()) > 0  # the bytes stay until the purge...
    assert sum(vecs for _, vecs in found.values()) > 0  # ...of texts and of vectors
    memory.purge()

    assert leftovers(store, tails, vectors) == {}
    stats = memory.stats()
    assert (stats.messages, stats.vectors, stats.orphan_vectors) == (40, 40, 0)
    memory.storage.close()
