"""A tiny run of ``benchmarks/scale_backends.py`` on the session's services (a smoke test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes import load_script

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_backends.py"


def test_scale_benchmark_runs(
    pg_admin_url: str,
    chroma_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = load_script(SCRIPT)
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
