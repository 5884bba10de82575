"""The evaluation: datasets, scoring, and a smoke run of ``semantic-recall eval``.

Every dataset here is a tiny synthetic file written to a temporary folder (LoCoMo itself
is evaluation data, never a fixture).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, InvalidInputError, SemanticRecall
from langchain_semantic_recall.cli import common, main
from langchain_semantic_recall.eval_paraphrase import BUSY_MESSAGES, add_busy, read_paraphrase
from langchain_semantic_recall.evaluation import (
    QUERY_THREAD,
    Dataset,
    EvalConversation,
    EvalQuestion,
    EvidenceReport,
    QuestionResult,
    aevaluate,
    default_threshold,
    evaluate,
    load_dataset,
    normalise_evidence,
    read_eval_jsonl,
    read_locomo,
    read_probes,
    summarize,
)
from langchain_semantic_recall.false_memory import (
    dataset_probes,
    foreign_questions,
    small_talk_questions,
)
from langchain_semantic_recall.options import DEFAULT_SEARCH_MODE
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings


def locomo_sample(sample_id: str, a: str, b: str, topic: str) -> dict[str, Any]:
    """A LoCoMo-shaped sample: two sessions, a caption, every category, bad evidence."""
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": a, "dia_id": "D1:1", "text": f"I started {topic} lessons."},
                {"speaker": b, "dia_id": "D1:2", "text": "Nice! How is it going?"},
                {
                    "speaker": a,
                    "dia_id": "D1:3",
                    "text": "Look at this.",
                    "blip_caption": f"a photo of a {topic} trophy",
                },
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": b, "dia_id": "D2:1", "text": "I adopted a puppy called Biscuit."},
                {"speaker": a, "dia_id": "D2:2", "text": "Biscuit is a lovely name."},
            ],
            "session_3_date_time": "9:00 am on 1 July, 2023",  # a date with no session
        },
        "qa": [
            {"question": f"What lessons did {a} start?", "evidence": ["D1:1"], "category": 4},
            {"question": f"What did {a} win?", "evidence": ["D:1:3"], "category": 1},
            {"question": "What is the puppy called?", "evidence": ["D2:01; D2:2"], "category": 2},
            {"question": "Open question?", "evidence": ["D1:2", "D9:9"], "category": 3},
            {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5},
            {"question": "No evidence?", "evidence": ["D"], "category": 4},
        ],
    }


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_tiny.json"
    samples = [
        locomo_sample("conv-1", "Ann", "Ben", "tennis"),
        locomo_sample("conv-2", "Cleo", "Dan", "chess"),
    ]
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


# --- evidence ids ----------------------------------------------------------------------------


def test_malformed_evidence_ids_are_normalised_split_or_dropped_and_counted() -> None:
    report = EvidenceReport()
    known = {"D8:6", "D9:17", "D11:26", "D30:5"}
    entries = ["D8:6; D9:17", "D:11:26", "D30:05", "D10:19", "D", "D8:6"]
    assert normalise_evidence(entries, known, report) == ("D8:6", "D9:17", "D11:26", "D30:5")
    assert (report.split, report.normalised, report.unknown_dropped) == (1, 2, 1)
    assert report.unparseable_dropped == 1
    assert any("D:11:26" in line for line in report.examples)


# --- LoCoMo ----------------------------------------------------------------------------------


def test_locomo_maps_conversations_sessions_speakers_and_times(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file)
    threads = [c.thread_id for c in dataset.conversations]
    assert threads == [
        "conv-1/session_1",
        "conv-1/session_2",
        "conv-2/session_1",
        "conv-2/session_2",
    ]
    first, second, third = dataset.conversations[0].messages
    assert isinstance(first, HumanMessage)
    assert isinstance(second, AIMessage)
    assert first.id == "conv-1:D1:1"
    assert first.content == "Ann: I started tennis lessons."
    assert third.content == "Ann: Look at this. [shared image: a photo of a tennis trophy]"
    assert [m.additional_kwargs["created_at"] for m in (first, second)] == [
        datetime(2023, 5, 8, 13, 56, 0, tzinfo=UTC).isoformat(),
        datetime(2023, 5, 8, 13, 56, 1, tzinfo=UTC).isoformat(),
    ]
    assert isinstance(dataset.conversations[1].messages[0], AIMessage)  # speaker B
    assert dataset.message_count == 10


def test_locomo_questions_categories_and_evidence(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file)
    first = dataset.questions[:4]
    assert [q.category for q in first] == [
        "4 single-hop",
        "1 multi-hop",
        "2 temporal",
        "3 open-domain",
    ]
    assert [q.evidence for q in first] == [("D1:1",), ("D1:3",), ("D2:1", "D2:2"), ("D1:2",)]
    assert {q.thread_id for q in dataset.questions} == {QUERY_THREAD}
    assert len(dataset.questions) == 8  # adversarial and evidence-less questions left out
    assert dataset.evidence.questions_without_evidence == 2
    assert dataset.evidence.unknown_dropped == 2
    with_adversarial = read_locomo(locomo_file, include_adversarial=True)
    assert sum(q.category == "5 adversarial" for q in with_adversarial.questions) == 2


def test_locomo_in_one_thread_for_thread_scope(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file, one_thread=True)
    assert [c.thread_id for c in dataset.conversations] == ["conv-1", "conv-2"]
    assert {q.thread_id for q in dataset.questions} == {"conv-1", "conv-2"}


def test_a_bad_session_date_is_reported(tmp_path: Path) -> None:
    sample = locomo_sample("c", "A", "B", "golf")
    sample["conversation"]["session_1_date_time"] = "sometime"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="session_1_date_time"):
        read_locomo(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": 1}\n{"b": 2}\n', "not a LoCoMo JSON file"),  # a JSONL file, say
        (b"\xff\xfe[]".decode("latin-1"), "not a LoCoMo JSON file"),
        ('[{"sample_id": 1}]', "sample #1 is not a LoCoMo sample (KeyError: 'conversation')"),
        ("[5]", "sample #1 is not a LoCoMo sample (TypeError"),
    ],
)
def test_a_file_that_is_not_locomo_is_an_input_error(tmp_path: Path, text: str, says: str) -> None:
    """These were an "internal error (JSONDecodeError ...)": report it" on the command line."""
    path = tmp_path / "not-locomo.json"
    path.write_text(text, encoding="latin-1")
    with pytest.raises(InvalidInputError) as raised:
        read_locomo(path)
    assert says in str(raised.value)


# --- our JSONL -------------------------------------------------------------------------------


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_our_jsonl_reads_messages_and_questions(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "eval.jsonl",
        [
            {
                "resource": "alice",
                "thread": "trip",
                "role": "user",
                "id": "m1",
                "content": "We land in Lisbon on the 3rd",
                "created_at": "2024-01-15T10:30:00Z",
            },
            {
                "resource": "alice",
                "thread": "trip",
                "role": "assistant",
                "id": "m2",
                "content": "Noted: Lisbon, the 3rd.",
            },
            {"resource": "bob", "thread": "b", "role": "user", "id": "b1", "content": "hi"},
            {
                "question": "When do we land?",
                "resource": "alice",
                "evidence": ["m1", "b1", "zz"],
                "category": "temporal",
            },
            {"question": "Who?", "resource": "alice", "evidence": ["nope"]},
        ],
    )
    dataset = read_eval_jsonl(path)
    assert [(c.resource_id, c.thread_id, len(c.messages)) for c in dataset.conversations] == [
        ("alice", "trip", 2),
        ("bob", "b", 1),
    ]
    [question] = dataset.questions
    assert (question.sample_id, question.category, question.evidence) == (
        "alice",
        "temporal",
        ("m1",),
    )
    assert dataset.evidence.unknown_dropped == 3
    assert dataset.evidence.questions_without_evidence == 1


def test_a_bad_message_line_is_named_by_its_line_and_reason(tmp_path: Path) -> None:
    """The error once showed the Skipped(where=..., reason=...) repr."""
    rows = [{"resource": "a", "thread": "t", "role": "robot", "content": "x"}]
    with pytest.raises(InvalidInputError) as raised:
        read_eval_jsonl(jsonl(tmp_path / "e.jsonl", rows))
    assert str(raised.value).endswith(
        "1 bad message line(s); line 1: 'role' must be one of "
        "user, assistant, system, tool; got 'robot'"
    )


def test_a_question_line_without_evidence_list_is_an_error(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "e.jsonl", [{"question": "q?", "resource": "a", "evidence": "m1"}])
    with pytest.raises(InvalidInputError, match="evidence"):
        read_eval_jsonl(path)


def test_an_empty_question_is_an_error_not_a_miss(tmp_path: Path) -> None:
    """A blank query finds nothing: it was scored as a question recall missed."""
    for blank in ("", "  \n"):
        rows = [
            {"resource": "a", "thread": "t", "role": "user", "id": "m1", "content": "red kite"},
            {"question": blank, "resource": "a", "evidence": ["m1"]},
        ]
        with pytest.raises(InvalidInputError, match=r"line 2: 'question' is empty"):
            read_eval_jsonl(jsonl(tmp_path / "e.jsonl", rows))


def test_a_question_line_with_a_misspelt_key_is_an_error(tmp_path: Path) -> None:
    """A misspelt `category` scored the question under the default category, and nothing said so."""
    line = {"question": "q?", "resource": "alice", "evidence": ["a1"], "categroy": "temporal"}
    path = two_resource_jsonl(tmp_path / "e.jsonl", [line])
    with pytest.raises(InvalidInputError, match=r"line \d+: unknown key 'categroy'; did you"):
        read_eval_jsonl(path)
    notes = {"question_id": "q7", "answer": "a kite", "question_date": "2023-05-01"}
    annotated = two_resource_jsonl(tmp_path / "n.jsonl", [{**line, "categroy": "x", **notes}])
    with pytest.raises(InvalidInputError, match="'categroy'"):
        read_eval_jsonl(annotated)
    del line["categroy"]
    for alias, meant in (("thread_id", "thread"), ("resource_id", "resource")):
        wrong = two_resource_jsonl(tmp_path / "w.jsonl", [{**line, alias: "x"}])
        with pytest.raises(InvalidInputError, match=f"'{alias}'; did you mean '{meant}'"):
            read_eval_jsonl(wrong)
    kept = read_eval_jsonl(two_resource_jsonl(tmp_path / "k.jsonl", [{**line, **notes}]))
    assert len(kept.questions) == 3  # annotations are not misspellings


# --- scoring ---------------------------------------------------------------------------------


def result(
    category: str, evidence: tuple[str, ...], returned: tuple[str, ...], ms: float
) -> QuestionResult:
    return QuestionResult("s", "q", category, evidence, returned, ms)


def test_summary_scores_per_category_and_overall() -> None:
    results = [
        result("a", ("1", "2"), ("1", "9", "8"), 10.0),
        result("a", ("3",), ("3",), 20.0),
        result("b", ("4", "5"), (), 30.0),
        result("b", ("6",), ("7", "6"), 40.0),
    ]
    summary = summarize(results)
    a, b, overall = summary["by_category"]["a"], summary["by_category"]["b"], summary["overall"]
    assert (a["recall"], a["hit_all"], a["hit_any"], a["messages_per_query"]) == (
        0.75,
        0.5,
        1.0,
        2.0,
    )
    assert (b["recall"], b["hit_all"], b["hit_any"]) == (0.5, 0.5, 0.5)
    assert overall["questions"] == 4
    assert overall["recall"] == pytest.approx(0.625)
    assert (overall["latency_p50_ms"], overall["latency_p95_ms"]) == (20.0, 40.0)


def test_evaluate_drives_search_and_reports_dataset_ids(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file)
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        threshold=0.0,  # fake vectors: the calibrated gate is for a real embedder
    )
    load_dataset(memory, dataset, progress=False)
    results = evaluate(memory, dataset, progress=False)
    assert len(results) == len(dataset.questions)
    first = results[0]
    assert first.returned[0] == "D1:1"
    assert all(not i.startswith("conv-") for r in results for i in r.returned)
    assert all(len(r.returned) <= 15 for r in results)
    assert summarize(results)["overall"]["recall"] > 0.5


async def test_aevaluate_matches_evaluate(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file)
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    load_dataset(memory, dataset, progress=False)
    sync = evaluate(memory, dataset, progress=False)
    asynchronous = await aevaluate(memory, dataset, progress=False)
    assert [r.returned for r in asynchronous] == [r.returned for r in sync]


# --- the command -------------------------------------------------------------------------------


@pytest.fixture
def fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "create_embeddings", FakeEmbeddings)
    monkeypatch.setenv("COLUMNS", "100")


def test_foreign_questions_are_asked_of_another_resource(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file)
    asked = foreign_questions(dataset)
    assert [q.question for q in asked] == [q.question for q in dataset.questions]
    assert all(a.sample_id != q.sample_id for a, q in zip(asked, dataset.questions, strict=True))
    assert {q.sample_id for q in small_talk_questions(dataset)} == {"conv-1", "conv-2"}


def test_eval_refuses_missing_files_and_bad_values(
    tmp_path: Path, fake_embedder: None, locomo_file: Path
) -> None:
    assert main(["eval", "locomo", str(tmp_path / "missing.json"), "--no-progress"]) == 3
    assert main(["eval", "locomo", str(locomo_file), "--message-budget", "lots"]) == 2
    for budget in ("0", "off", "-3"):  # 0 read as 'none' (whole windows) ran, unbudgeted
        assert main(["eval", "locomo", str(locomo_file), "--message-budget", budget]) == 2
    assert main(["eval", "locomo", str(locomo_file), "--no-progress", "--keyword-weight", "2"]) == 2


# --- probe lines, the paraphrase set, --foreign, --store, --help -------------------------------


def two_resource_jsonl(path: Path, extra: list[dict[str, Any]]) -> Path:
    """Two resources, one question each, plus `extra` lines."""
    rows: list[dict[str, Any]] = [
        {"resource": "alice", "thread": "a", "role": "user", "id": "a1", "content": "red kite"},
        {"resource": "alice", "thread": "a", "role": "assistant", "id": "a2", "content": "nice"},
        {"resource": "bob", "thread": "b", "role": "user", "id": "b1", "content": "blue boat"},
        {"question": "the red kite?", "resource": "alice", "evidence": ["a1"]},
        {"question": "the blue boat?", "resource": "bob", "evidence": ["b1"]},
    ]
    return jsonl(path, rows + extra)


def test_probe_lines_are_read_and_asked_of_every_resource(tmp_path: Path) -> None:
    path = two_resource_jsonl(
        tmp_path / "p.jsonl",
        [
            {"probe": "thanks!", "kind": "small talk"},
            {"probe": "How do black holes form?", "kind": "off-topic"},
            {"probe": "what is a quasar?", "kind": "off-topic", "resource": "bob"},
        ],
    )
    dataset = read_eval_jsonl(path)
    assert dataset.message_count == 3  # probe lines are not messages
    assert [(p.kind, p.text, p.resource) for p in dataset.probes] == [
        ("small talk", "thanks!", None),
        ("off-topic", "How do black holes form?", None),
        ("off-topic", "what is a quasar?", "bob"),
    ]
    asked = dataset_probes(dataset)
    assert [(q.sample_id, q.question) for q in asked["small talk"]] == [
        ("alice", "thanks!"),
        ("bob", "thanks!"),
    ]
    assert [q.sample_id for q in asked["off-topic"]] == ["alice", "bob", "bob"]
    assert all(q.evidence == () and q.thread_id == QUERY_THREAD for q in asked["off-topic"])


def test_a_thread_a_line_names_is_asked_in_only_by_its_own_resource(tmp_path: Path) -> None:
    """A question's or probe's `thread` belongs to one resource: asked of another (--foreign,
    a probe without a resource) it named a thread that resource does not own, and the
    search refused it after the whole load. Others are asked in a new thread."""
    path = two_resource_jsonl(
        tmp_path / "t.jsonl",
        [
            {"question": "the kite again?", "resource": "alice", "evidence": ["a1"], "thread": "a"},
            {"probe": "thanks!", "kind": "small talk", "thread": "a"},
        ],
    )
    dataset = read_eval_jsonl(path)
    foreign = {(q.question, q.sample_id): q.thread_id for q in foreign_questions(dataset)}
    assert foreign[("the kite again?", "bob")] == QUERY_THREAD
    probes = {(q.sample_id, q.thread_id) for q in dataset_probes(dataset)["small talk"]}
    assert probes == {("alice", "a"), ("bob", QUERY_THREAD)}
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    load_dataset(memory, dataset, progress=False)
    asked = [*foreign_questions(dataset), *dataset_probes(dataset)["small talk"]]
    for question in asked:  # none is refused as another resource's thread
        memory.search(
            question.question, thread_id=question.thread_id, resource_id=question.sample_id
        )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"probe": "thanks!"}, "needs a 'kind'"),
        ({"probe": "", "kind": "small talk"}, "'probe' must be the text"),
        ({"probe": "hi", "kind": "small talk", "resource": "carol"}, "no message"),
        (
            {"probe": "hi", "kind": "small talk", "resorce": "alice"},
            "'resorce'; did you mean 'resource'",
        ),
    ],
)
def test_a_bad_probe_line_is_an_error(tmp_path: Path, line: dict[str, Any], message: str) -> None:
    path = two_resource_jsonl(tmp_path / "bad.jsonl", [line])
    with pytest.raises(InvalidInputError, match=message):
        read_eval_jsonl(path)


def paraphrase_set(folder: Path) -> Path:
    """A tiny set in the paraphrase set's format: 2 personas, direct and indirect."""
    folder.mkdir()
    facts = [
        ("x-p1-01", "p1", "I am allergic to peanuts", "Noted.", "peanuts allergic?", ["peanuts"]),
        (
            "x-p1-02",
            "p1",
            "My sister Ada lives in Oslo",
            "Lovely.",
            "where does Ada live?",
            ["oslo"],
        ),
        ("x-p2-01", "p2", "I drive a green Volvo", "Classic.", "what car, green one?", ["volvo"]),
        ("x-p2-02", "p2", "I play the cello", "Fun.", "suggest a hobby gift", ["cello"]),
    ]
    kinds = ["direct", "direct", "direct", "indirect"]
    jsonl(
        folder / "paraphrase_dev.jsonl",
        [
            {
                "id": i,
                "persona": persona,
                "fact": fact,
                "reply": reply,
                "question": question,
                "answer_terms": terms,
                "kind": kind,
            }
            for (i, persona, fact, reply, question, terms), kind in zip(facts, kinds, strict=True)
        ],
    )
    jsonl(folder / "smalltalk_dev.jsonl", [{"text": "thanks!"}, {"text": "good morning"}])
    jsonl(folder / "offtopic_dev.jsonl", [{"text": "How do black holes form?"}])
    return folder


def test_the_paraphrase_set_maps_personas_facts_and_probes(tmp_path: Path) -> None:
    dataset = read_paraphrase(paraphrase_set(tmp_path / "para"))
    assert dataset.resources == ["p1", "p2"]
    first = dataset.conversations[0]
    assert (first.resource_id, first.thread_id) == ("p1", "x-p1-01")
    assert [type(m) for m in first.messages] == [HumanMessage, AIMessage]
    assert [m.id for m in first.messages] == ["x-p1-01/fact", "x-p1-01/reply"]
    question = dataset.questions[0]
    assert (question.sample_id, question.category, question.thread_id) == (
        "p1",
        "direct",
        QUERY_THREAD,
    )
    assert (question.evidence, question.answer_terms) == (("x-p1-01/fact",), ("peanuts",))
    assert [(p.kind, p.text) for p in dataset.probes] == [
        ("small talk", "thanks!"),
        ("small talk", "good morning"),
        ("off-topic", "How do black holes form?"),
    ]


def test_a_paraphrase_set_without_its_files_is_reported(tmp_path: Path) -> None:
    folder = paraphrase_set(tmp_path / "para")
    (folder / "offtopic_dev.jsonl").unlink()
    with pytest.raises(InvalidInputError, match=r"offtopic_dev\.jsonl"):
        read_paraphrase(folder)


def test_found_is_an_answer_term_as_a_word_of_the_returned_text() -> None:
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        threshold=0.0,
    )
    messages: list[Any] = [HumanMessage("My friend ADA moved to Oslo", id="f1")]
    messages.append(HumanMessage("Adam likes canada", id="f2"))
    dataset = Dataset(
        conversations=[EvalConversation("p", "t", messages)],
        questions=[
            EvalQuestion("p", "friend moved", "direct", ("f1",), answer_terms=("ada",)),
            EvalQuestion("p", "Adam likes", "direct", ("f2",), answer_terms=("ada", "nad")),
        ],
    )
    load_dataset(memory, dataset, progress=False)
    memory = memory.with_options(top_k=1, message_range=0)
    first, second = evaluate(memory, dataset, progress=False)
    assert (first.returned, first.answered) == (("f1",), True)  # any case, a whole word
    assert (second.returned, second.answered) == (("f2",), False)  # "Adam", "canada": no
    assert summarize([first, second])["overall"]["found"] == 0.5


def big_locomo(path: Path, samples: int, turns: int) -> Path:
    """LoCoMo-shaped conversations of 3 sessions of `turns` turns each, no questions."""
    data = []
    for n in range(samples):
        conversation: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Ben"}
        for s in (1, 2, 3):
            conversation[f"session_{s}_date_time"] = f"1:56 pm on {s} May, 2023"
            conversation[f"session_{s}"] = [
                {"speaker": "Ann" if t % 2 else "Ben", "dia_id": f"D{s}:{t}", "text": f"chat {t}"}
                for t in range(1, turns + 1)
            ]
        data.append({"sample_id": f"conv-{n}", "conversation": conversation, "qa": []})
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_busy_adds_locomo_sessions_to_each_persona_deterministically(tmp_path: Path) -> None:
    locomo = big_locomo(tmp_path / "busy.json", samples=3, turns=4)
    dataset = read_paraphrase(paraphrase_set(tmp_path / "para"))
    chosen = add_busy(dataset, locomo, messages=10)
    # of 2 personas, persona i takes sessions i, i + 2, i + 4, ... until >= 10 messages:
    # the busy store of benchmarks/quality_relevance.py, whose figures docs/quality.md gives
    assert chosen == {
        "p1": ["conv-0/session_1", "conv-0/session_3", "conv-1/session_2"],
        "p2": ["conv-0/session_2", "conv-1/session_1", "conv-1/session_3"],
    }
    busy = [c for c in dataset.conversations if c.thread_id.startswith("busy/")]
    assert [c.resource_id for c in busy] == ["p1"] * 3 + ["p2"] * 3
    assert busy[0].thread_id == "busy/p1/conv-0/session_1"
    assert busy[0].messages[0].id == "busy/p1/conv-0:D1:1"
    assert add_busy(read_paraphrase(tmp_path / "para"), locomo, messages=10) == chosen
    with pytest.raises(InvalidInputError, match="fewer than"):
        add_busy(dataset, locomo, messages=1000)


def test_busy_defaults_to_the_benchmarks_busy_store(tmp_path: Path) -> None:
    locomo = big_locomo(tmp_path / "busy.json", samples=2, turns=110)  # 6 sessions of 110
    chosen = add_busy(read_paraphrase(paraphrase_set(tmp_path / "para")), locomo)
    assert BUSY_MESSAGES == 330  # benchmarks/quality_relevance.py's busy store
    assert chosen == {
        "p1": ["conv-0/session_1", "conv-0/session_3", "conv-1/session_2"],
        "p2": ["conv-0/session_2", "conv-1/session_1", "conv-1/session_3"],
    }


def test_eval_foreign_refuses_data_with_one_resource(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jsonl(
        tmp_path / "one.jsonl",
        [
            {"resource": "alice", "thread": "t", "role": "user", "id": "m1", "content": "red kite"},
            {"question": "the red kite?", "resource": "alice", "evidence": ["m1"]},
        ],
    )
    assert main(["eval", "jsonl", str(path), "--no-progress", "--foreign"]) == 2
    error = capsys.readouterr().err
    assert "--foreign" in error
    assert "alice" in error
    assert "Loading" not in capsys.readouterr().out  # refused before loading anything


def test_eval_refuses_options_its_format_does_not_use(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = two_resource_jsonl(tmp_path / "mine.jsonl", [])
    folder = paraphrase_set(tmp_path / "para")
    assert main(["eval", "jsonl", str(mine), "--include-adversarial"]) == 2
    assert "--include-adversarial is for LoCoMo" in capsys.readouterr().err
    assert main(["eval", "paraphrase", str(folder), "--scope", "thread"]) == 2
    # Its personas tell the same kinds of thing: another's question has true answers.
    assert main(["eval", "paraphrase", str(folder), "--foreign"]) == 2
    assert "counted as false memories; drop --foreign" in capsys.readouterr().err
    assert main(["eval", "paraphrase", str(tmp_path / "missing")]) == 3
    (tmp_path / "empty").mkdir()  # a folder without the set's file: not found, as the docs say
    assert main(["eval", "paraphrase", str(tmp_path / "empty")]) == 3
    assert "no paraphrase_dev.jsonl in the paraphrase set" in capsys.readouterr().err
    assert main(["eval", "paraphrase", str(folder), "--busy", str(tmp_path / "no.json")]) == 3
    assert "Loading" not in capsys.readouterr().out


def _help_default(text: str, option: str) -> str:
    """What `option`'s help (not the usage line) says in `(default: ...)`, on one line."""
    entry = " ".join(text.split(f"\n  {option}", 1)[1].split())
    return entry.split("(default: ", 1)[1].split(")", 1)[0]


def test_eval_help_prints_the_engines_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--help"]) == 0
    text = capsys.readouterr().out
    engines = {
        mode: SemanticRecall(
            storage=InMemoryStorage(),
            vector_store=InMemoryVectorIndex(),
            embeddings=FakeEmbeddings(),
            search_mode=mode,
        )
        for mode in ("hybrid", "keyword", "dense")
    }

    def by_mode(read: Any) -> str:
        shown = [(mode, read(engine)) for mode, engine in engines.items()]
        return ", ".join(f"{m} {'none' if v is None else v}" for m, v in shown)

    hybrid = engines["hybrid"]
    assert _help_default(text, "--top-k TOP_K") == by_mode(lambda e: e.top_k)
    assert _help_default(text, "--before BEFORE") == by_mode(lambda e: e.message_range.before)
    assert _help_default(text, "--after AFTER") == by_mode(lambda e: e.message_range.after)
    assert _help_default(text, "--message-budget N|none") == by_mode(lambda e: e.message_budget)
    assert _help_default(text, "--time-boost") == str(hybrid.time_boost)
    shown = _help_default(text, "--threshold THRESHOLD")  # None: said with what it means
    assert shown == str(hybrid.threshold) or (hybrid.threshold is None and shown.startswith("none"))
    assert hybrid.threshold == default_threshold()
    dense = " ".join(text.split()).split("cosine similarity in dense mode (default: ")[1]
    assert dense.startswith(f"{engines['dense'].threshold or 'none'})")
    assert f"(default: {DEFAULT_SEARCH_MODE}, which is hybrid" in " ".join(text.split())
    assert engines["hybrid"].with_options(search_mode=DEFAULT_SEARCH_MODE).search_mode == "hybrid"
    assert _help_default(text, "--scope") == SemanticRecall.__init__.__kwdefaults__["scope"]


def test_probes_are_read_from_a_file_of_probe_lines_or_the_paraphrase_sets_folder(
    tmp_path: Path,
) -> None:
    folder = paraphrase_set(tmp_path / "para")
    assert [(p.kind, p.text) for p in read_probes(folder, ["p1"])] == [
        ("small talk", "thanks!"),
        ("small talk", "good morning"),
        ("off-topic", "How do black holes form?"),
    ]
    lines = [{"probe": "hmm", "kind": "filler"}, {"probe": "ok", "kind": "x", "resource": "a"}]
    path = jsonl(tmp_path / "probes.jsonl", lines)
    assert [(p.kind, p.text, p.resource) for p in read_probes(path, ["a", "b"])] == [
        ("filler", "hmm", None),
        ("x", "ok", "a"),
    ]
    with pytest.raises(InvalidInputError, match="no message"):
        read_probes(path, ["b"])  # the line names a resource the dataset does not hold
    message = jsonl(tmp_path / "message.jsonl", [{"resource": "a", "thread": "t", "role": "user"}])
    with pytest.raises(InvalidInputError, match="line 1: expected a probe line"):
        read_probes(message, ["a"])  # a message line is not silently skipped


def test_eval_probes_option_is_checked_before_loading(
    locomo_file: Path, tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--probes"]
    assert main([*argv, str(tmp_path / "missing")]) == 3
    bad = jsonl(tmp_path / "bad.jsonl", [{"probe": "hi"}])  # no kind
    assert main([*argv, str(bad)]) == 1
    assert "needs a 'kind'" in capsys.readouterr().err


def test_the_keyword_fingerprint_changes_with_the_keyword_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`eval --store` refuses a store whose keyword index holds other terms: the fingerprint
    must move when tokenizing does (here: CJK runs as one term, as before pairs)."""
    from langchain_semantic_recall import keywords
    from langchain_semantic_recall.cli.eval_store import keywords_fingerprint

    now = keywords_fingerprint()
    assert keywords_fingerprint() == now
    monkeypatch.setattr(keywords, "tokenize", lambda text: text.casefold().split())
    assert keywords_fingerprint() != now


@pytest.mark.parametrize(
    "line",
    [
        '{"question": "When do we land?", "resource": "alice", "evidence": ["m1"]',
        '{"probe": "thanks!", "kind": "small talk",}',
    ],
)
def test_a_question_or_probe_line_that_is_not_json_is_named_by_its_line(
    tmp_path: Path, line: str, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """It once ended as "internal error (JSONDecodeError ...)", with no line number."""
    path = two_resource_jsonl(tmp_path / "e.jsonl", [])
    path.write_text(path.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"line 6: not JSON \("):
        read_eval_jsonl(path)
    assert main(["eval", "jsonl", str(path), "--no-progress"]) == 1
    error = capsys.readouterr().err
    assert "line 6: not JSON" in error
    assert "internal error" not in error


def test_eval_refuses_what_a_dataset_without_questions_or_messages_leaves_empty(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A probe line with no message, or --small-talk / --folds with no question, once gave
    an empty report and exit code 0."""
    probe = {"probe": "thanks!", "kind": "small talk"}
    alone = jsonl(tmp_path / "alone.jsonl", [probe])
    assert main(["eval", "jsonl", str(alone), "--no-progress"]) == 1  # a bad input file
    assert "no message" in capsys.readouterr().err
    message = {"resource": "a", "thread": "t", "role": "user", "id": "m1", "content": "red kite"}
    probes_only = jsonl(tmp_path / "probes.jsonl", [message, probe])
    for option in ("--small-talk", "--folds"):
        assert main(["eval", "jsonl", str(probes_only), "--no-progress", option]) == 2
        captured = capsys.readouterr()
        assert option in captured.err
        assert "Loading" not in captured.out  # refused before loading anything


def test_eval_checks_json_out_before_loading(
    tmp_path: Path, fake_embedder: None, locomo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --json-out in a missing folder failed only after loading and asking everything
    (10 minutes on LongMemEval), losing the run."""
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--json-out"]
    assert main([*argv, str(tmp_path / "missing" / "out.json")]) == 2
    captured = capsys.readouterr()
    assert "--json-out" in captured.err
    assert "missing" in captured.err
    assert "Loading" not in captured.out
    assert main([*argv, str(tmp_path)]) == 2  # a folder
    captured = capsys.readouterr()
    assert "is a folder" in captured.err
    assert "Loading" not in captured.out


@pytest.mark.parametrize("evidence", ["D1:1", None, 7])
def test_locomo_evidence_that_is_not_a_list_is_an_input_error(
    tmp_path: Path, evidence: object
) -> None:
    """A string was read letter by letter ("D1:1": 4 entries dropped as not ids, the
    question skipped as without evidence), None ended as "TypeError: 'NoneType' ...")."""
    sample = locomo_sample("c", "A", "B", "golf")
    sample["qa"][0]["evidence"] = evidence
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    with pytest.raises(InvalidInputError) as raised:
        read_locomo(path)
    assert str(raised.value) == (
        f"{path}: sample #1, question 1: 'evidence' must be a list of dia_ids, got {evidence!r}"
    )


def test_our_jsonl_is_read_in_the_encodings_ingest_reads(tmp_path: Path) -> None:
    """UTF-16 (with its byte order mark), read by `ingest`, was an error naming no file
    ("a file is not UTF-8 text"); a question on the first line after a UTF-8 byte order
    mark was taken for a message line."""
    path = two_resource_jsonl(tmp_path / "e.jsonl", [])
    lines = path.read_text(encoding="utf-8").splitlines()
    text = "\n".join([lines[3], *lines[:3], lines[4]]) + "\n"  # a question first
    for encoding in ("utf-16", "utf-8-sig"):
        path.write_text(text, encoding=encoding)
        dataset = read_eval_jsonl(path)
        assert [q.question for q in dataset.questions] == ["the red kite?", "the blue boat?"]
        assert dataset.message_count == 3
    path.write_bytes(text.replace("red", "r\u00e9d").encode("latin-1"))
    with pytest.raises(InvalidInputError, match=rf"^{re.escape(str(path))} is not UTF-8 text"):
        read_eval_jsonl(path)


def test_a_bad_message_line_after_question_lines_is_named_by_its_own_line(
    tmp_path: Path,
) -> None:
    """The question and probe lines were taken out before the importer counted lines, so a
    bad message line after them was named by a line number too small."""
    rows: list[dict[str, Any]] = [
        {"probe": "thanks!", "kind": "small talk"},
        {"resource": "a", "thread": "t", "role": "user", "id": "m1", "content": "red kite"},
        {"question": "the red kite?", "resource": "a", "evidence": ["m1"]},
        {"resource": "a", "thread": "t", "role": "robot", "content": "x"},
    ]
    with pytest.raises(InvalidInputError, match=r"; line 4: 'role' must be one of"):
        read_eval_jsonl(jsonl(tmp_path / "e.jsonl", rows))


def test_eval_says_why_no_question_has_evidence(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Questions whose evidence names no message were refused as if there were none."""
    rows: list[dict[str, Any]] = [
        {"resource": "a", "thread": "t", "role": "user", "id": "m1", "content": "red kite"},
        {"question": "the red kite?", "resource": "a", "evidence": ["m9"]},
    ]
    assert main(["eval", "jsonl", str(jsonl(tmp_path / "e.jsonl", rows)), "--no-progress"]) == 1
    error = capsys.readouterr().err
    assert "1 question(s) skipped: no evidence id of theirs names a message" in error
    assert "'m9' dropped (no such message)" in error


def test_json_out_may_not_replace_the_dataset_the_probes_or_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json-out data.jsonl` replaced the dataset with the report, and a report written
    into `--store` made the next run refuse the store (a manifest-less folder)."""
    data = two_resource_jsonl(tmp_path / "data.jsonl", [])
    probes = jsonl(tmp_path / "probes.jsonl", [{"probe": "thanks!", "kind": "small talk"}])
    before = data.read_bytes()
    store = tmp_path / "store"
    store.mkdir()
    for out, extra in [
        (data, []),
        (probes, ["--probes", str(probes)]),
        (store / "report.json", ["--store", str(store)]),
    ]:
        argv = ["eval", "jsonl", str(data), "--no-progress", "--json-out", str(out), *extra]
        assert main(argv) == 2
        assert "--json-out" in capsys.readouterr().err
    assert data.read_bytes() == before
    assert list(store.iterdir()) == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"question": "kite?", "resource": "Alice", "evidence": ["a1"]}, "'Alice' holds no"),
        ({"question": "kite?", "resource": "carol", "evidence": []}, "'carol' holds no"),
        (
            {"question": "kite?", "resource": "alice", "evidence": ["a1"], "thread": "b"},
            "thread 'b' is a conversation of 'bob'",
        ),
    ],
)
def test_a_question_line_for_no_resource_or_in_anothers_thread_is_refused(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    """A misspelt resource was skipped as "no such message" (exit 0, two thirds of the
    questions gone), and a thread of another resource failed only after the whole load."""
    path = two_resource_jsonl(tmp_path / "bad.jsonl", [line])
    with pytest.raises(InvalidInputError, match=message):
        read_eval_jsonl(path)


def test_evidence_of_another_resource_is_dropped_as_such(tmp_path: Path) -> None:
    path = two_resource_jsonl(
        tmp_path / "x.jsonl", [{"question": "boat?", "resource": "alice", "evidence": ["b1", "a1"]}]
    )
    report = read_eval_jsonl(path).evidence
    assert report.unknown_dropped == 1
    assert any("'b1' dropped (a message of 'bob')" in example for example in report.examples)


def test_the_header_names_a_threshold_and_the_time_boost() -> None:
    """`--threshold 0.99` scored 0.375 against the defaults' 1.000 under the same header."""
    from langchain_semantic_recall.cli.eval import _header

    settings: dict[str, Any] = {
        "search_mode": "hybrid",
        "top_k": 20,
        "before": 2,
        "after": 3,
        "message_budget": 15,
        "scope": "resource",
        "threshold": None,
        "time_boost": 0.5,
    }
    assert "threshold" not in _header(4, settings)
    assert "time boost 0.5" in _header(4, settings)
    tuned = _header(4, {**settings, "threshold": 0.99, "time_boost": 0.0})
    assert "threshold 0.99" in tuned
    assert "time boost 0.0" in tuned
    assert "time boost" not in _header(4, {**settings, "time_boost": None})  # dense mode


def test_probe_and_locomo_files_with_a_byte_order_mark_are_read(
    tmp_path: Path, locomo_file: Path
) -> None:
    """The eval jsonl dataset took a UTF-8 byte order mark (as ingest does); a --probes
    file, the paraphrase set's files and a LoCoMo file were refused for it."""
    probes = tmp_path / "probes.jsonl"
    probes.write_bytes(b"\xef\xbb\xbf" + b'{"probe": "thanks!", "kind": "small talk"}\n')
    assert [p.text for p in read_probes(probes, ["alice"])] == ["thanks!"]
    marked = tmp_path / "locomo.json"
    marked.write_bytes(b"\xef\xbb\xbf" + locomo_file.read_bytes())
    assert read_locomo(marked).questions == read_locomo(locomo_file).questions


def test_a_message_id_two_threads_share_is_refused_before_loading(tmp_path: Path) -> None:
    """The load stopped at the second thread, minutes in, and left --store half loaded."""
    path = two_resource_jsonl(
        tmp_path / "dup.jsonl",
        [{"resource": "bob", "thread": "b", "role": "user", "id": "a1", "content": "again"}],
    )
    with pytest.raises(InvalidInputError, match=r"'a1' is in threads 'a' and 'b'"):
        read_eval_jsonl(path)


def test_a_dataset_with_nothing_to_ask_is_a_bad_input_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1, as `ingest` of a file that yields nothing and `eval locomo` of an empty
    file: it exited 2 (a usage error), which says the arguments were wrong."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    assert main(["eval", "jsonl", str(empty), "--no-progress"]) == 1
    assert "no question with evidence" in capsys.readouterr().err
    probes_only = jsonl(tmp_path / "p.jsonl", [{"probe": "thanks!", "kind": "small talk"}])
    assert main(["eval", "jsonl", str(probes_only), "--no-progress"]) == 1
    assert "holds no message" in capsys.readouterr().err


def test_a_probe_for_a_resource_in_anothers_thread_is_refused_as_a_question_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was asked in a new thread instead, silently, where the same question line is
    refused: one fault, two behaviours."""
    probe = {"probe": "How do black holes form?", "kind": "x", "resource": "bob", "thread": "a"}
    path = two_resource_jsonl(tmp_path / "p.jsonl", [probe])
    assert main(["eval", "jsonl", str(path), "--no-progress"]) == 1
    assert "thread 'a', a conversation of 'alice'" in capsys.readouterr().err


def test_the_thread_eval_asks_in_is_refused_as_a_dataset_thread(tmp_path: Path) -> None:
    """A dataset whose messages use it was refused for questions that name no thread,
    as if they had named one of another resource."""
    path = two_resource_jsonl(
        tmp_path / "q.jsonl",
        [{"resource": "bob", "thread": QUERY_THREAD, "role": "user", "content": "hi"}],
    )
    with pytest.raises(InvalidInputError, match="eval asks a question in when it names none"):
        read_eval_jsonl(path)
