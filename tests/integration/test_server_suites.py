"""The forgetting, isolation and fault suites on PostgreSQL storage and a Chroma server.

`tests/faults.py` says other backends join the suites with a `Backend`; this is that
backend. Every rig gets a schema of its own in one database of the session's PostgreSQL
server (dropped when the module ends) and an index of its own on its Chroma server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from tests.faults import Backend
from tests.integration.conftest import create_database, drop_database
from tests.unit.test_faults import FaultSuite
from tests.unit.test_forgetting import ForgettingSuite, isolation_machine, machine_settings

pytestmark = pytest.mark.integration

_SERVERS: dict[str, str] = {}


@pytest.fixture(autouse=True, scope="module")
def _servers(pg_admin_url: str, chroma_url: str) -> Iterator[None]:
    database = create_database(pg_admin_url)
    _SERVERS.update(pg=database, chroma=chroma_url)
    yield
    drop_database(pg_admin_url, database)


def _postgres(_: Path) -> MessageStorage:
    """A new schema of the module's database (cheaper than a database per rig)."""
    schema = f"rig_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_SERVERS["pg"], autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return PostgresStorage(f"{_SERVERS['pg']}?options=-csearch_path%3D{schema}", max_size=4)


def _chroma_server(_: Path) -> VectorIndex:
    return ChromaServerVectorIndex(_SERVERS["chroma"])


POSTGRES_CHROMA_SERVER = Backend(
    "postgres+chroma-server", _postgres, _chroma_server, shared_vectors=True
)


class TestForgettingOnServers(ForgettingSuite):
    backend = POSTGRES_CHROMA_SERVER


class TestFaultsOnServers(FaultSuite):
    backend = POSTGRES_CHROMA_SERVER
    examples = 8


TestIsolationOnServers = isolation_machine(POSTGRES_CHROMA_SERVER).TestCase
TestIsolationOnServers.settings = machine_settings(15, 25)
