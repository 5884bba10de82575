"""Look-alike ids on the real backends: the embedded default and PostgreSQL + a Chroma server.

The unit tier (`tests/unit/test_adversarial_ids.py`) runs the same pairs on the in-memory
and SQLite storages over one shared vector index. Here a resource id also becomes a
Chroma collection name (a hash of it), a snapshot file name (that collection's) and a
PostgreSQL scope token (a digest of it): look-alike ids must still share nothing.
"""

from __future__ import annotations

import random
import string
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.records import NO_RESOURCE
from langchain_semantic_recall.storable import MAX_ID_BYTES
from tests.unit.test_adversarial_ids import SplitEmbeddings, check_pair, pairs

pytestmark = pytest.mark.integration


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=pairs, op=st.integers(0, 4))
@example(pair=("Alice", "alice"), op=2)
@example(pair=("e\u0301", "\u00e9"), op=3)
@example(pair=("a" * 300 + "a", "a" * 300 + "b"), op=2)
@example(pair=("x", NO_RESOURCE), op=3)
def test_look_alike_ids_share_nothing_in_the_embedded_default(
    pair: tuple[str, str], op: int
) -> None:
    if pair[0] == pair[1]:
        return
    with tempfile.TemporaryDirectory() as folder:
        memory = SemanticRecall.local(folder, embeddings=SplitEmbeddings(), top_k=8)
        try:
            check_pair(memory, *pair, op=op)
        finally:
            memory.close()


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(pair=pairs, op=st.integers(0, 4))
@example(pair=("Alice", "alice"), op=2)
@example(pair=("a" * 300 + "a", "a" * 300 + "b"), op=2)
def test_look_alike_ids_share_nothing_on_the_servers(
    pg_url: str, chroma_url: str, pair: tuple[str, str], op: int
) -> None:
    """One database for every example: each gets its own index and an id prefix."""
    if pair[0] == pair[1]:
        return
    prefix = uuid.uuid4().hex[:8]
    memory = SemanticRecall.from_url(
        storage=pg_url,
        vector=chroma_url,
        embeddings=SplitEmbeddings(),
        index_name=f"ids-{prefix}",
        top_k=8,
    )
    try:
        check_pair(memory, prefix + pair[0], prefix + pair[1], op=op)
    finally:
        memory.close()


def test_the_longest_ids_a_write_takes_fit_postgresql(pg_url: str, chroma_url: str) -> None:
    """`MAX_ID_BYTES` for the resource, thread and message ids at once (random, so that
    PostgreSQL cannot compress them) fits its indexes; one byte more is refused first."""
    letters = string.ascii_letters + string.digits
    rng = random.Random(7)

    def longest() -> str:
        return "".join(rng.choice(letters) for _ in range(MAX_ID_BYTES))

    memory = SemanticRecall.from_url(
        storage=pg_url, vector=chroma_url, embeddings=SplitEmbeddings(), index_name="longest"
    )
    try:
        resource, thread, message = longest(), longest(), longest()
        said = HumanMessage("lisbon|garden", id=message)
        memory.index([said], thread_id=thread, resource_id=resource)
        assert memory.stats(resource_id=resource).messages == 1
        assert [h.message.id for h in memory.search("lisbon", resource_id=resource)] == [message]
        with pytest.raises(InvalidInputError, match="bytes in UTF-8"):
            memory.index([HumanMessage("x", id="m2")], thread_id=thread + "x", resource_id="r")
    finally:
        memory.close()
