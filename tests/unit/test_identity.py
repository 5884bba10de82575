"""The one identity rule: explicit > config > runtime context; the authenticated user wins."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.engine.identity import (
    Identity,
    IdentityKeys,
    resolve_identity,
    search_scope,
)
from langchain_semantic_recall.errors import (
    IdentityMismatchError,
    InvalidInputError,
    InvalidOptionError,
    MissingIdentityError,
)
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

KEYS = IdentityKeys()
ids = st.text(alphabet="abcxyz-1", min_size=1, max_size=6)
maybe = st.none() | ids


@dataclass
class UserContext:
    resource_id: str


def configurable(**values: object) -> dict[str, object]:
    return {"configurable": {k: v for k, v in values.items() if v is not None}}


@given(explicit=maybe, from_config=maybe, from_context=maybe)
def test_precedence_is_explicit_then_config_then_context(
    explicit: str | None, from_config: str | None, from_context: str | None
) -> None:
    who = resolve_identity(
        KEYS,
        resource_id=explicit,
        config=configurable(resource_id=from_config),  # type: ignore[arg-type]
        context={"resource_id": from_context},
    )
    expected = next((v for v in (explicit, from_config, from_context) if v is not None), None)
    assert who.resource_id == expected
    assert not who.authenticated


@given(user=ids, claimed=maybe, where=st.sampled_from(["explicit", "config", "context"]))
def test_the_authenticated_user_is_the_resource_and_a_different_claim_is_refused(
    user: str, claimed: str | None, where: str
) -> None:
    config = configurable(langgraph_auth_user_id=user)
    kwargs: dict[str, object] = {}
    if where == "explicit":
        kwargs["resource_id"] = claimed
    elif where == "config":
        config["configurable"]["resource_id"] = claimed  # type: ignore[index]
    else:
        kwargs["context"] = {"resource_id": claimed}
    if claimed is not None and claimed != user:
        with pytest.raises(IdentityMismatchError, match="authenticated"):
            resolve_identity(KEYS, config=config, **kwargs)  # type: ignore[arg-type]
        return
    who = resolve_identity(KEYS, config=config, **kwargs)  # type: ignore[arg-type]
    assert (who.resource_id, who.authenticated) == (user, True)


def test_thread_falls_back_to_session_id_and_context_objects_are_read() -> None:
    who = resolve_identity(KEYS, config=configurable(session_id="s1"), context=UserContext("alice"))
    assert (who.thread_id, who.resource_id) == ("s1", "alice")
    assert (
        resolve_identity(KEYS, config=configurable(thread_id="t", session_id="s")).thread_id == "t"
    )


def test_integers_are_ids_everywhere_and_other_types_are_refused() -> None:
    assert resolve_identity(KEYS, thread_id=42).thread_id == "42"
    assert resolve_identity(KEYS, config=configurable(thread_id=42)).thread_id == "42"
    for bad in (4.2, True, ["t"], ""):
        with pytest.raises(InvalidInputError):
            resolve_identity(KEYS, config=configurable(thread_id=bad))


def test_custom_keys_are_read_in_one_place() -> None:
    keys = IdentityKeys(thread="conversation", resource="user", auth_user=None)
    who = resolve_identity(
        keys,
        config=configurable(conversation="c", user="u", langgraph_auth_user_id="x"),
    )
    assert (who.thread_id, who.resource_id, who.authenticated) == ("c", "u", False)
    with pytest.raises(InvalidOptionError):
        IdentityKeys(thread="")


@pytest.mark.parametrize("auth_user", ["", "thread_id", "resource_id"])
def test_an_auth_user_key_that_is_blank_or_a_callers_id_key_is_refused(auth_user: str) -> None:
    # "" read as None would turn the signed-in user's binding off without a word; the
    # thread or resource key would let any caller's id pass for the signed-in user.
    with pytest.raises(InvalidOptionError, match="auth_user_key"):
        IdentityKeys(auth_user=auth_user)
    assert IdentityKeys(auth_user=None).auth_user is None


def test_missing_ids_are_loud_and_say_what_to_do() -> None:
    with pytest.raises(MissingIdentityError, match="resource_id"):
        search_scope(Identity(thread_id="t"), "resource", KEYS, "recall")
    with pytest.raises(MissingIdentityError, match="thread_id"):
        search_scope(Identity(resource_id="r"), "thread", KEYS, "recall")
    assert search_scope(Identity(resource_id="r"), "resource", KEYS, "x") == ScopeFilter(
        resource_id="r"
    )
    assert search_scope(Identity(thread_id="t"), "thread", KEYS, "x") is None  # owner lookup


@pytest.mark.parametrize(
    "config", ["thread-1", ["thread_id", "t"], 3, {"configurable": "t"}, {"configurable": [1]}]
)
def test_a_config_that_is_not_a_mapping_is_a_clear_error(config: object) -> None:
    """`config="t"` raised a bare AttributeError from deep in LangChain."""
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    calls = [
        lambda: memory.search("lisbon", config=config),  # type: ignore[arg-type]
        lambda: asyncio.run(memory.asearch("lisbon", config=config)),  # type: ignore[arg-type]
        lambda: memory.index([HumanMessage("hi")], config=config),  # type: ignore[arg-type]
        lambda: memory.recall([HumanMessage("hi")], config=config),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match="config must be a RunnableConfig"):
            call()
    assert memory.stats().messages == 0
