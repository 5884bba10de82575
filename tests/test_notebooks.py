"""The executable documentation: every notebook and the demo run offline, top to bottom."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from langchain_semantic_recall.cli import main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "semantic-recall-tests"


def test_the_four_notebooks_are_there() -> None:
    assert [p.stem for p in NOTEBOOKS] == [
        "01_quickstart",
        "02_langgraph_agent",
        "03_agent_middleware",
        "04_inspect_and_tune",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == []
            assert cell.execution_count is None


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernel of this interpreter, offline, with every scratch folder in ``tmp_path``.

    Returns the folder the kernel's ``tempfile`` uses, to check that it is left empty.
    """
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel_json = {"argv": argv, "display_name": KERNEL, "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel_json))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the offline model, no network
    return scratch


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_offline(path: Path, kernel: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    repo_before = _files(ROOT / "notebooks")
    client = NotebookClient(
        notebook, kernel_name=KERNEL, timeout=120, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    assert _files(ROOT / "notebooks") == repo_before
    assert _files(cwd) == set()
    # The notebook removed its temporary store. (``import onnxruntime`` leaves a session
    # marker ``.ses`` in every temporary folder it sees: not ours, and outside the repo.)
    assert {p.name for p in _files(kernel)} <= {".ses"}


@pytest.mark.slow
def test_demo_runs_the_agent_and_shows_each_turn(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    turns = out.split("── Turn ")[1:]
    assert len(turns) == 4
    for turn in turns:
        assert "User:" in turn
        assert "Recall found" in turn
        assert "Assistant (offline model):" in turn
    assert '<remembered_from_other_conversation id="' in turns[0]
    assert "Príncipe Real" in turns[0]  # the answer quotes the remembered reply
    bob = turns[-1]
    assert "bob-holiday" in bob
    assert "trip-planning" not in bob
    assert "peanut" not in bob
    assert "none of them recalled (0)" in out
