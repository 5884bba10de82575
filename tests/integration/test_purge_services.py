"""`purge` on PostgreSQL and a Chroma server: what it erases there, checked on the files.

PostgreSQL: after `VACUUM FULL` (and a checkpoint) the files of the package's tables,
their indexes and TOAST hold no byte of a forgotten message; before it they do. The
server's write-ahead log and backups are the operator's and are not checked. The Chroma
server's collections are rebuilt over HTTP from the vectors that remain.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from tests.integration.test_purge import SignEmbeddings, conversations, marker_of

pytestmark = pytest.mark.integration

_RELATIONS = """
WITH own AS (SELECT oid, reltoastrelid FROM pg_class WHERE relname LIKE 'semantic\\_recall\\_%'),
rels AS (
    SELECT oid FROM own
    UNION SELECT reltoastrelid FROM own WHERE reltoastrelid <> 0
    UNION SELECT indexrelid FROM pg_index
        WHERE indrelid IN (SELECT reltoastrelid FROM own WHERE reltoastrelid <> 0)
)
SELECT pg_relation_filepath(oid) FROM rels WHERE pg_relation_filepath(oid) IS NOT NULL
"""


def table_files(url: str) -> list[Path]:
    """Every file (all forks and segments) of the package's relations, after a checkpoint."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        data = str(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        paths = [str(row[0]) for row in conn.execute(_RELATIONS).fetchall()]
    return [Path(f) for p in paths for f in glob.glob(os.path.join(data, p) + "*")]


def markers_in(files: list[Path], markers: set[bytes]) -> int:
    return sum(1 for f in files for m in markers if m in f.read_bytes())


@pytest.fixture
def memory(pg_url: str, chroma_url: str) -> Iterator[SemanticRecall]:
    storage = PostgresStorage(pg_url)
    vectors = ChromaServerVectorIndex(chroma_url)
    name = f"purge-{os.getpid()}-{id(storage)}"
    engine = SemanticRecall(
        storage=storage, vector_store=vectors, embeddings=SignEmbeddings(), index_name=name
    )
    yield engine
    vectors.drop(name)
    storage.close()


def test_purge_vacuums_postgres_and_rebuilds_the_chroma_servers_collections(
    memory: SemanticRecall, pg_url: str
) -> None:
    threads = [c for c in conversations() if c[1] in ("alice", "carol")]
    memory.bulk_index(threads)
    gone = [m for _, r, ms in threads if r == "alice" for m in ms][::20]
    markers = {marker_of(m).encode() for m in gone}
    memory.forget_resource("alice")
    before = memory.stats()
    assert markers_in(table_files(pg_url), markers) > 0  # dead rows hold them: the grep works

    result = memory.purge()

    assert markers_in(table_files(pg_url), markers) == 0
    assert result.storage.done == tuple(
        f"VACUUM (FULL, ANALYZE) semantic_recall_{t}"
        for t in ("messages", "threads", "forgotten_threads")
    )
    assert result.storage.bytes_before is not None
    assert result.storage.bytes_after is not None
    assert result.storage.bytes_after < result.storage.bytes_before
    assert result.vectors.vectors_rebuilt == 300
    assert result.vectors.bytes_before is None  # the server's files are not ours to measure
    assert memory.stats() == before
    carol = [m for _, r, ms in threads if r == "carol" for m in ms]
    for message in carol[::30]:
        hits = memory.search(str(message.content), resource_id="carol", top_k=1)
        assert [h.message.id for h in hits] == [message.id]
