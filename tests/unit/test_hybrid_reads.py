"""Reads build their messages as the constructor does (`records.read_message`)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from langchain_semantic_recall.records import StoredMessage, read_message


def test_read_message_is_the_constructors_message() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    args = ("m1", "t1", "r1", "user", "hello there", at, '{"type": "human"}', 7)
    for metadata in ((), (("kind", "note"), ("n", 2))):
        built = StoredMessage(*args, metadata=metadata)
        read = read_message(*args, metadata)
        assert read == built
        assert hash(read) == hash(built)
        for field in dataclasses.fields(StoredMessage):
            assert getattr(read, field.name) == getattr(built, field.name), field.name
        assert read.created is False
        with pytest.raises(dataclasses.FrozenInstanceError):
            read.text = "changed"  # type: ignore[misc]
