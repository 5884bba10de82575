"""Who is asking: the thread and resource of a call, decided by one rule for every surface.

Every surface (engine methods, the runnable, graph nodes, middleware, retriever, tool,
classic memory, chat history, CLI) calls `resolve_identity`. The precedence:

1. explicit arguments (`thread_id=`, `resource_id=`; a `for_thread` view's ids);
2. `config["configurable"]` (`thread_id`, then `session_id` as
   `RunnableWithMessageHistory` names it; `resource_id`);
3. the LangGraph runtime context (`graph.invoke(..., context={"resource_id": ...})`:
   a mapping key or an attribute of a `context_schema` object).

On a LangGraph server with authentication, the run config carries the authenticated
user (`configurable["langgraph_auth_user_id"]`): that user IS the resource, and a
resource from any other source that differs is refused with
`IdentityMismatchError`, never obeyed. Key names live in `IdentityKeys`.

Ids are text; an integer is taken as its decimal text (LangGraph does the same for
thread ids); anything else is an `InvalidInputError`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig, ensure_config

from langchain_semantic_recall.engine.narrowing import run_config
from langchain_semantic_recall.errors import (
    IdentityMismatchError,
    InvalidInputError,
    InvalidOptionError,
    MissingIdentityError,
)
from langchain_semantic_recall.options import Scope
from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter
from langchain_semantic_recall.storable import id_text

AUTH_USER_KEY = "langgraph_auth_user_id"
"""Where a LangGraph server with custom authentication puts the authenticated user's id."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IdentityKeys:
    """The key names identity is read under, in the run config and the runtime context.

    Attributes:
        thread: key of the conversation id (LangGraph's own is `thread_id`).
        resource: key of the resource (user) id.
        thread_fallbacks: keys tried after `thread` in the config
            (`RunnableWithMessageHistory` passes `session_id`).
        auth_user: config key of the authenticated user on a LangGraph server; None
            turns the binding off (only for servers without authentication).
    """

    thread: str = "thread_id"
    resource: str = "resource_id"
    thread_fallbacks: tuple[str, ...] = ("session_id",)
    auth_user: str | None = AUTH_USER_KEY

    def __post_init__(self) -> None:
        for name in ("thread", "resource"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidOptionError(f"{name}_key must be a non-empty string, got {value!r}")
        if self.thread == self.resource:
            raise InvalidOptionError(
                f"thread_key and resource_key are both {self.thread!r}: the conversation id "
                "would be read as its owner too; give them different names"
            )
        auth = self.auth_user
        if auth is not None and (not isinstance(auth, str) or not auth):
            raise InvalidOptionError(
                f"auth_user_key must be a non-empty string, or None to turn the signed-in "
                f"user's binding off; got {self.auth_user!r}"
            )
        if self.auth_user in (self.thread, self.resource):
            raise InvalidOptionError(
                f"auth_user_key is {self.auth_user!r}, the key of the "
                f"{'thread' if self.auth_user == self.thread else 'resource'} id too: an id "
                "any caller may set would be read as the signed-in user; keep "
                "'langgraph_auth_user_id' (the key a LangGraph server sets) or None"
            )

    def config_example(self) -> str:
        """A config literal that sets both ids, for error messages."""
        return (
            f"config={{'configurable': {{{self.thread!r}: 'chat-1', {self.resource!r}: 'alice'}}}}"
        )


@dataclass(frozen=True, slots=True)
class Identity:
    """The ids of one call, resolved.

    Attributes:
        thread_id: the conversation, or None if no source gave one.
        resource_id: the owner, or None if no source gave one.
        authenticated: the resource is the LangGraph server's authenticated user.
    """

    thread_id: str | None = None
    resource_id: str | None = None
    authenticated: bool = False

    def resource_for(self, resource_id: object) -> object:
        """A call's resource under these bound ids (a `for_thread` view's): the view's own.

        A view bound to a resource acts for it alone, as a signed-in user does: a call
        that names another resource is refused, never obeyed.

        Raises:
            IdentityMismatchError: `resource_id` differs from the bound resource.
        """
        given = as_id("resource_id", resource_id)  # 7 and "7" name one resource
        if given is None or self.resource_id in (None, given):
            return given if given is not None else self.resource_id
        raise IdentityMismatchError(
            f"this view is bound to resource {self.resource_id!r} (for_thread) but the call "
            f"named resource {resource_id!r}: a view acts for its own resource only; call "
            "the engine itself for another"
        )

    def check_config(self, keys: IdentityKeys, config: object) -> None:
        """Refuse a run config that names other ids than these bound ones (a view's).

        The view's ids win over a config's, so a message meant for another conversation
        would be filed in the view's without a word.

        Raises:
            IdentityMismatchError: `config` names another thread or resource.
        """
        if not isinstance(config, Mapping):
            return
        thread, resource = _configured(keys, _named_in(config))
        for key, bound, named in (
            (keys.thread, self.thread_id, thread),
            (keys.resource, self.resource_id, resource),
        ):
            if bound is not None and named is not None and named != bound:
                raise IdentityMismatchError(
                    f"this view is bound to {key} {bound!r} (for_thread) but the run config "
                    f"names {named!r}: a view acts for its own conversation only; call the "
                    "engine itself with that config"
                )

    def require_thread(self, keys: IdentityKeys, what: str) -> str:
        """The thread id, or a `MissingIdentityError` that says how to give one."""
        if self.thread_id is None:
            raise MissingIdentityError(
                f"{what} needs a conversation id: pass thread_id=..., or run with "
                f"{keys.config_example()}"
            )
        return self.thread_id

    def require_resource(self, keys: IdentityKeys, what: str) -> str:
        """The resource id, or a `MissingIdentityError` that says how to give one."""
        if self.resource_id is None:
            raise MissingIdentityError(
                f"{what} works across every conversation of a resource (scope='resource') "
                f"and needs a resource id: pass resource_id=..., run with "
                f"{keys.config_example()}, or give the context a {keys.resource!r}; "
                "use scope='thread' for memory of one conversation only"
            )
        return self.resource_id


def as_id(name: str, value: object) -> str | None:
    """An id from any source: None stays None, an int becomes its text, text is checked."""
    if value is None:
        return None
    if isinstance(value, str | int) and not isinstance(value, bool):
        return id_text(name, value)
    raise InvalidInputError(f"{name} must be text, got {type(value).__name__} {value!r}")


def _context_value(context: Any, key: str) -> object:
    if context is None:
        return None
    if isinstance(context, Mapping):
        return context.get(key)
    return getattr(context, key, None)


def _runtime_context() -> Any:
    """The context of the LangGraph run this call is part of, if any."""
    if "langgraph.runtime" not in sys.modules:  # no graph has run in this process
        return None
    from langgraph.runtime import get_runtime

    try:
        return get_runtime().context
    except (RuntimeError, KeyError, AttributeError):  # not inside a graph run
        return None


def _configured(
    keys: IdentityKeys, configurable: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """The thread and resource a run config's `configurable` names (fallback keys last)."""
    thread = _first(
        *(as_id(key, configurable.get(key)) for key in (keys.thread, *keys.thread_fallbacks))
    )
    return thread, as_id(keys.resource, configurable.get(keys.resource))


def _named_in(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a config given to a call names, as `ensure_config` reads it.

    Its `configurable`, with the top-level keys that are not LangChain's own laid over
    it: `{"thread_id": "t"}` names thread "t" as `{"configurable": {...}}` does.
    """
    from langchain_core.runnables.config import CONFIG_KEYS

    configurable = config.get("configurable")
    named = dict(configurable) if isinstance(configurable, Mapping) else {}
    named.update((k, v) for k, v in config.items() if k not in CONFIG_KEYS and v is not None)
    return named


def _first(*values: str | None) -> str | None:
    return next((v for v in values if v is not None), None)


def _user_id(key: str, value: object) -> str | None:
    """A signed-in user's id (`as_id`), never the mark of threads without an owner.

    Threads stored for `NO_RESOURCE` are nobody's: the next write naming a resource
    adopts them. A user signed in under that id would have stored nobody's threads,
    for any other user to adopt and read (and would forget every unowned thread).

    Raises:
        InvalidInputError: not text, or `NO_RESOURCE`.
    """
    user = as_id(key, value)
    if user == NO_RESOURCE:
        raise InvalidInputError(
            f"the signed-in user id {NO_RESOURCE!r} ({key!r}) is the mark of threads stored "
            "without a resource, which any other user's write adopts: give this user "
            "another id in the server's authentication"
        )
    return user


def _signed_in_user(
    keys: IdentityKeys, configurable: Mapping[str, Any], *, given: bool
) -> str | None:
    """The signed-in user of the call: its config's, and the surrounding run's.

    A config given to the call replaces the run's `configurable` (LangChain's
    `ensure_config`), so a call inside a signed-in run that passes its own config would
    drop the user: the run's user is read too, and two different users are refused.

    Raises:
        IdentityMismatchError: the call's config and the run name different users.
        InvalidInputError: a user id that is `NO_RESOURCE` (`_user_id`).
    """
    if not keys.auth_user:
        return None
    user = _user_id(keys.auth_user, configurable.get(keys.auth_user))
    if not given:  # `configurable` is the run's own
        return user
    ambient = ensure_config(None).get("configurable") or {}
    run_user = _user_id(keys.auth_user, ambient.get(keys.auth_user))
    if user is not None and run_user is not None and user != run_user:
        raise IdentityMismatchError(
            f"the run is authenticated as {run_user!r} but a call in it gave a config "
            f"authenticated as {user!r}: a call inside a signed-in run acts for its user"
        )
    return user if user is not None else run_user


def resolve_identity(
    keys: IdentityKeys,
    *,
    thread_id: object = None,
    resource_id: object = None,
    config: RunnableConfig | None = None,
    context: Any = None,
) -> Identity:
    """The thread and resource of a call (see the module docstring for the precedence).

    Args:
        keys: the key names to read.
        thread_id: explicit thread id (wins over every other source).
        resource_id: explicit resource id (wins, except over an authenticated user).
        config: the run config; when None, the config of the run this call is part of
            (LangChain's context). The authenticated user of that run holds either way,
            so a call that passes its own config inside a signed-in run stays its user's.
        context: the runtime context; when None, that of the current LangGraph run.

    Raises:
        InvalidInputError: an id that is not text, or a config that is not a mapping.
        IdentityMismatchError: a resource that differs from the authenticated user.
    """
    configurable: Mapping[str, Any] = run_config(config).get("configurable") or {}
    if context is None:
        context = _runtime_context()
    thread_set, resource_set = _configured(keys, configurable)
    thread = _first(
        as_id("thread_id", thread_id),
        thread_set,
        as_id(keys.thread, _context_value(context, keys.thread)),
    )
    resource = _first(
        as_id("resource_id", resource_id),
        resource_set,
        as_id(keys.resource, _context_value(context, keys.resource)),
    )
    user = _signed_in_user(keys, configurable, given=config is not None)
    if user is None:
        return Identity(thread, resource)
    if resource is not None and resource != user:
        raise IdentityMismatchError(
            f"the run is authenticated as {user!r} but asked for resource {resource!r}: "
            "on an authenticated server the resource is always the signed-in user"
        )
    return Identity(thread, user, authenticated=True)


def with_signed_in_user(keys: IdentityKeys, config: RunnableConfig | None) -> RunnableConfig | None:
    """`config`, carrying the signed-in user of the run it is given in.

    For a surface that starts its own run from the config it is given (a tool): inside
    that run the surrounding run's user is no longer in sight.

    Raises:
        IdentityMismatchError: `config` and the surrounding run name different users.
    """
    if config is None or not keys.auth_user:
        return config
    configurable = _named_in(config)  # a user at the top level is LangChain's too
    user = _signed_in_user(keys, configurable, given=True)
    if user is None or configurable.get(keys.auth_user) == user:
        return config
    return {**config, "configurable": {**configurable, keys.auth_user: user}}


def search_scope(
    identity: Identity, scope: Scope, keys: IdentityKeys, what: str
) -> ScopeFilter | None:
    """The scope a search reads, or None when thread scope must first look up the owner.

    Resource scope needs a resource (a thread is optional: without one, every recalled
    message is from "another" conversation). Thread scope needs a thread; its resource,
    when known, narrows it further.

    Raises:
        MissingIdentityError: the id the scope needs is missing.
        InvalidInputError: resource scope for `NO_RESOURCE`.
    """
    if scope == "resource":
        resource = identity.require_resource(keys, what)
        if resource == NO_RESOURCE:  # every thread stored without a resource: nobody's
            raise InvalidInputError(
                f"{NO_RESOURCE!r} is the mark of threads stored without a resource, not a "
                "resource to search: search one of them with scope='thread'"
            )
        return ScopeFilter(resource_id=resource)
    thread = identity.require_thread(keys, what)
    if identity.resource_id is None:
        return None
    return ScopeFilter(thread_id=thread, resource_id=identity.resource_id)


def held_to(
    conversations: Iterable[tuple[str, str, T]], who: Identity
) -> Iterator[tuple[str, str, T]]:
    """The conversations to import, refusing one of another resource than `who`'s.

    Raises:
        IdentityMismatchError: a conversation of another resource than the signed-in
            user's, or the view's.
    """
    holder = "the run is authenticated as" if who.authenticated else "this view is bound to"
    for thread_id, resource_id, messages in conversations:
        if resource_id != who.resource_id:
            raise IdentityMismatchError(
                f"{holder} resource {who.resource_id!r} but a conversation to import "
                f"belongs to {resource_id!r}: it imports only into its own memory"
            )
        yield thread_id, resource_id, messages


__all__ = [
    "AUTH_USER_KEY",
    "Identity",
    "IdentityKeys",
    "as_id",
    "held_to",
    "resolve_identity",
    "search_scope",
    "with_signed_in_user",
]
