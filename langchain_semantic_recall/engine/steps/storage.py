"""Steps that call the message storage (`MessageStorage`), one record per method."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import ClassVar

from typing_extensions import override

from langchain_semantic_recall.engine.steps.base import Backends, Step
from langchain_semantic_recall.records import (
    CompactResult,
    Deleted,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
)

Windows = dict[str, tuple[StoredMessage, ...]]


@dataclass(frozen=True, slots=True)
class PutMessages(Step[list[StoredMessage]]):
    """Store `records` (`MessageStorage.put`)."""

    records: Sequence[MessageRecord]
    heavy_after: ClassVar[bool] = True

    @override
    def run(self, backends: Backends) -> list[StoredMessage]:
        return backends.storage.put(self.records)

    @override
    async def arun(self, backends: Backends) -> list[StoredMessage]:
        return await backends.storage.aput(self.records)


@dataclass(frozen=True, slots=True)
class ReadWindows(Step[Windows]):
    """The windows of `ids` inside `scope` (`MessageStorage.get_windows`)."""

    ids: Sequence[str]
    _: KW_ONLY
    before: int
    after: int
    scope: ScopeFilter
    heavy_after: ClassVar[bool] = True

    @override
    def run(self, backends: Backends) -> Windows:
        return backends.storage.get_windows(
            self.ids, before=self.before, after=self.after, scope=self.scope
        )

    @override
    async def arun(self, backends: Backends) -> Windows:
        return await backends.storage.aget_windows(
            self.ids, before=self.before, after=self.after, scope=self.scope
        )


@dataclass(frozen=True, slots=True)
class IdsInScope(Step[set[str]]):
    """Which of `ids` lie inside `scope` (`MessageStorage.ids_in_scope`)."""

    ids: Sequence[str]
    scope: ScopeFilter

    @override
    def run(self, backends: Backends) -> set[str]:
        return backends.storage.ids_in_scope(self.ids, self.scope)

    @override
    async def arun(self, backends: Backends) -> set[str]:
        return await backends.storage.aids_in_scope(self.ids, self.scope)


@dataclass(frozen=True, slots=True)
class KeptShare(Step[float | None]):
    """About what share of its thread or resource `scope`'s filter keeps (or None)."""

    scope: ScopeFilter

    @override
    def run(self, backends: Backends) -> float | None:
        return backends.storage.kept_share(self.scope)

    @override
    async def arun(self, backends: Backends) -> float | None:
        return await backends.storage.akept_share(self.scope)


@dataclass(frozen=True, slots=True)
class KeywordSearch(Step[list[tuple[str, float]]]):
    """The best keyword matches inside `scope`: (message id, score), best first."""

    query: str
    _: KW_ONLY
    scope: ScopeFilter
    limit: int

    @override
    def run(self, backends: Backends) -> list[tuple[str, float]]:
        return backends.storage.keyword_search(self.query, scope=self.scope, limit=self.limit)

    @override
    async def arun(self, backends: Backends) -> list[tuple[str, float]]:
        return await backends.storage.akeyword_search(
            self.query, scope=self.scope, limit=self.limit
        )


@dataclass(frozen=True, slots=True)
class CountMessages(Step[int]):
    """The number of messages in `scope` (None: the whole store), counting to `up_to`."""

    scope: ScopeFilter | None
    up_to: int

    @override
    def run(self, backends: Backends) -> int:
        return backends.storage.count(self.scope, up_to=self.up_to)

    @override
    async def arun(self, backends: Backends) -> int:
        return await backends.storage.acount(self.scope, up_to=self.up_to)


@dataclass(frozen=True, slots=True)
class ListThreads(Step[list[ThreadInfo]]):
    """A summary of every thread (of `resource_id`, if given)."""

    resource_id: str | None = None

    @override
    def run(self, backends: Backends) -> list[ThreadInfo]:
        return backends.storage.list_threads(self.resource_id)

    @override
    async def arun(self, backends: Backends) -> list[ThreadInfo]:
        return await backends.storage.alist_threads(self.resource_id)


@dataclass(frozen=True, slots=True)
class ThreadOwner(Step[str | None]):
    """The thread's resource id, or None if unknown."""

    thread_id: str

    @override
    def run(self, backends: Backends) -> str | None:
        return backends.storage.get_thread_owner(self.thread_id)

    @override
    async def arun(self, backends: Backends) -> str | None:
        return await backends.storage.aget_thread_owner(self.thread_id)


@dataclass(frozen=True, slots=True)
class IsForgotten(Step[bool]):
    """Whether the thread was forgotten (its id retired)."""

    thread_id: str

    @override
    def run(self, backends: Backends) -> bool:
        return backends.storage.is_forgotten(self.thread_id)

    @override
    async def arun(self, backends: Backends) -> bool:
        return await backends.storage.ais_forgotten(self.thread_id)


@dataclass(frozen=True, slots=True)
class ListMessages(Step[list[StoredMessage]]):
    """A page of messages after `after` (`MessageStorage.list_messages`)."""

    scope: ScopeFilter | None
    _: KW_ONLY
    after: tuple[str, int] | None
    limit: int

    @override
    def run(self, backends: Backends) -> list[StoredMessage]:
        return backends.storage.list_messages(self.scope, after=self.after, limit=self.limit)

    @override
    async def arun(self, backends: Backends) -> list[StoredMessage]:
        return await backends.storage.alist_messages(self.scope, after=self.after, limit=self.limit)


@dataclass(frozen=True, slots=True)
class LastMessages(Step[list[StoredMessage]]):
    """The newest `limit` messages of a thread (`MessageStorage.last_messages`)."""

    scope: ScopeFilter
    _: KW_ONLY
    limit: int

    @override
    def run(self, backends: Backends) -> list[StoredMessage]:
        return backends.storage.last_messages(self.scope, limit=self.limit)

    @override
    async def arun(self, backends: Backends) -> list[StoredMessage]:
        return await backends.storage.alast_messages(self.scope, limit=self.limit)


@dataclass(frozen=True, slots=True)
class AdoptThread(Step[int]):
    """Give a thread stored without an owner its owner (`MessageStorage.adopt_thread`)."""

    thread_id: str
    resource_id: str

    @override
    def run(self, backends: Backends) -> int:
        return backends.storage.adopt_thread(self.thread_id, self.resource_id)

    @override
    async def arun(self, backends: Backends) -> int:
        return await backends.storage.aadopt_thread(self.thread_id, self.resource_id)


@dataclass(frozen=True, slots=True)
class MoveThread(Step[int]):
    """Give a thread to another resource (`MessageStorage.move_thread`), only `owner`'s."""

    thread_id: str
    _: KW_ONLY
    to_resource: str
    owner: str | None = None

    @override
    def run(self, backends: Backends) -> int:
        storage = backends.storage
        return storage.move_thread(self.thread_id, to_resource=self.to_resource, owner=self.owner)

    @override
    async def arun(self, backends: Backends) -> int:
        to, owner = self.to_resource, self.owner
        return await backends.storage.amove_thread(self.thread_id, to_resource=to, owner=owner)


@dataclass(frozen=True, slots=True)
class UnretireThread(Step[bool]):
    """Lift a forget's retirement of a thread id; whether it was retired."""

    thread_id: str

    @override
    def run(self, backends: Backends) -> bool:
        return backends.storage.unretire_thread(self.thread_id)

    @override
    async def arun(self, backends: Backends) -> bool:
        return await backends.storage.aunretire_thread(self.thread_id)


@dataclass(frozen=True, slots=True)
class DeleteThread(Step[int]):
    """Delete a thread's messages; `retire` also retires its id; only `owner`'s if given."""

    thread_id: str
    _: KW_ONLY
    retire: bool
    owner: str | None = None

    @override
    def run(self, backends: Backends) -> int:
        storage = backends.storage
        return storage.delete_thread(self.thread_id, retire=self.retire, owner=self.owner)

    @override
    async def arun(self, backends: Backends) -> int:
        storage = backends.storage
        return await storage.adelete_thread(self.thread_id, retire=self.retire, owner=self.owner)


@dataclass(frozen=True, slots=True)
class DeleteResource(Step[int]):
    """Delete every thread of a resource."""

    resource_id: str

    @override
    def run(self, backends: Backends) -> int:
        return backends.storage.delete_resource(self.resource_id)

    @override
    async def arun(self, backends: Backends) -> int:
        return await backends.storage.adelete_resource(self.resource_id)


@dataclass(frozen=True, slots=True)
class CompactStorage(Step[CompactResult]):
    """Erase what deleted messages left in the storage's files."""

    @override
    def run(self, backends: Backends) -> CompactResult:
        return backends.storage.compact()

    @override
    async def arun(self, backends: Backends) -> CompactResult:
        return await backends.storage.acompact()


@dataclass(frozen=True, slots=True)
class DeleteBefore(Step[Deleted]):
    """Delete the messages created before `cutoff`, inside `scope` (or all); which went."""

    cutoff: datetime
    scope: ScopeFilter | None

    @override
    def run(self, backends: Backends) -> Deleted:
        return backends.storage.delete_before(self.cutoff, self.scope)

    @override
    async def arun(self, backends: Backends) -> Deleted:
        return await backends.storage.adelete_before(self.cutoff, self.scope)
