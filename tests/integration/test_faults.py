"""The fault suite of tests/unit/test_faults.py on a SQLite file with embedded Chroma."""

from __future__ import annotations

from tests.faults import (
    SQLITE_CHROMA,
)
from tests.unit.test_faults import (
    FaultSuite,
)


class TestFaultsSQLiteChroma(FaultSuite):
    backend = SQLITE_CHROMA
    examples = 12
