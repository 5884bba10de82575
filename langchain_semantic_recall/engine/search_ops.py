"""Search and recall, each written once as a generator of steps (see `steps`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final

from langchain_core.messages import BaseMessage

from langchain_semantic_recall import injection
from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.identity import Identity, IdentityKeys, search_scope
from langchain_semantic_recall.engine.narrowing import Narrowing, turn_time
from langchain_semantic_recall.engine.own_history import beside_op, resent_keys_op
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    ForgottenThreadError,
    InvalidInputError,
    InvalidOptionError,
    OwnershipError,
)
from langchain_semantic_recall.fusion import one_per_text
from langchain_semantic_recall.messages import clean_text, echoes_memory, query_text
from langchain_semantic_recall.options import Scope
from langchain_semantic_recall.quoting import has_text
from langchain_semantic_recall.recall_report import RecallReport
from langchain_semantic_recall.records import NO_RESOURCE, RecallHit, ScopeFilter, StoredMessage
from langchain_semantic_recall.relevance import RelevanceModel
from langchain_semantic_recall.search import SearchPlan

logger = logging.getLogger(__name__)

LOOKS: Final = (256, 1024)
"""Nearest vectors a filtered search reads unfiltered, in turn, when the storage has no
estimate of the share its filter keeps (`_dense_with_vector`); the last is the widest."""
LOOK_STEP: Final = 64
"""Sized looks are rounded up to this (Chroma at 100k: ~1 ms more per 256 vectors)."""
LOOK_MARGIN: Final = 1.25
"""With an estimate, the first look holds this many times `k` at that share: at a
quarter, 256 vectors hold 64 on average, and fewer than 50 about one time in fifty."""

CONFIGURATION_ERRORS = (EmbeddingMismatchError, InvalidOptionError, InvalidInputError)
"""Errors that are the caller's to fix: raised, never swallowed by the "no recall" rule."""


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search: what to look for, for whom, and how."""

    query: str
    identity: Identity
    scope: Scope
    plan: SearchPlan
    max_block_chars: int | None = None
    """Bound on the memory that recall injects (unused by plain search)."""
    narrowing: Narrowing = field(default_factory=Narrowing)
    """The call's metadata filter and time range (`engine.narrowing`)."""
    now: datetime | None = None
    """The turn's own time, for relative periods (None: now)."""
    max_query_chars: int | None = None
    """A longer query is searched by its first this many characters (`max_index_chars`:
    a message is embedded up to it too; None: all of it)."""


def search_op(
    space: VectorSpace, keys: IdentityKeys, request: SearchRequest, what: str = "search"
) -> Op[list[RecallHit]]:
    """The hits for `request.query` within the caller's scope, with their windows.

    A search made for a resource that names a thread another resource owns is refused,
    in either scope, as recall, stats and clear refuse it (in resource scope the thread
    would not narrow the search, but a caller naming it meant that conversation). Recall
    uses `hits_op`: a turn checks ownership before the model (`turn_recall_op`), and its
    failures are not the search's.

    Raises:
        InvalidInputError: the query is not text.
        MissingIdentityError: the scope's id is missing.
        OwnershipError: for a resource, a thread named that another resource owns.
    """
    scope = _scope(request, keys, what)
    named = None if scope is None else (scope.thread_id or request.identity.thread_id)
    if scope is not None and named is not None:  # a blank query too: it is refused alike
        owner = yield steps.ThreadOwner(named)
        if owner not in (None, NO_RESOURCE, scope.resource_id):
            raise OwnershipError(
                f"thread {named!r} belongs to another resource, not "
                f"{scope.resource_id!r}: a search made for a resource reads only its threads"
            )
    return (yield from hits_op(space, keys, request, what))


def _scope(request: SearchRequest, keys: IdentityKeys, what: str) -> ScopeFilter | None:
    """The search's scope (`identity.search_scope`) once its query is known to be text."""
    if not isinstance(request.query, str):
        raise InvalidInputError(f"query must be text, got {type(request.query).__name__}")
    return search_scope(request.identity, request.scope, keys, what)


def hits_op(
    space: VectorSpace, keys: IdentityKeys, request: SearchRequest, what: str = "search"
) -> Op[list[RecallHit]]:
    """`search_op` without its ownership check (recall's: see `search_op`).

    The scope still holds the caller's resource, so another's thread finds nothing.
    """
    scope = _scope(request, keys, what)
    if not has_text(request.query):
        return []  # documented: an empty query finds nothing
    # A lone surrogate (half of an emoji a client split) is replaced, as in a stored
    # message or a recall's query: no tokenizer or embedder takes it.
    request = replace(request, query=clean_text(request.query))
    if (cap := request.max_query_chars) is not None and len(request.query) > cap:
        logger.warning(  # a pasted document: its terms alone took seconds to weigh
            "the query has %d characters; it is searched by its first %d (max_index_chars)",
            *(len(request.query), cap),
        )
        request = replace(request, query=request.query[:cap])
    if scope is None:  # thread scope, owner unknown to the caller: the storage knows it
        thread_id = request.identity.require_thread(keys, what)
        owner = yield steps.ThreadOwner(thread_id)
        if owner is None:
            return []  # a thread nothing was stored for
        scope = ScopeFilter(thread_id=thread_id, resource_id=owner)
    now = request.now or datetime.now(UTC)
    scope = request.narrowing.applied(scope, now)
    plan = request.plan
    return _shown((yield from _search_in(space, request.query, scope, plan, now)))


def _shown(hits: Sequence[RecallHit]) -> list[RecallHit]:
    """The hits less what is never shown (in hits, windows or the memory block).

    The memory search tool's stored answers (recalled once, not again), and messages
    without text (an image, a bare tool call: nothing but an empty line in the block).
    """
    kept = []
    for hit in hits:
        window = tuple(m for m in hit.window if _showable(m))
        if window and _showable(hit.message):
            kept.append(hit if len(window) == len(hit.window) else replace(hit, window=window))
    return kept


def _showable(message: StoredMessage) -> bool:
    return has_text(message.text) and not echoes_memory(message)


def _search_in(
    space: VectorSpace, query: str, scope: ScopeFilter, plan: SearchPlan, now: datetime
) -> Op[list[RecallHit]]:
    if plan.calibrated:
        return (yield from _calibrated_search(space, query, scope, plan, now))
    dense: list[tuple[str, float]] = []
    keyword: list[tuple[str, float]] = []
    if plan.uses_vectors:  # dense mode: one half only
        info = yield from space.resolve()
        dense = yield from _dense(space, info, query, scope, plan.dense_k)
    else:  # keyword mode
        keyword = yield steps.KeywordSearch(query, scope=scope, limit=plan.keyword_k)
    ranked = plan.rank(dense, keyword)
    window = plan.message_range
    period = plan.period(query, now)
    if period is not None and ranked:  # time-aware: read the candidates' times
        ids = [message_id for message_id, _ in ranked]
        times = yield steps.ReadWindows(ids, before=0, after=0, scope=scope)
        ranked = plan.boost(ranked, times, period)
    kept = plan.top(ranked)
    if not kept:
        return []
    windows = yield steps.ReadWindows(
        [message_id for message_id, _ in kept],
        before=window.before,
        after=window.after,
        scope=scope,
    )
    return plan.hits(kept, windows)


def _calibrated_search(
    space: VectorSpace, query: str, scope: ScopeFilter, plan: SearchPlan, now: datetime
) -> Op[list[RecallHit]]:
    """Hybrid search: probabilities of relevance, and as many messages as the evidence earns.

    While the vector index is queried, the keyword half also reads its candidates'
    messages (the best ones with their context windows, `_keyword_half`) and the size of
    the scope; the vector matches it did not read come after. That read is always made
    (even of nothing): the scoring that follows is the operation's CPU work, which the
    async driver runs off the loop after a read. Only the kept candidates whose windows
    the keyword half did not read are read last.
    """
    info = yield from space.resolve()
    reference = yield from space.reference(info)
    share = (yield steps.KeptShare(scope)) if scope.narrowed else None  # before the halves
    near = steps.Nested(
        _dense_with_vector(space, info, query, scope, plan.dense_k, share=share, keyword_too=True)
    )
    model = plan.scorer
    words = steps.Nested(_keyword_half(space, query, scope, plan.keyword_k, model))
    # The vector half mostly waits on the index, the keyword half is mostly Python: the
    # sync driver runs the first on a worker (measured at 10k: 4.1 ms p50 this way round,
    # 5.4 the other, 4.8 one after the other).
    (vector, dense), (keyword, found, early, size) = yield steps.Both(near, words)
    if not dense and not keyword:
        return []
    if not dense and vector and not scope.narrowed:  # the vector half had nothing to search
        space.note_no_vectors(scope, [m for (m, *_) in found.values()], now)
    seen = {m.id: m for window in early.values() for m in window}  # all inside the scope
    unread = [message_id for message_id, _ in dense if message_id not in found]
    found = {**found, **{k: (seen[k],) for k in unread if k in seen}}
    unread = [message_id for message_id in unread if message_id not in seen]
    found = {**found, **(yield steps.ReadWindows(unread, before=0, after=0, scope=scope))}
    period = plan.period(query, now)
    if period is None:  # "in May": the same words at two times are two
        hit_of = {k: m for k, window in found.items() for m in window if m.id == k}
        dense, keyword = one_per_text(dense, keyword, hit_of)
    baseline = reference.baseline(vector) if vector else None  # None: see `keyword_too`
    facts = plan.query(query, dense, keyword, found, baseline, period=period, texts=space.texts)
    if model.share(facts, plan.threshold, size) <= 0.0:
        return []  # small talk, or nothing closer than unrelated text: silence
    messages = {m.id: m for window in found.values() for m in window}
    kept = model.best_candidates(facts, messages)
    rest = [message_id for message_id in kept if message_id not in early]
    late: Mapping[str, Sequence[StoredMessage]] = {}
    if rest:
        before, after = model.reads_before, model.reads_after
        late = yield steps.ReadWindows(rest, before=before, after=after, scope=scope)
    context = {k: early[k] if k in early else late[k] for k in kept if k in early or k in late}
    return plan.relevant(facts, kept, context, size)


def _keyword_half(
    space: VectorSpace, query: str, scope: ScopeFilter, k: int, model: RelevanceModel
) -> Op[
    tuple[
        list[tuple[str, float]],
        dict[str, Sequence[StoredMessage]],
        Mapping[str, Sequence[StoredMessage]],
        int,
    ]
]:
    """The keyword matches, their messages, the best ones' windows, the scope's size.

    Returns the matches (best first); match id -> its message (as a window of one); for
    the first `model.candidates` matches, match id -> its context window (as
    `model.probabilities` reads it); and the scope's size, up to `model.size_cap`. The
    candidates kept by the model are mostly among the best keyword matches (at 10k, 16
    of 20 on average), so their windows are read here, while the vector index is still
    being queried, rather than after it. The messages' terms are worked out here too
    (into `space.texts`), which takes them off the path as well.

    The count comes first: SQLite lets go of the GIL while it counts, so the vector half's
    thread runs its own Python meanwhile (the query's embedding, Chroma's call) and
    reaches the index sooner (at 10k: ~0.1 ms less per search, in runs side by side).
    """
    size: int = yield steps.CountMessages(scope, up_to=model.size_cap)
    keyword: list[tuple[str, float]] = yield steps.KeywordSearch(query, scope=scope, limit=k)
    ids = [message_id for message_id, _ in keyword]
    best, others = ids[: model.candidates], ids[model.candidates :]
    before, after = model.reads_before, model.reads_after
    early: Mapping[str, Sequence[StoredMessage]] = {}
    if best:
        early = yield steps.ReadWindows(best, before=before, after=after, scope=scope)
    of = space.texts.of
    hits: dict[str, StoredMessage] = {}
    for window in early.values():  # every message of a window is inside the scope
        for message in window:
            of(message.text)
            hits[message.id] = message
    # Nearly half the other matches (at 10k, 12 of 26) sit in those windows: not read again.
    others = [message_id for message_id in others if message_id not in hits]
    read = (yield steps.ReadWindows(others, before=0, after=0, scope=scope)) if others else {}
    for window in read.values():
        for message in window:
            of(message.text)
            hits[message.id] = message
    found: dict[str, Sequence[StoredMessage]] = {i: (hits[i],) for i in ids if i in hits}
    return keyword, found, early, size


def _dense(
    space: VectorSpace, info: IndexInfo, query: str, scope: ScopeFilter, k: int
) -> Op[list[tuple[str, float]]]:
    """The vector half of a search: embed the query, then the messages nearest in `scope`.

    Message ids only: every one is read back through the storage, in `scope`.
    """
    share = (yield steps.KeptShare(scope)) if scope.narrowed else None
    _, nearest = yield from _dense_with_vector(space, info, query, scope, k, share=share)
    return nearest


def _dense_with_vector(
    space: VectorSpace,
    info: IndexInfo,
    query: str,
    scope: ScopeFilter,
    k: int,
    *,
    share: float | None,
    keyword_too: bool = False,
) -> Op[tuple[Sequence[float], list[tuple[str, float]]]]:
    """`_dense`, with the query's vector (hybrid search measures it against `reference`).

    A filtered scope first asks for the nearest vectors of its thread or resource
    without the filter (ids and scores: in Chroma at 100k, 3 ms for 256 and 6 ms for
    1,024, where its own filtered query costs 140-400 ms) and keeps, in rank order, those
    the storage says lie inside it (`_looks`). With the storage's estimate of the share
    the filter keeps (`share`, `steps.KeptShare`, asked before the keyword half takes
    the storage), the first look is sized to hold `k` of them: a filter keeping a twelfth
    needs ~768 (4.4 ms), where 256 then 1,024 took 3 + 6 ms. When the looks hold fewer than
    `k`, the index filters.

    `keyword_too`: a keyword half searches beside this one, so a query the embedder
    answers with an unusable vector (all zeros, NaN or inf: no direction) finds no
    vector match, with a warning, and the keyword half answers alone (an empty vector
    and no match). Without it (dense mode) that is the search's error.
    """
    if keyword_too:
        embedded = yield steps.EmbedEach(info, [query])
        if (usable := embedded.vectors[0]) is None:
            logger.warning(
                "the embedder gave the query an unusable vector (%s); hybrid search "
                "answers from its keyword half alone",
                embedded.unusable[0],
            )
            return (), []
        vector: Sequence[float] = usable
    else:
        vector = (yield steps.Embed(info, [query]))[0]
    space.check_query_vector(info, vector)
    for wide in _looks(k, share) if scope.narrowed else ():
        near: list[tuple[str, float]]
        near = yield steps.NearestMessages(info, vector, k=wide, scope=scope.ids_only())
        inside = yield steps.IdsInScope([message_id for message_id, _ in near], scope)
        kept = [(message_id, score) for message_id, score in near if message_id in inside]
        if len(kept) >= k:
            return vector, kept[:k]
        if len(near) < wide:  # few vectors, or chunks of one message: the index filters
            break
    nearest: list[tuple[str, float]] = yield steps.NearestMessages(info, vector, k=k, scope=scope)
    return vector, nearest


def _looks(k: int, share: float | None) -> list[int]:
    """The unfiltered looks for `k` vectors of a filter keeping `share` (None: unknown).

    Only looks wider than `k` can hold `k`; a share of 0 (the sample kept none) asks for
    the widest alone.
    """
    if share is None or not LOOKS:
        return [wide for wide in LOOKS if wide > k]
    widest = LOOKS[-1]
    wanted = LOOK_MARGIN * k / max(share, 1e-9)
    wide = math.ceil(wanted / LOOK_STEP) * LOOK_STEP
    looks = [wide, widest] if wide < widest else [widest]
    return [look for look in looks if look > k]


def recall_op(
    space: VectorSpace,
    keys: IdentityKeys,
    messages: Sequence[BaseMessage],
    request: SearchRequest,
    logger: logging.Logger,
    *,
    owner_checked: bool = False,
) -> Op[tuple[list[BaseMessage], RecallReport]]:
    """`messages` with the recalled messages injected, and the report of what was.

    `request.query` is ignored. No human text: the input unchanged (documented no-op),
    once the thread's owner is checked.
    A failure of the embedder, vector index or storage is logged and recalls nothing (the
    report says `"failed"`); configuration errors (missing ids, dimension mismatch), a
    thread of another resource (`OwnershipError`, unless `owner_checked`: the caller did)
    and programming errors (`errors.PROGRAMMING_ERRORS`: `TypeError`, `AttributeError`,
    ...) are raised.
    """
    from langchain_semantic_recall.errors import PROGRAMMING_ERRORS

    items = list(messages)
    search_scope(request.identity, request.scope, keys, "recall")  # missing ids are loud
    who = request.identity
    query = query_text(items)
    try:
        # before the no-query answer: another's thread is refused whatever the input
        if not owner_checked and who.thread_id is not None and who.resource_id is not None:
            owner = yield steps.ThreadOwner(who.thread_id)
            _check_owner(who.thread_id, owner, who.resource_id)
        if query is None:
            return items, RecallReport("no query", None, who.thread_id, who.resource_id)
        turn = replace(request, query=query, now=request.now or turn_time(items))
        hits = yield from hits_op(space, keys, turn)
        unstored = yield from resent_keys_op(items, hits, who.thread_id)
        beside = () if who.thread_id else (yield from beside_op(items, hits, who.resource_id))
    except (*CONFIGURATION_ERRORS, OwnershipError):
        raise
    except PROGRAMMING_ERRORS:  # a bug is never read as "nothing to remember"
        raise
    except Exception as error:
        logger.warning("recall failed; continuing without recall", exc_info=True)
        failed = RecallReport("failed", query, who.thread_id, who.resource_id, error=repr(error))
        return items, failed
    return injection.inject_reported(
        items,
        hits,
        thread_id=who.thread_id,
        resource_id=who.resource_id,
        query=query,
        max_block_chars=request.max_block_chars,
        unstored=unstored,
        beside=beside,
    )


def turn_recall_op(
    space: VectorSpace,
    keys: IdentityKeys,
    messages: Sequence[BaseMessage],
    request: SearchRequest,
    logger: logging.Logger,
) -> Op[tuple[list[BaseMessage], RecallReport]]:
    """Recall for one turn of a conversation runtime (graph nodes, middleware).

    Before the model is called, refuses a thread that was forgotten or belongs to
    another resource: the turn would otherwise run and then fail to be stored. These
    checks fail closed: when the storage cannot answer them, the turn is refused too
    (it is never run unchecked).

    Raises:
        ForgottenThreadError: the thread was forgotten (its id is retired).
        OwnershipError: the thread belongs to another resource.
        StorageError: the storage could not say who owns the thread or whether it was
            forgotten.
    """
    from langchain_semantic_recall.errors import PROGRAMMING_ERRORS, StorageError

    thread_id = request.identity.require_thread(keys, "a graph or agent turn")
    try:
        owner = yield steps.ThreadOwner(thread_id)
        forgotten = yield steps.IsForgotten(thread_id)
    except PROGRAMMING_ERRORS:
        raise
    except Exception as error:
        raise StorageError(
            f"could not check thread {thread_id!r} in the storage (its owner and whether it "
            f"was forgotten): {error!r}. The turn is refused rather than run unchecked; "
            "retry when the storage is reachable"
        ) from error
    if forgotten:
        raise ForgottenThreadError(
            f"thread {thread_id!r} was forgotten, so its id is retired and new turns of it "
            "would not be stored: start the conversation under a new thread id (and delete "
            "its checkpoint, which still holds the old messages)"
        )
    if (resource_id := request.identity.resource_id) is not None:
        _check_owner(thread_id, owner, resource_id)
    return (yield from recall_op(space, keys, messages, request, logger, owner_checked=True))


def _check_owner(thread_id: str, owner: str | None, resource_id: str) -> None:
    """Refuse recall for `resource_id` in a thread another resource owns.

    Nothing of that thread would be recalled (the search keeps to the caller's resource),
    but the turn could not be stored either: it is refused before the model runs. A
    thread stored without a resource is adopted by the turn's write (`index`).

    Raises:
        OwnershipError: `owner` is another resource.
    """
    if owner not in (None, NO_RESOURCE, resource_id):
        raise OwnershipError(
            f"thread {thread_id!r} belongs to another resource, not {resource_id!r}: a "
            f"conversation keeps one owner. Start a new thread id for {resource_id!r}"
        )
