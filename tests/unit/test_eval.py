"""The evaluation: datasets, scoring, and a smoke run of ``semantic-recall eval``.

Every dataset here is a tiny synthetic file written to a temporary folder (LoCoMo itself
is evaluation data, never a fixture).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, InvalidInputError, SemanticRecall
from langchain_semantic_recall.cli import common, main
from langchain_semantic_recall.evaluation import (
    QUERY_THREAD,
    EvidenceReport,
    QuestionResult,
    aevaluate,
    evaluate,
    load_dataset,
    normalise_evidence,
    read_eval_jsonl,
    read_locomo,
    summarize,
)
from langchain_semantic_recall.false_memory import (
    SMALL_TALK,
    foreign_questions,
    small_talk_questions,
)
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


def test_a_question_line_without_evidence_list_is_an_error(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "e.jsonl", [{"question": "q?", "resource": "a", "evidence": "m1"}])
    with pytest.raises(InvalidInputError, match="evidence"):
        read_eval_jsonl(path)


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


def test_eval_draws_no_progress_bars_into_a_file(
    locomo_file: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "locomo", str(locomo_file)]) == 0  # stderr is captured: no terminal
    assert "querying" not in capsys.readouterr().err


def test_eval_locomo_smoke_run_writes_a_rescorable_report(
    locomo_file: Path,
    tmp_path: Path,
    fake_embedder: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "report.json"
    code = main(["eval", "locomo", str(locomo_file), "--no-progress", "--json-out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    for text in (
        "4 single-hop",
        "overall",
        "recall",
        "hit_all",
        "msgs/q",
        "p95 ms",
        "evidence ids",
    ):
        assert text in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["settings"]["search_mode"] == "hybrid"
    assert report["settings"]["message_budget"] == 15
    assert set(report["summary"]) >= {"by_category", "overall", "evidence"}
    rows = report["questions"]
    assert {"sample_id", "question", "category", "evidence", "returned"} <= set(rows[0])
    rescored = sum(len(set(r["evidence"]) & set(r["returned"])) / len(r["evidence"]) for r in rows)
    assert rescored / len(rows) == pytest.approx(report["summary"]["overall"]["recall"])


def test_eval_reports_false_memories_and_folds(
    locomo_file: Path,
    tmp_path: Path,
    fake_embedder: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "false.json"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--json-out", str(out)]
    assert main([*argv, "--foreign", "--small-talk", "--folds"]) == 0
    printed = capsys.readouterr().out
    assert "false memories, foreign" in printed
    assert "false memories, small talk" in printed
    assert "per conversation (fold)" in printed
    summary = json.loads(out.read_text(encoding="utf-8"))["summary"]
    questions = summary["overall"]["questions"]
    foreign = summary["false_memories"]["foreign"]
    assert foreign["overall"]["questions"] == questions  # every question, asked elsewhere
    assert set(foreign["by_resource"]) == {"conv-1", "conv-2"}
    assert 0 <= foreign["overall"]["messages_per_query"] <= 15
    talk = summary["false_memories"]["small talk"]
    assert talk["overall"]["questions"] == 2 * len(SMALL_TALK)
    assert talk["overall"]["messages_per_query"] < 1  # all but one have no content term
    assert set(summary["by_resource"]) == {"conv-1", "conv-2"}


def test_foreign_questions_are_asked_of_another_resource(locomo_file: Path) -> None:
    dataset = read_locomo(locomo_file)
    asked = foreign_questions(dataset)
    assert [q.question for q in asked] == [q.question for q in dataset.questions]
    assert all(a.sample_id != q.sample_id for a, q in zip(asked, dataset.questions, strict=True))
    assert {q.sample_id for q in small_talk_questions(dataset)} == {"conv-1", "conv-2"}


def test_eval_options_reach_the_engine(
    locomo_file: Path, tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dense.json"
    argv = [
        "eval",
        "locomo",
        str(locomo_file),
        "--no-progress",
        "--json-out",
        str(out),
        "--search-mode",
        "dense",
        "--top-k",
        "2",
        "--after",
        "0",
        "--message-budget",
        "none",
        "--include-adversarial",
    ]
    assert main(argv) == 0
    settings = json.loads(out.read_text(encoding="utf-8"))["settings"]
    assert (settings["search_mode"], settings["top_k"], settings["before"], settings["after"]) == (
        "dense",
        2,
        1,
        0,
    )
    assert settings["message_budget"] is None
    assert "5 adversarial" in capsys.readouterr().out


def test_eval_in_thread_scope_asks_inside_each_conversation(
    locomo_file: Path, tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "thread.json"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--scope", "thread"]
    argv += ["--threshold", "0"]  # fake vectors: the calibrated gate is for a real embedder
    assert main([*argv, "--json-out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["settings"]["scope"] == "thread"
    assert report["summary"]["overall"]["recall"] > 0.5
    assert "overall" in capsys.readouterr().out


def test_eval_jsonl_smoke_run(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jsonl(
        tmp_path / "mine.jsonl",
        [
            {"resource": "alice", "thread": "t", "role": "user", "id": "m1", "content": "red kite"},
            {"resource": "alice", "thread": "t", "role": "assistant", "id": "m2", "content": "ok"},
            {"question": "the red kite?", "resource": "alice", "evidence": ["m1"]},
        ],
    )
    assert main(["eval", "jsonl", str(path), "--no-progress"]) == 0
    assert "all" in capsys.readouterr().out


def test_eval_refuses_missing_files_and_bad_values(
    tmp_path: Path, fake_embedder: None, locomo_file: Path
) -> None:
    assert main(["eval", "locomo", str(tmp_path / "missing.json"), "--no-progress"]) == 3
    assert main(["eval", "locomo", str(locomo_file), "--message-budget", "lots"]) == 2
    assert main(["eval", "locomo", str(locomo_file), "--no-progress", "--keyword-weight", "2"]) == 2


# --- the quality benchmarks run (tiny synthetic data, the real local model) -------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "marker"),
    [
        ("quality_locomo.py", "trade-off curve"),
        ("quality_sweep.py", "trade-off curve"),
        ("quality_cv.py", "leave-one-conversation-out"),
        ("quality_small.py", "small-talk turns"),
    ],
)
def test_quality_benchmarks_smoke(
    script: str, marker: str, locomo_file: Path, tmp_path: Path
) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    cached = {"quality_sweep.py", "quality_cv.py"}
    extra = ["--cache", str(tmp_path / "cache.pkl")] if script in cached else []
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / script), str(locomo_file), *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker in done.stdout
