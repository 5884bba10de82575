"""InMemoryStorage runs the storage conformance suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langchain_semantic_recall.storage import InMemoryStorage, MessageStorage
from tests.conformance.storage_suite import StorageConformance, make_thread


class TestInMemoryStorage(StorageConformance):
    @pytest.fixture
    def storage(self) -> Iterator[MessageStorage]:
        storage = InMemoryStorage()
        yield storage
        storage.close()


def test_instances_do_not_share_state() -> None:
    first, second = InMemoryStorage(), InMemoryStorage()
    first.put(make_thread(2))
    assert second.count() == 0
    assert second.get_thread_owner("t1") is None
