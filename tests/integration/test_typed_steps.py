"""Steps call backend methods in code, so mypy catches a renamed backend method.

The package is copied, one `MessageStorage` method and one `VectorIndex` method are
renamed, and mypy (the project's own strict configuration) must report each call in
`engine/steps` that no longer exists. 0.2.0 named methods by string
(`_Call("storage", "get_windows")`): the same rename type-checked and broke at run time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "langchain_semantic_recall"


def _mypy(root: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(root / "pyproject.toml"),
            "--cache-dir",
            str(root / ".mypy_cache"),
            *targets,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("renamed")
    shutil.copytree(ROOT / PACKAGE, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    # The lint step's cache (`make test` runs mypy first) spares re-reading the
    # dependencies' stubs; the copied package's modules are checked afresh either way.
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", root / ".mypy_cache")
    return root


def _rename(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not defined once in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_the_steps_type_check_and_a_renamed_backend_method_does_not(copy: Path) -> None:
    targets = ("-p", f"{PACKAGE}.engine.steps")
    before = _mypy(copy, *targets)
    assert before.returncode == 0, before.stdout + before.stderr

    package = copy / PACKAGE
    _rename(package / "storage" / "base.py", "    def get_windows(", "    def read_around(")
    _rename(package / "vectors" / "base.py", "    async def anearest(", "    async def aclosest(")
    after = _mypy(copy, *targets)

    assert after.returncode == 1, after.stdout + after.stderr
    errors = [line for line in after.stdout.splitlines() if ": error:" in line]
    assert any("steps/storage.py" in line and '"get_windows"' in line for line in errors), (
        after.stdout
    )
    assert any("steps/vectors.py" in line and '"anearest"' in line for line in errors), after.stdout
