"""A tiny run of ``benchmarks/scale_backends.py`` on the session's services (a smoke test)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_backends.py"


def test_scale_benchmark_runs(
    pg_admin_url: str,
    chroma_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = importlib.util.spec_from_file_location("scale_backends", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    argv = [
        "--messages",
        "200",
        "--queries",
        "10",
        "--resources",
        "2",
        "--threads-per-resource",
        "5",
    ]
    assert module.main([*argv, "--pg-url", pg_admin_url, "--chroma-url", chroma_url]) == 0
    out = capsys.readouterr().out
    assert "200 messages" in out
    assert "identical memory for 10 of 10" in out
    for label in ("bulk indexing", "resource scope, ms p95", "thread scope", "identical memory"):
        assert label in out
