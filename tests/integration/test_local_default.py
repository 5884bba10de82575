"""The embedded default, for real: SQLite + embedded Chroma + the local MiniLM model."""

from __future__ import annotations

from pathlib import Path

import chromadb
import pytest
from chromadb.config import Settings
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_semantic_recall import EmbeddingMismatchError, SemanticRecall, StorageError
from langchain_semantic_recall.importers import demo_conversations
from langchain_semantic_recall.messages import MEMORY_SOURCE
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.slow
CHROMA_SETTINGS = Settings(anonymized_telemetry=False)  # the settings our index opens with


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SemanticRecall]:
    path = tmp_path_factory.mktemp("local")
    memory = SemanticRecall.local(path, top_k=3)
    for conversation in demo_conversations().conversations:
        memory.index(
            conversation.messages,
            thread_id=conversation.thread_id,
            resource_id=conversation.resource_id,
        )
    return path, memory


def test_paraphrases_are_recalled_across_conversations(
    loaded: tuple[Path, SemanticRecall],
) -> None:
    _, memory = loaded
    hits = memory.search("Which food am I allergic to?", thread_id="new", resource_id="alice")
    assert hits[0].message.text == "My sister is vegetarian, and I'm allergic to peanuts."
    assert all(h.message.resource_id == "alice" for h in hits)
    block = memory.recall(
        [HumanMessage("When should seedlings go outdoors?")], thread_id="new", resource_id="alice"
    )[0]
    assert isinstance(block, SystemMessage)
    assert block.additional_kwargs["source"] == MEMORY_SOURCE
    assert "late April" in block.content
    assert "bob" not in block.content


def test_short_questions_about_the_user_are_answered_and_small_talk_is_not(
    tmp_path: Path,
) -> None:
    """ "What's my job?" reads like "how are you doing today?" to the small-talk check, and
    was silenced though "I work as a nurse" matched it best by far; small talk must stay
    silent in the same memory, also when the memory holds its earlier twin."""
    memory = SemanticRecall.local(tmp_path)
    facts = [
        "I work as a nurse at the city hospital.",
        "I'm planning a trip to Lisbon in May.",
        "My sister Emma is vegetarian.",
        "I'm allergic to peanuts.",
        "haha that's hilarious",
        "Thanks so much for the help!",
        "okay sounds good, thanks a lot for the help",  # 1 content term, 6 index terms
    ]
    for n, fact in enumerate(facts):
        memory.index(
            [HumanMessage(fact, id=f"f{n}"), AIMessage("Noted!", id=f"a{n}")],
            thread_id=f"t{n}",
            resource_id="alice",
        )
    for question, fact in [("What's my job?", 0), ("Where am I going in May?", 1)] * 2:
        hits = memory.search(question, resource_id="alice")
        assert f"f{fact}" in [h.message.id for h in hits][:2], question
        # asked again later, it first finds its own earlier twin: the fact still answers
        memory.index([HumanMessage(question)], thread_id="asked", resource_id="alice")
    chats = [
        "thanks so much for the help",
        "haha hilarious",
        "how are you today?",
        "sounds good",
        "okay sounds good, thanks a lot",
        "thank you so much, have a nice weekend",
    ]
    for chat in chats:
        assert memory.search(chat, resource_id="alice") == [], chat


def test_the_store_persists_and_the_collection_is_cosine(
    loaded: tuple[Path, SemanticRecall],
) -> None:
    path, memory = loaded
    reopened = SemanticRecall.local(path, top_k=3)
    assert reopened.stats() == memory.stats()
    assert reopened.stats().missing_vectors == 0
    assert [h.message.id for h in reopened.search("peanuts", thread_id="x", resource_id="alice")][
        :1
    ] == ["trip-planning-4"]
    info = reopened.ensure_index()
    assert (info.model, info.dimension) == ("sentence-transformers/all-MiniLM-L6-v2", 384)
    client = chromadb.PersistentClient(str(path / "chroma"), settings=CHROMA_SETTINGS)
    collection = client.get_collection(info.name, embedding_function=None)
    assert collection.configuration["hnsw"]["space"] == "cosine"
    assert collection.metadata["dimension"] == 384


def test_another_embedder_on_the_same_index_fails_closed(
    loaded: tuple[Path, SemanticRecall],
) -> None:
    path, memory = loaded
    other = SemanticRecall.local(
        path, embeddings=FakeEmbeddings(384, "other-model"), index_name=memory.ensure_index().name
    )
    with pytest.raises(EmbeddingMismatchError, match="reindex"):
        other.recall([HumanMessage("peanuts")], thread_id="x", resource_id="alice")


def test_a_long_message_is_indexed_whole_with_the_real_tokenizer(tmp_path: Path) -> None:
    memory = SemanticRecall.local(tmp_path, scope="thread")
    filler = " ".join(f"Paragraph {n} talks about weather and nothing else." for n in range(300))
    text = filler + " The locker code is 4711."
    result = memory.index(
        [HumanMessage(text, id="long"), AIMessage("ok", id="ok")], thread_id="t", resource_id="r"
    )
    assert result.embedded == ("long", "ok")
    hits = memory.search("What is the locker code?", thread_id="t", resource_id="r")
    assert hits[0].message.id == "long"


def test_a_storage_path_that_cannot_be_used_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError, match=str(blocker)):
        SemanticRecall.local(blocker / "memory")
