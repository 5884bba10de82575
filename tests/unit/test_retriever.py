"""The retriever (with LangChain's standard retriever tests) and the memory search tool."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_semantic_recall import (
    IdentityMismatchError,
    InMemoryStorage,
    InvalidInputError,
    InvalidOptionError,
    MissingIdentityError,
    SemanticRecall,
)
from langchain_semantic_recall.retriever import (
    NOTHING_FOUND,
    MemorySearchTool,
    SemanticRecallRetriever,
    create_memory_search_tool,
    format_hits,
)
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import BOB_SECRETS, SECRETS, TOPICS, FactsMemory, FakeEmbeddings

ALICE = {"configurable": {"thread_id": "alice-chat", "resource_id": "alice"}}
BOB = {"configurable": {"thread_id": "bob-chat", "resource_id": "bob"}}


@cache
def standard_memory() -> FactsMemory:
    """One engine for the standard suite (its fixtures are properties, not pytest's)."""
    return FactsMemory(threshold=None)


class TestStandardRetriever(RetrieversIntegrationTests):
    """LangChain's standard retriever tests, on a memory holding 20 facts per user."""

    @property
    def retriever_constructor(self) -> type[SemanticRecallRetriever]:
        return SemanticRecallRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        # No config in the standard calls: the retriever's own defaults give the scope.
        return {"memory": standard_memory().engine, "thread_id": "t", "resource_id": "alice"}

    @property
    def retriever_query_example(self) -> str:
        return "garden alpha0x piano"


@pytest.fixture
def memory() -> FactsMemory:
    return FactsMemory()


def test_documents_carry_message_metadata_and_score(memory: FactsMemory) -> None:
    retriever = memory.engine.as_retriever()
    (doc,) = retriever.invoke("garden", ALICE)
    assert isinstance(doc, Document)
    header, line = doc.page_content.splitlines()
    assert header.startswith('Conversation "alice-notes", ')
    assert line == f"> user: garden {SECRETS[0]}"  # the hit, marked
    assert doc.metadata["text"] == f"garden {SECRETS[0]}"
    assert doc.id == "alice-garden"
    meta = doc.metadata
    assert meta["source"] == "memory"
    assert meta["message_id"] == "alice-garden"
    assert (meta["thread_id"], meta["resource_id"], meta["role"]) == (
        "alice-notes",
        "alice",
        "user",
    )
    assert meta["created_at"].endswith("+00:00")
    assert isinstance(meta["seq"], int)
    assert 0.3 <= meta["score"] <= 1
    assert meta["window"] == [
        {
            "message_id": "alice-garden",
            "role": "user",
            "text": f"garden {SECRETS[0]}",
            "created_at": meta["created_at"],
        }
    ]


async def test_scope_comes_from_the_config(memory: FactsMemory) -> None:
    retriever = memory.engine.as_retriever()
    alice = await retriever.ainvoke("garden", ALICE)
    bob = await retriever.ainvoke("garden", BOB)
    assert [d.metadata["text"] for d in alice] == [f"garden {SECRETS[0]}"]
    assert [d.metadata["text"] for d in bob] == [f"garden {BOB_SECRETS[0]}"]
    # Ids given to the retriever are explicit ids: they win over the config (one rule).
    pinned = memory.engine.as_retriever(resource_id="alice")
    assert [d.metadata["resource_id"] for d in pinned.invoke("garden", BOB)] == ["alice"]
    spoofed = {"configurable": {**BOB["configurable"], "langgraph_auth_user_id": "bob"}}
    with pytest.raises(IdentityMismatchError):  # but never over an authenticated user
        pinned.invoke("garden", spoofed)


def test_k_per_retriever_and_per_call() -> None:
    memory = FactsMemory(threshold=None)
    query = " ".join(TOPICS[:6])
    assert len(memory.engine.as_retriever(k=5).invoke(query, ALICE)) == 5
    assert len(memory.engine.as_retriever().invoke(query, ALICE, k=2)) == 2
    assert len(memory.engine.as_retriever().invoke(query, ALICE)) == memory.engine.top_k
    with pytest.raises(InvalidOptionError):
        memory.engine.as_retriever(k=0)


@pytest.mark.parametrize("k", [0, -1, True, "2", 2.5])
async def test_a_bad_k_per_call_is_refused_sync_and_async(k: object) -> None:
    """k=-1 once dropped the last hit and k=0 returned every hit, without a word."""
    retriever = FactsMemory(threshold=None).engine.as_retriever()
    with pytest.raises(InvalidInputError, match=r"k .*int >= 1"):
        retriever.invoke("garden", ALICE, k=k)
    with pytest.raises(InvalidInputError, match=r"k .*int >= 1"):
        await retriever.ainvoke("garden", ALICE, k=k)


def test_a_bound_view_gives_the_default_scope(memory: FactsMemory) -> None:
    retriever = memory.engine.for_thread("bob-chat", "bob").as_retriever()
    assert [d.metadata["text"] for d in retriever.invoke("garden")] == [f"garden {BOB_SECRETS[0]}"]


def test_no_thread_anywhere_is_a_clear_error(memory: FactsMemory) -> None:
    with pytest.raises(InvalidInputError, match="thread_id"):
        memory.engine.as_retriever().invoke("garden")


def test_tool_takes_only_a_query(memory: FactsMemory) -> None:
    tool = memory.engine.as_tool()
    assert isinstance(tool, MemorySearchTool)
    assert tool.name == "search_memory"
    assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    with pytest.raises(InvalidOptionError):
        memory.engine.as_tool(arg_types={"query": str})


async def test_tool_is_scoped_to_the_caller_whatever_the_model_says(memory: FactsMemory) -> None:
    tool = create_memory_search_tool(memory.engine, name="recall_notes", description="Notes.")
    assert (tool.name, tool.description) == ("recall_notes", "Notes.")
    call = {
        "name": "recall_notes",
        "args": {"query": "garden"},
        "id": "call_1",
        "type": "tool_call",
    }
    result = await tool.ainvoke(call, BOB)
    assert isinstance(result, ToolMessage)
    assert BOB_SECRETS[0] in result.text
    assert SECRETS[0] not in result.text
    assert [d.metadata["resource_id"] for d in result.artifact] == ["bob"]
    sync = tool.invoke(call, ALICE)
    assert SECRETS[0] in sync.text
    assert BOB_SECRETS[0] not in sync.text


@pytest.mark.parametrize(
    "args",
    [
        {"query": "garden", "resource_id": "alice"},
        {"query": "garden", "thread_id": "alice-notes"},
        {"query": "garden", "scope": "resource", "k": 3},
    ],
)
async def test_ids_or_options_the_model_adds_to_a_tool_call_are_refused(
    memory: FactsMemory, args: dict[str, Any]
) -> None:
    """The model's `resource_id` was dropped without a word: it read bob's memory as
    if it were alice's. Now the call is refused under the argument's name (a `ToolNode`
    hands the error back to the model, which retries with the query alone)."""
    tool = memory.engine.as_tool()
    call = {"name": tool.name, "args": args, "id": "call_1", "type": "tool_call"}
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        tool.invoke(call, BOB)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        await tool.ainvoke(args, BOB)


@pytest.mark.parametrize("keyword", ["resource_id", "thread_id", "scope", "top_k"])
async def test_a_retriever_call_refuses_keywords_it_does_not_take(
    memory: FactsMemory, keyword: str
) -> None:
    """`retriever.invoke(q, config, resource_id="bob")` raised a bare TypeError from deep
    inside LangChain; it now says what a call takes and where ids go."""
    retriever = memory.engine.as_retriever()
    with pytest.raises(InvalidInputError, match="takes only k"):
        retriever.invoke("garden", ALICE, **{keyword: "bob"})
    with pytest.raises(InvalidInputError, match="takes only k"):
        await retriever.ainvoke("garden", ALICE, **{keyword: "bob"})


@pytest.mark.parametrize(
    "options",
    [{"name": ""}, {"name": "search memory"}, {"name": "x" * 65}, {"description": " "}],
)
def test_a_tool_name_models_refuse_or_a_blank_description_is_refused(
    memory: FactsMemory, options: dict[str, str]
) -> None:
    # "" became the default name, and a name with a space reached the model (which refuses it).
    with pytest.raises(InvalidOptionError, match="tool's"):
        memory.engine.as_tool(**options)  # type: ignore[arg-type]


def test_tool_without_ids_is_a_clear_error(memory: FactsMemory) -> None:
    with pytest.raises(MissingIdentityError, match="needs a resource id"):
        memory.engine.as_tool().invoke({"query": "garden"})
    thread_scope = memory.engine.with_options(scope="thread").as_tool()
    with pytest.raises(MissingIdentityError, match="needs a conversation id"):
        thread_scope.invoke({"query": "garden"}, {"configurable": {"resource_id": "alice"}})


def test_page_content_is_the_window_as_a_transcript_with_the_hit_marked() -> None:
    memory = FactsMemory(message_range=(1, 2))
    engine = memory.engine
    chat = [
        HumanMessage("Where should we eat tonight?", id="q"),
        AIMessage("Try the ramen place on Elm Street.", id="a"),
        HumanMessage("Great, thanks!", id="t"),
    ]
    engine.index(chat, thread_id="dinner", resource_id="alice")
    (doc,) = [d for d in engine.as_retriever().invoke("eat tonight", ALICE) if d.id == "q"]
    lines = doc.page_content.splitlines()
    assert lines[1:] == [
        "> user: Where should we eat tonight?",
        "  assistant: Try the ramen place on Elm Street.",  # the answer is in page_content
        "  user: Great, thanks!",
    ]
    assert [w["message_id"] for w in doc.metadata["window"]] == ["q", "a", "t"]


def test_search_kwargs_are_langchains_and_unknown_options_raise(memory: FactsMemory) -> None:
    engine = FactsMemory(threshold=None).engine
    query = " ".join(TOPICS[:6])
    assert len(engine.as_retriever(search_kwargs={"k": 1}).invoke(query, ALICE)) == 1
    strict = engine.as_retriever(search_kwargs={"score_threshold": 0.99})
    assert strict.invoke(query, ALICE) == []
    with pytest.raises(InvalidOptionError, match="search_kwargs"):
        engine.as_retriever(search_kwargs={"fetch_k": 20})
    with pytest.raises(InvalidOptionError, match="unknown retriever option"):
        engine.as_retriever(search_type="mmr")
    with pytest.raises(InvalidOptionError):
        engine.as_retriever(scope="everything")


def test_k_given_twice_and_a_bad_score_threshold_are_refused_when_built() -> None:
    engine = FactsMemory(threshold=None).engine
    # search_kwargs["k"] was ignored (and never checked) beside k=.
    with pytest.raises(InvalidOptionError, match="give k once"):
        engine.as_retriever(k=2, search_kwargs={"k": "five"})
    with pytest.raises(InvalidOptionError, match="give k once"):
        engine.as_retriever(k=2, search_kwargs={"k": 5})
    # A threshold out of range, or any in keyword mode, waited for the first search.
    with pytest.raises(InvalidOptionError, match="between 0 and 1"):
        engine.as_retriever(search_kwargs={"score_threshold": 2})
    keyword = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="keyword",
    )
    with pytest.raises(InvalidOptionError, match="keyword mode"):
        keyword.as_retriever(search_kwargs={"score_threshold": 0.5})
    assert isinstance(
        engine.as_retriever(search_kwargs={"score_threshold": 0.5}), SemanticRecallRetriever
    )


def test_scope_option_is_honoured(memory: FactsMemory) -> None:
    engine = memory.engine
    other_thread = {"configurable": {"thread_id": "alice-chat", "resource_id": "alice"}}
    assert engine.as_retriever().invoke("garden", other_thread) != []
    assert engine.as_retriever(scope="thread").invoke("garden", other_thread) == []
    notes = {"configurable": {"thread_id": "alice-notes", "resource_id": "alice"}}
    assert engine.as_retriever(scope="thread").invoke("garden", notes) != []


def test_format_hits(memory: FactsMemory) -> None:
    assert format_hits([]) == NOTHING_FOUND
    hits = memory.engine.search("garden", thread_id="t", resource_id="alice")
    text = format_hits(hits)
    shown = sum(len(hit.window) for hit in hits)  # the tool counted hits as messages
    assert text.splitlines()[0] == (
        f"Found 1 memory hit(s), {shown} message(s) with their context, best first:"
    )
    assert len([line for line in text.splitlines() if line.startswith("   ")]) == shown
    assert 'conversation "alice-notes"' in text
    assert f"> user: garden {SECRETS[0]}" in text


# --- k and score_threshold (LangChain's meanings) -----------------------------------------


def _two_facts() -> SemanticRecall:
    from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
    from tests.fakes import FakeEmbeddings

    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=4096),
    )
    filler = [f"note {n} about the weather and groceries" for n in range(30)]
    for n, text in enumerate([*filler[:15], "the kayak trip to Lake Bled", *filler[15:]]):
        memory.index([HumanMessage(text, id=f"a{n}")], thread_id="a", resource_id="r")
    memory.index([HumanMessage("a kayak trip again", id="b0")], thread_id="b", resource_id="r")
    return memory


@pytest.mark.parametrize("k", [1, 2])
async def test_k_is_the_number_of_documents_when_that_many_are_relevant(k: int) -> None:
    """k=2 once returned 1 document: k was the candidate pool, not the documents."""
    memory = _two_facts()
    retriever = memory.as_retriever(resource_id="r", search_kwargs={"k": k})
    for docs in (retriever.invoke("kayak trip"), await retriever.ainvoke("kayak trip")):
        assert len(docs) == k
    both = memory.as_retriever(resource_id="r", k=2).invoke("kayak trip")
    assert {d.metadata["thread_id"] for d in both} == {"a", "b"}


def test_score_threshold_zero_turns_the_cut_off_off() -> None:
    memory = _two_facts()
    quiet = memory.as_retriever(resource_id="r").invoke("zebra xylophone quantum")
    assert quiet == []  # nothing closer than unrelated text: the evidence says silence
    every = memory.as_retriever(resource_id="r", search_kwargs={"score_threshold": 0.0})
    assert every.invoke("zebra xylophone quantum")  # the floor is 0: the budget is spent


def test_a_per_call_top_k_narrows_hybrid_candidates() -> None:
    memory = _two_facts()
    wide = memory.search("kayak trip", resource_id="r")
    narrow = memory.search("kayak trip", resource_id="r", top_k=1)
    assert len(narrow) == 1
    assert len(wide) >= 2


async def test_the_tools_answer_is_stored_but_never_recalled(memory: FactsMemory) -> None:
    """Issue 23: the tool's own output came back in later recall windows as if said."""
    engine = memory.engine
    call = {"name": "search_memory", "args": {"query": "garden"}, "id": "c9", "type": "tool_call"}
    answers = [engine.as_tool().invoke(call, ALICE), await engine.as_tool().ainvoke(call, ALICE)]
    for n, answer in enumerate(answers):
        assert isinstance(answer, ToolMessage)
        assert answer.additional_kwargs["source"] == "memory_search"
        assert SECRETS[0] in answer.text
        question = HumanMessage(f"what did I plant in my garden, take {n}?", id=f"q{n}")
        asked = AIMessage("", id=f"ask{n}", tool_calls=[{**call, "id": f"c{n}"}])
        answer.id, answer.tool_call_id = f"tool-out{n}", f"c{n}"
        turn = [question, asked, answer]
        fates = {f.message_id: f.fate for f in engine.index(turn, **ALICE["configurable"]).fates}
        assert fates[f"tool-out{n}"] == "stored"  # the tool call keeps its result
    history = engine.chat_history(ALICE["configurable"]["thread_id"], resource_id="alice")
    assert {"tool-out0", "tool-out1"} <= {m.id for m in history.messages}
    whole = engine.with_options(search_mode="dense", message_range=(0, 2), top_k=20)
    for hits in (  # whole windows: each question's holds the tool's answer two places on
        whole.search("what did I plant in my garden", resource_id="alice"),
        await whole.asearch("what did I plant in my garden", resource_id="alice"),
    ):
        assert {"q0", "q1"} <= {m.id for hit in hits for m in hit.window}
        assert not {"tool-out0", "tool-out1"} & {m.id for hit in hits for m in hit.window}


def test_as_retriever_takes_integer_ids_as_every_call_does() -> None:
    """`index(..., thread_id=5)` stores thread "5": `as_retriever(thread_id=5)` reads it."""
    engine = FactsMemory().engine
    engine.index(
        [HumanMessage("the ramen place on Elm Street", id="r1")], thread_id=5, resource_id=7
    )
    retriever = engine.as_retriever(thread_id=5, resource_id=7, scope="thread")
    assert [d.id for d in retriever.invoke("ramen Elm Street")] == ["r1"]
    with pytest.raises(InvalidInputError, match="thread_id must be text"):
        engine.as_retriever(thread_id=5.0)
