"""langchain-openai is an extra (`[openai]`): its absence is a clear error, never a crash."""

from __future__ import annotations

import sys

import pytest

from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.offline import OfflineChatModel, default_chat_model


def test_openai_key_without_the_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # not installed
    with pytest.raises(InvalidOptionError, match=r"langchain-semantic-recall\[openai\]"):
        default_chat_model()


def test_no_key_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    assert isinstance(default_chat_model(), OfflineChatModel)
