"""The thread-scope owner tests of tests/unit/test_thread_scope_owner.py on `local()`'s store.

A SQLite file and a persistent Chroma, whose vectors are partitioned by resource: adopting
an unowned thread moves its vectors to the new owner's collection.
"""

from __future__ import annotations

import pytest

from tests.faults import LOCAL, Backend
from tests.unit import test_thread_scope_owner as unit


@pytest.fixture
def backend() -> Backend:
    return LOCAL


test_the_first_write_naming_a_resource_adopts_an_unowned_thread = (
    unit.test_the_first_write_naming_a_resource_adopts_an_unowned_thread
)
test_the_same_messages_again_with_a_resource_adopt_the_thread = (
    unit.test_the_same_messages_again_with_a_resource_adopt_the_thread
)
test_a_turn_with_a_resource_on_an_unowned_thread_is_not_refused = (
    unit.test_a_turn_with_a_resource_on_an_unowned_thread_is_not_refused
)
