"""`semantic-recall eval` on real stores (embedded Chroma); the benchmarks' smoke runs.

tests/unit/test_eval.py has the dataset readers and the scoring.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from langchain_semantic_recall.cli import common, main
from langchain_semantic_recall.cli.eval_store import EMBEDDER_PROBE, MANIFEST
from langchain_semantic_recall.evaluation import (
    read_locomo,
)
from langchain_semantic_recall.false_memory import (
    SMALL_TALK,
)
from langchain_semantic_recall.relevance import reference
from tests.fakes import FakeEmbeddings
from tests.unit import test_eval as unit
from tests.unit.test_eval import big_locomo, jsonl, paraphrase_set, two_resource_jsonl

# The fixtures of tests/unit/test_eval.py, the same here.
locomo_file = unit.locomo_file
fake_embedder = unit.fake_embedder


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
            {"question": "a kite?", "resource": "alice", "evidence": ["m1"], "category": "overall"},
        ],
    )
    assert main(["eval", "jsonl", str(path), "--no-progress"]) == 0
    # A line without a category was "all", beside the total's "overall"; a category named
    # "overall" printed a second "overall" row (an audit).
    rows = [line.split()[0:2] for line in capsys.readouterr().out.splitlines() if line]
    assert ["uncategorized", "1"] in rows
    assert ["overall", "(category)"] in rows
    assert ["overall", "2"] in rows


def test_eval_jsonl_reports_probe_lines_per_kind(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = two_resource_jsonl(
        tmp_path / "p.jsonl",
        [
            {"probe": "thanks!", "kind": "small talk"},
            {"probe": "good morning", "kind": "small talk"},
            {"probe": "the red kite?", "kind": "off-topic"},  # alice holds it: a false memory
        ],
    )
    out = tmp_path / "probes.json"
    argv = ["eval", "jsonl", str(path), "--no-progress", "--threshold", "0"]
    assert main([*argv, "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "false memories, small talk" in printed
    assert "false memories, off-topic" in printed
    probes = json.loads(out.read_text(encoding="utf-8"))["summary"]["false_memories"]
    talk, off = probes["small talk"], probes["off-topic"]
    assert talk["overall"]["questions"] == 4  # 2 lines x 2 resources
    assert set(talk["by_category"]) == {"dataset"}
    assert set(talk["by_resource"]) == {"alice", "bob"}
    assert off["overall"]["questions"] == 2
    assert off["by_resource"]["alice"]["any"] == 1.0


def test_eval_paraphrase_reports_found_per_kind_and_probes(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = paraphrase_set(tmp_path / "para")
    out = tmp_path / "para.json"
    argv = ["eval", "paraphrase", str(folder), "--no-progress", "--threshold", "0"]
    assert main([*argv, "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "found" in printed
    assert "false memories, small talk" in printed
    assert "false memories, off-topic" in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    by_kind = report["summary"]["by_category"]
    assert by_kind["direct"]["found"] == 1.0  # the three direct questions share a word
    assert by_kind["indirect"]["questions"] == 1
    assert {r["question"]: r["found"] for r in report["questions"]}["where does Ada live?"]
    probes = report["summary"]["false_memories"]
    assert probes["small talk"]["overall"]["questions"] == 4  # 2 lines x 2 personas
    assert probes["off-topic"]["overall"]["questions"] == 2


def test_eval_probes_asks_the_paraphrase_sets_lines_of_any_dataset(
    locomo_file: Path, tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/quality.md's small-talk and off-topic rows on LoCoMo: `eval locomo --probes`."""
    folder = paraphrase_set(tmp_path / "para")
    out = tmp_path / "locomo.json"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--probes", str(folder)]
    assert main([*argv, "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "false memories, small talk" in printed
    assert "false memories, off-topic" in printed
    probes = json.loads(out.read_text(encoding="utf-8"))["summary"]["false_memories"]
    assert probes["small talk"]["overall"]["questions"] == 4  # 2 lines x 2 conversations
    assert set(probes["off-topic"]["by_resource"]) == {"conv-1", "conv-2"}


def test_eval_paraphrase_busy_puts_at_least_330_messages_in_each_persona(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    locomo = big_locomo(tmp_path / "busy.json", samples=2, turns=110)
    folder = paraphrase_set(tmp_path / "para")
    argv = ["eval", "paraphrase", str(folder), "--no-progress", "--busy", str(locomo)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Loading 668 messages" in printed  # 8 of the set + 2 x 330 of LoCoMo
    assert "p1: 3 sessions, conv-0/session_1 to conv-1/session_2" in printed
    assert main(["eval", "jsonl", str(locomo), "--busy", str(locomo)]) == 2


def recording_embedder(monkeypatch: pytest.MonkeyPatch) -> FakeEmbeddings:
    embedder = FakeEmbeddings()
    monkeypatch.setattr(common, "create_embeddings", lambda: embedder)
    return embedder


def test_eval_store_is_reused_without_embedding_the_messages_again(
    locomo_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    embedder = recording_embedder(monkeypatch)
    store = tmp_path / "store"
    out = tmp_path / "first.json"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--store", str(store)]
    assert main([*argv, "--json-out", str(out)]) == 0
    first = json.loads(out.read_text(encoding="utf-8"))
    stored = {m.content for c in read_locomo(locomo_file).conversations for m in c.messages}
    assert stored <= {text for call in embedder.calls for text in call}
    embedder.calls.clear()
    capsys.readouterr()
    assert main([*argv, "--json-out", str(out)]) == 0
    assert "Reusing" in capsys.readouterr().out
    embedded = {text for call in embedder.calls for text in call}
    questions = {q.question for q in read_locomo(locomo_file).questions}
    reference_texts = {*reference.UNRELATED, *reference.SMALL_TALK}
    assert embedded <= questions | reference_texts | {EMBEDDER_PROBE}  # + which embedder
    again = json.loads(out.read_text(encoding="utf-8"))
    assert [r["returned"] for r in again["questions"]] == [
        r["returned"] for r in first["questions"]
    ]
    assert again["summary"]["load_seconds"] is None


def test_eval_store_refuses_another_dataset_or_an_unknown_folder(
    locomo_file: Path,
    tmp_path: Path,
    fake_embedder: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = tmp_path / "store"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--store", str(store)]
    assert main(argv) == 0
    before = sorted(p.name for p in store.iterdir())
    capsys.readouterr()
    assert main([*argv, "--scope", "thread"]) == 2  # the same file, other threads
    refused = capsys.readouterr().err
    assert "holds 10 messages of locomo" in refused
    # What differs is named: both halves read alike but for a hash (an audit).
    assert "for --scope resource (sha256" in refused
    assert "for --scope thread (sha256" in refused
    other = two_resource_jsonl(tmp_path / "other.jsonl", [])
    assert main(["eval", "jsonl", str(other), "--no-progress", "--store", str(store)]) == 2
    assert sorted(p.name for p in store.iterdir()) == before
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "notes.txt").write_text("mine", encoding="utf-8")
    assert main([*argv[:-1], str(unknown)]) == 2
    assert "no eval manifest" in capsys.readouterr().err
    manifest = store / MANIFEST
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace('"complete"', '"loading"'), encoding="utf-8"
    )
    assert main(argv) == 2
    assert "did not finish" in capsys.readouterr().err


def test_eval_store_changed_since_its_load_is_refused(
    locomo_file: Path,
    tmp_path: Path,
    fake_embedder: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Reused after `forget --resource`, the run said the store held every message and
    scored the forgotten resource's questions as misses."""
    store = tmp_path / "store"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--store", str(store)]
    assert main(argv) == 0
    assert main(argv) == 0  # unchanged: reused
    twin = tmp_path / "twin"
    shutil.copytree(store, twin)
    resource = read_locomo(locomo_file).questions[0].sample_id
    assert main(["forget", "--resource", resource, "--path", str(store), "--yes"]) == 0
    capsys.readouterr()
    assert main(argv) == 2
    assert "changed since" in capsys.readouterr().err
    # a forget and an ingest of as many other messages keep the count, not the messages
    thread = read_locomo(locomo_file).conversations[0].thread_id
    forgotten = main(["forget", "--thread", thread, "--path", str(twin), "--yes"])
    assert forgotten == 0
    gone = int(re.search(r"(\d+) message", capsys.readouterr().out).group(1))  # type: ignore[union-attr]
    lines = [
        {"resource": "someone", "thread": "new", "role": "user", "content": f"line {n}"}
        for n in range(gone)
    ]
    added = tmp_path / "added.jsonl"
    added.write_text("".join(json.dumps(row) + "\n" for row in lines), encoding="utf-8")
    assert main(["ingest", str(added), "--path", str(twin)]) == 0
    capsys.readouterr()
    assert main([*argv[:-1], str(twin)]) == 2
    assert "holds other messages" in capsys.readouterr().err


def test_an_interrupted_store_load_says_how_to_finish(
    locomo_file: Path,
    tmp_path: Path,
    fake_embedder: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C in a --store load said only "interrupted"; the next run then refused the
    folder. The stop itself now says what to do."""
    from langchain_semantic_recall import evaluation

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "load_dataset", stopped)
    store = tmp_path / "store"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--store", str(store)]
    assert main(argv) == 130
    assert "delete the folder" in capsys.readouterr().err
    monkeypatch.undo()
    assert main(argv) == 2  # as it said: the unfinished load is refused
    assert "did not finish" in capsys.readouterr().err


@pytest.mark.slow
def test_quality_locomo_benchmark_smoke(locomo_file: Path, tmp_path: Path) -> None:
    done = _run_benchmark("quality_locomo.py", [str(locomo_file)], tmp_path)
    assert "trade-off curve" in done


def _run_benchmark(script: str, args: list[str], cwd: Path) -> str:
    from tests.processes import ROOT, run_python

    return run_python(str(ROOT / "benchmarks" / script), *args, cwd=cwd)


def _tiny_sets(folder: Path, locomo_file: Path) -> None:
    """The three development sets' layouts, a few lines each."""
    (folder / "locomo-dev").mkdir(parents=True)
    (folder / "locomo-dev/locomo_dev.json").write_text(locomo_file.read_text(), "utf-8")
    lines = []
    for r in range(2):
        for t, (fact, topic) in enumerate(
            [("I adopted a cat named Miso", "cat"), ("I run 5k on Sundays", "run")]
        ):
            lines.append(
                {
                    "resource": f"m{r}",
                    "thread": f"m{r}-t{t}",
                    "role": "user",
                    "id": f"m{r}-{t}u",
                    "content": fact,
                    "created_at": f"2024-01-0{t + 1}T10:00:00Z",
                }
            )
            lines.append(
                {
                    "resource": f"m{r}",
                    "thread": f"m{r}-t{t}",
                    "role": "assistant",
                    "id": f"m{r}-{t}a",
                    "content": f"Nice, tell me about the {topic}!",
                    "created_at": f"2024-01-0{t + 1}T10:00:01Z",
                }
            )
        lines.append(
            {"question": "What is my pet called?", "resource": f"m{r}", "evidence": [f"m{r}-0u"]}
        )
    (folder / "longmemeval-dev").mkdir()
    (folder / "longmemeval-dev/longmemeval_dev.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + "\n", "utf-8"
    )
    para = folder / "paraphrase-dev"
    para.mkdir()
    rows = [
        {
            "id": f"p{p}-0{n}",
            "persona": f"p{p}",
            "fact": fact,
            "reply": "Noted!",
            "question": q,
            "answer_terms": terms,
            "kind": "direct",
        }
        for p in (1, 2)
        for n, (fact, q, terms) in enumerate(
            [
                ("I'm allergic to peanuts", "What food should I avoid?", ["peanuts"]),
                ("my daughter turns 7 in June", "When is my kid's birthday?", ["june"]),
            ]
        )
    ]
    (para / "paraphrase_dev.jsonl").write_text(
        "\n".join(json.dumps(x) for x in rows) + "\n", "utf-8"
    )
    (para / "smalltalk_dev.jsonl").write_text('{"text": "thanks!"}\n', "utf-8")
    (para / "offtopic_dev.jsonl").write_text('{"text": "Why is the sky blue?"}\n', "utf-8")


@pytest.mark.slow
def test_quality_relevance_benchmark_smoke(locomo_file: Path, tmp_path: Path) -> None:
    """The fitting script runs end to end on all three sets' formats and prints its table."""
    _tiny_sets(tmp_path / "data", locomo_file)
    args = ["--data", str(tmp_path / "data"), "--cache", str(tmp_path / "cache"), "--quick"]
    out = _run_benchmark("quality_relevance.py", args, tmp_path)
    for name in ("### locomo", "### lme", "### para-small", "### para-busy", "0.2.0 defaults"):
        assert name in out
    assert "plain BM25 top 15" in out
    assert "rescaled" in out
    assert "DIFFERENT" not in out


@pytest.mark.slow
def test_quality_loss_benchmark_smoke(locomo_file: Path, tmp_path: Path) -> None:
    """The pairwise fit runs end to end on all three sets' formats and prints its table."""
    _tiny_sets(tmp_path / "data", locomo_file)
    args = ["--data", str(tmp_path / "data"), "--cache", str(tmp_path / "cache"), "--quick"]
    args += ["--loss", "pairwise", "--models", "both", "--balance", "0.5"]
    out = _run_benchmark("quality_loss.py", args, tmp_path)
    assert "## loss pairwise (both), balance 0.5" in out
    for name in ("### locomo", "### lme", "### para-small", "### para-busy"):
        assert name in out
    assert "DIFFERENT" not in out


@pytest.mark.slow
@pytest.mark.parametrize("alternative", ["reply-length", "length-within-role-everywhere"])
def test_quality_alternatives_benchmark_smoke(
    alternative: str, locomo_file: Path, tmp_path: Path
) -> None:
    """Each kind of rewrite (message model; candidate model too) runs the whole pipeline."""
    _tiny_sets(tmp_path / "data", locomo_file)
    args = ["--data", str(tmp_path / "data"), "--cache", str(tmp_path / "cache")]
    out = _run_benchmark("quality_alternatives.py", [*args, "--alternative", alternative], tmp_path)
    assert f"## alternative: {alternative}" in out
    for name in ("### locomo", "### lme", "### para-small", "### para-busy"):
        assert name in out
    assert "DIFFERENT" not in out


@pytest.mark.slow
def test_quality_foreign_benchmark_smoke(locomo_file: Path, tmp_path: Path) -> None:
    """Another user's questions are grouped by closeness, and the groups add up to them all."""
    _tiny_sets(tmp_path / "data", locomo_file)
    args = ["--data", str(tmp_path / "data"), "--cache", str(tmp_path / "cache")]
    out = _run_benchmark("quality_foreign.py", args, tmp_path)
    total = int(re.search(r"another user's questions: (\d+),", out).group(1))  # type: ignore[union-attr]
    assert total > 0
    grouped = re.findall(r"^\| [^|]+ \| (\d+) \| [\d.]+ \| \d+% \|$", out, re.MULTILINE)
    assert sum(int(n) for n in grouped) == total


@pytest.mark.slow
def test_quality_unseen_benchmark_smoke(tmp_path: Path) -> None:
    """Each mode gets a row of shares in [0, 1] and message counts; the facts alone are
    all found by the questions that share their words."""
    out = _run_benchmark("quality_unseen.py", ["--stores", "small", "--personas", "2"], tmp_path)
    rows = re.findall(r"^\| small \| ([^|]+) \| (.+) \|$", out, re.MULTILINE)
    assert [mode.strip() for mode, _ in rows] == ["defaults", "dense top 5 x 3", "keyword"]
    for _, cells in rows:
        paraphrase, shared, *counts = (float(c) for c in cells.split(" | "))
        assert 0.0 <= paraphrase <= 1.0
        assert shared == 1.0
        assert len(counts) == 4  # small talk, personal chat, off-topic, another's
        assert all(0.0 <= n <= 15.0 for n in counts)


def test_eval_store_refuses_vectors_of_another_embedder_of_the_same_name(
    locomo_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Same name, other vectors (another build of the model): a reuse would search stale ones."""
    store = tmp_path / "store"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--store", str(store)]
    monkeypatch.setattr(common, "create_embeddings", lambda: FakeEmbeddings(dimension=128))
    assert main(argv) == 0
    capsys.readouterr()
    monkeypatch.setattr(common, "create_embeddings", lambda: FakeEmbeddings(dimension=96))
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "fake-bow" in error
    assert "vectors differ" in error


def test_eval_paraphrase_with_its_own_folder_as_probes_asks_each_line_once(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = paraphrase_set(tmp_path / "para")
    out = tmp_path / "para.json"
    argv = ["eval", "paraphrase", str(folder), "--no-progress", "--probes", str(folder)]
    assert main([*argv, "--json-out", str(out)]) == 0
    probes = json.loads(out.read_text(encoding="utf-8"))["summary"]["false_memories"]
    assert probes["small talk"]["overall"]["questions"] == 4  # 2 lines x 2 personas, once


@pytest.mark.parametrize(
    "change",
    [
        ("version", "0.2.0", "built by langchain-semantic-recall 0.2.0"),
        ("keywords_sha256", "0" * 64, "keyword terms"),
        ("keywords_sha256", None, "keyword terms"),  # a manifest from before the check
    ],
)
def test_eval_store_refuses_a_store_another_package_version_built(
    locomo_file: Path,
    tmp_path: Path,
    fake_embedder: None,
    capsys: pytest.CaptureFixture[str],
    change: tuple[str, str | None, str],
) -> None:
    """Its keyword index (terms), messages or vectors were written another way: reusing it
    would mix the two versions' figures. Refused before the store is opened (migrated)."""
    key, value, says = change
    store = tmp_path / "store"
    argv = ["eval", "locomo", str(locomo_file), "--no-progress", "--store", str(store)]
    assert main(argv) == 0
    manifest_path = store / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if value is None:
        manifest.pop(key, None)
    else:
        manifest[key] = value
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    files = {p.name: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert says in error
    assert "delete this one to load it again" in error
    assert {p.name: p.read_bytes() for p in store.rglob("*") if p.is_file()} == files


def test_eval_jsonl_of_probe_lines_only_says_there_is_no_question_to_score(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The questions' table was printed empty (a blank line) for a set of probe lines."""
    message = {"resource": "a", "thread": "t", "role": "user", "id": "m1", "content": "red kite"}
    path = jsonl(tmp_path / "p.jsonl", [message, {"probe": "thanks!", "kind": "small talk"}])
    assert main(["eval", "jsonl", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "0 questions" in out
    assert "no question to score: probe lines only" in out
    assert "false memories, small talk" in out


def test_an_engine_options_error_speaks_of_the_flags_typed(
    tmp_path: Path, fake_embedder: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's words were Python's (`time_boost=0.3`, `search_mode='hybrid'`, `top_k`)."""
    folder = paraphrase_set(tmp_path / "para")
    argv = ["eval", "paraphrase", str(folder), "--search-mode", "dense", "--time-boost", "0.3"]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "--time-boost 0.3 has no effect in dense mode" in said
    assert "--search-mode hybrid or --search-mode keyword" in said
    assert "time_boost" not in said
    assert "search_mode" not in said
    assert main(["eval", "paraphrase", str(folder), "--before", "-1"]) == 2
    assert "error: --before must be an int from 0" in capsys.readouterr().err
