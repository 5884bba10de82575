"""The memory contract through the CLI on a real store.

tests/unit/test_contract.py has the rest of the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import (
    SemanticRecall,
)
from tests.fakes import FakeEmbeddings
from tests.unit.test_contract import FACT

pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory:DeprecationWarning")


def test_cli_search_with_a_resource_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_semantic_recall.cli import common, main

    monkeypatch.setattr(common, "create_embeddings", lambda: FakeEmbeddings(dimension=4096))
    store = tmp_path / "store"
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings(dimension=4096))
    memory.index([HumanMessage(FACT)], thread_id="A", resource_id="alice")
    memory.index([HumanMessage("yes")], thread_id="A", resource_id="alice")
    memory.index([HumanMessage("yes")], thread_id="A", resource_id="alice")
    memory.storage.close()
    assert main(["--path", str(store), "search", "Biscuit", "--resource", "alice", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [hit["message"]["text"] for hit in hits][:1] == [FACT]
    assert main(["--path", str(store), "threads", "--json"]) == 0
    (thread,) = json.loads(capsys.readouterr().out)
    assert (thread["thread"], thread["messages"]) == ("A", 3)  # the two "yes" are two rows
