"""The hostile-text suite of tests/unit/test_hostile_text.py on embedded Chroma."""

from __future__ import annotations

from tests.faults import (
    MEMORY_EPHEMERAL_CHROMA,
    SQLITE_CHROMA,
)
from tests.unit.test_hostile_text import (
    HostileTextSuite,
)


class TestHostileTextChroma(HostileTextSuite):
    backend = MEMORY_EPHEMERAL_CHROMA
    examples = 25


class TestHostileTextSQLiteChroma(HostileTextSuite):
    backend = SQLITE_CHROMA
    examples = 15
