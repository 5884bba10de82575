"""Custom authentication for the example server: who is asking, and whose threads they see.

Two users with static bearer tokens, so that the example runs without an identity
provider. A real deployment VERIFIES the token instead (a JWT's signature, issuer,
audience and expiry against the provider's keys, or the provider's introspection
endpoint) and takes the user id from the verified claims; it never takes a user id from
the request body.

The identity returned by :func:`authenticate` is what the LangGraph server puts in every
run's ``config["configurable"]["langgraph_auth_user_id"]``. The semantic-recall engine
reads it there and makes it the resource: each user's memory is their own, and a run
that asks for another resource is refused with ``IdentityMismatchError``.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from langgraph_sdk import Auth

DEMO_TOKENS = "alice-token:alice,bob-token:bob"
"""``token:user`` pairs, comma-separated. Demo values: set ``EXAMPLE_TOKENS`` to change them."""


def _tokens() -> dict[str, str]:
    tokens: dict[str, str] = {}
    for pair in os.environ.get("EXAMPLE_TOKENS", DEMO_TOKENS).split(","):
        token, _, user = pair.strip().partition(":")
        if token and user:
            tokens[token] = user
    return tokens


TOKENS = _tokens()

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """The user of the request's ``Authorization: Bearer <token>`` header, else 401."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer":
        for known, user in TOKENS.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                return {"identity": user}
    raise Auth.exceptions.HTTPException(status_code=401, detail="invalid or missing token")


@auth.on.threads.create
async def create_own_thread(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate
) -> Auth.types.FilterType:
    """A new thread is stamped with its owner."""
    metadata = value.setdefault("metadata", {})  # in place: the server keeps this dict
    metadata["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}


@auth.on.threads.update
async def keep_the_owner(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsUpdate
) -> Auth.types.FilterType:
    """An update touches the caller's threads only and never changes a thread's owner.

    Without this, ``threads.update(thread, metadata={"owner": "bob"})`` would hand a
    thread (and what the checkpoint holds) to another user, or hide it from its owner.
    """
    metadata = value.get("metadata") or {}
    if "owner" in metadata and metadata["owner"] != ctx.user.identity:
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="a thread's owner cannot be changed"
        )
    return {"owner": ctx.user.identity}


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Auth.types.FilterType:
    """Every other thread operation (read, search, runs, ...) sees the caller's threads only."""
    return {"owner": ctx.user.identity}
