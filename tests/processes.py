"""Running a Python child in a test, and showing why it failed; loading a script as a module."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def run_python(
    *argv: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 300
) -> str:
    """`python *argv` in `cwd` (`-c` code imports this checkout's `tests` from ROOT), with
    `env` added to this process's; its output, asserting it succeeded."""
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, ends(done.stderr)
    return done.stdout


def ends(text: str, size: int = 1500) -> str:
    """Both ends of a long error output: the first error, and the last.

    Stop 39's CI showed the last 3,000 characters only: a second process's error, which
    hid the first (a writer that could not open the folder).
    """
    return text if len(text) <= 2 * size else f"{text[:size]}\n[...]\n{text[-size:]}"


def load_script(path: Path) -> ModuleType:
    """The script at `path` imported as a module named after it, with its folder's
    helpers importable (`perf_common`) and itself in `sys.modules` (dataclasses look
    their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
