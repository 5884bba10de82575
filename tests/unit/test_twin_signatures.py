"""Every public callable has its sync and async twin (`x` / `ax`), with the same signature.

The public API is enumerated, not listed by hand: every class and function in the
`__all__` of the modules applications and backend authors import, with every public
method a class defines or inherits from a class of the package (LangChain's own methods
are LangChain's). For each pair the parameters (names, kinds, defaults, annotations) and
the return annotation match once the async side's `Awaitable[...]` / `AsyncIterator[...]`
is read as its sync counterpart, and the async side's docstring documents it or points
at its own twin ("Async twin of `x`."). Properties read what the object holds, but for the
one listed in `PROPERTY_TWINS`. A sync callable without an async twin is listed
in `SYNC_ONLY` with the reason it needs none (no I/O, a constructor, a file parser);
an async callable without a sync twin is always an error.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

PACKAGE = "langchain_semantic_recall"
PUBLIC_MODULES = (
    PACKAGE,
    f"{PACKAGE}.bulk",
    f"{PACKAGE}.chat_history",
    f"{PACKAGE}.embeddings",
    f"{PACKAGE}.evaluation",
    f"{PACKAGE}.graph",
    f"{PACKAGE}.importers",
    f"{PACKAGE}.local_embeddings",
    f"{PACKAGE}.middleware",
    f"{PACKAGE}.offline",
    f"{PACKAGE}.options",
    f"{PACKAGE}.recall",
    f"{PACKAGE}.records",
    f"{PACKAGE}.retriever",
    f"{PACKAGE}.settings",
    f"{PACKAGE}.storage",
    f"{PACKAGE}.storage.postgres",
    f"{PACKAGE}.vectors",
    f"{PACKAGE}.vectors.chroma",
    f"{PACKAGE}.vectors.chroma_server",
    f"{PACKAGE}.vectors.langchain",
)
"""The modules users and backend authors import (their `__all__` is the public API)."""

RETURNED = (f"{PACKAGE}.retriever:MemorySearchTool",)
"""Public classes reached only through a call (`memory.as_tool()` returns this one)."""

_VIEWS = "a view or factory of the engine: no I/O"
_BUILD = "a constructor, called once at start-up (its I/O is the connection itself)"
_PURE = "pure: no I/O"
_PARSE = "reads a local file into memory once, before the engine's twins write it"
_EVAL = "the offline measurement's data preparation (evaluate has its twin)"

SYNC_ONLY: dict[str, str] = {
    # the engine and its surfaces
    "SemanticRecall.local": _BUILD,
    "SemanticRecall.from_url": _BUILD,
    "SemanticRecall.with_options": _VIEWS,
    "SemanticRecall.for_thread": _VIEWS,
    "SemanticRecall.as_retriever": _VIEWS,
    "SemanticRecall.as_tool": _VIEWS,
    "SemanticRecall.chat_history": _VIEWS,
    "SemanticRecallRetriever.model_post_init": "pydantic's hook: checks the fields",
    "MemorySearchTool.model_post_init": "pydantic's hook: checks the fields",
    "create_memory_search_tool": _VIEWS,
    "create_recall_graph": "builds a graph (its nodes have both twins)",
    "current_turn": _PURE,
    "inject_recalled": _PURE,
    "with_recall": _PURE,
    "RecalledMemory.apply": _PURE,
    "HeldVectors.ids": _PURE,
    "VectorIndex.write_failures": "takes notes the write-behind worker kept in memory: no I/O",
    "VectorIndex.writes_held": "a context manager around sync and async engine calls alike",
    "HeldVectors.by_message": _PURE,
    "RecallChannel.get": "a LangGraph channel's read of its value: no I/O",
    "RecallChannel.is_available": "a LangGraph channel's read of its value: no I/O",
    "EmbeddingCache.get": "an in-process LRU: no I/O",
    "EmbeddingCache.put": "an in-process LRU: no I/O",
    "EmbeddingCache.clear": "an in-process LRU: no I/O",
    "LocalEmbeddings.count_tokens": _PURE,
    "LocalEmbeddings.split_text": _PURE,
    "chunk_spans": _PURE,
    "chunk_text": _PURE,
    "embedding_model_name": _PURE,
    "split_for_embedding": _PURE,
    "unusable_reason": _PURE,
    "format_hits": _PURE,
    "hit_to_document": _PURE,
    "transcript": _PURE,
    "RecallReport.as_dict": _PURE,
    "EvidenceReport.note": _PURE,
    "Conversation.place": _PURE,
    "MessageRecord.dump": _PURE,
    "MessageRecord.to_message": _PURE,
    "ScopeFilter.admits": _PURE,
    "ScopeFilter.admits_message": _PURE,
    "ScopeFilter.as_where": _PURE,
    "ScopeFilter.ids_only": _PURE,
    "ScopeFilter.matches": _PURE,
    "plan_put": "pure: plans SQL",
    # importers: parse a file, then `bulk_index` / `abulk_index` write it
    "demo_conversations": _PARSE,
    "detect_format": _PARSE,
    "export_lines": "pure: formats messages already read as JSON lines",
    "read_chatgpt_conversations": _PURE,
    "read_chatgpt_export": _PARSE,
    "read_conversations": _PARSE,
    "read_jsonl": _PARSE,
    "read_jsonl_lines": _PURE,
    # evaluation
    "default_threshold": _PURE,
    "engine_defaults": _PURE,
    "load_dataset": _EVAL,
    "normalise_evidence": _PURE,
    "read_eval_jsonl": _EVAL,
    "read_locomo": _EVAL,
    "read_probes": _EVAL,
    "summarize": _PURE,
    # settings and backends' construction
    "RecallSettings.from_env": _PURE,
    "RecallSettings.url_options": _PURE,
    "as_vector_index": _BUILD,
    "create_storage": _BUILD,
    "create_vector_index": _BUILD,
    "local_backends": _BUILD,
    "url_backends": _BUILD,
    "redact": _PURE,
    "connect_chroma": _BUILD,
    "wait_for_chroma": "waits at start-up for a server a deployment starts",
    "ChromaURL.parse": _PURE,
    "ChromaVectorIndex.persistent": _BUILD,
    "ChromaVectorIndex.ephemeral": _BUILD,
    "SQLiteStorage.is_writable": "a file-mode check (os.access): no database I/O",
    "resource_collection_name": _PURE,
    "scope_where": _PURE,
    "similarity_from_cosine_distance": _PURE,
    "thread_where": _PURE,
    "chroma_where": _PURE,
    "dialect_for": _PURE,
    "matches": _PURE,
    # a LangChain vector store's dialect: called inside LangChainVectorIndex's executor
    "ChromaDialect.check_space": _PURE,
    "StoreDialect.remove": "runs inside LangChainVectorIndex's own sync/async twins",
    "StoreDialect.search": "runs inside LangChainVectorIndex's own sync/async twins",
    "StoreDialect.select": "runs inside LangChainVectorIndex's own sync/async twins",
    "StoreDialect.select_vectors": "runs inside LangChainVectorIndex's own sync/async twins",
    "StoreDialect.write": "runs inside LangChainVectorIndex's own sync/async twins",
}
"""`owner.name` (or a module function's name) -> why it has no async twin."""

PROPERTY_TWINS = {"SemanticRecallChatHistory.messages": "aget_messages"}
"""A property whose async twin is a method (LangChain's `BaseChatMessageHistory` names)."""

DUNDER_TWINS = (("__enter__", "__aenter__"), ("__exit__", "__aexit__"))


@dataclass(frozen=True)
class Member:
    """One public callable: its display name and the function (or property) itself."""

    name: str
    key: str  # `Owner.name` (the class that writes it) or `name`
    value: Any
    overrides: tuple[str, ...] = ()  # the keys of the same method in base classes

    def exempt(self) -> bool:
        """Listed in `SYNC_ONLY`, or an override of a method listed there."""
        return any(key in SYNC_ONLY for key in (self.key, *self.overrides))


def _ours(obj: object) -> bool:
    return str(getattr(obj, "__module__", "")).startswith(PACKAGE)


def _function(value: Any) -> Any:
    if isinstance(value, classmethod | staticmethod):
        return value.__func__
    return value


def public_api() -> dict[str, dict[str, Member]]:
    """Owner (a class name, or `""` for module functions) -> its public callables."""
    owners: dict[str, dict[str, Member]] = {"": {}}
    classes: dict[str, type] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in PUBLIC_MODULES:
            module = importlib.import_module(module_name)
            for public in getattr(module, "__all__", ()):
                obj = getattr(module, public)
                if inspect.isclass(obj):
                    if _ours(obj):
                        classes[obj.__name__] = obj
                elif inspect.isfunction(obj) and _ours(obj):
                    owners[""][public] = Member(public, public, obj)
        for spec in RETURNED:
            module_name, name = spec.split(":")
            cls = getattr(importlib.import_module(module_name), name)
            classes[cls.__name__] = cls
    for name, cls in classes.items():
        members: dict[str, Member] = {}
        for klass in reversed(cls.__mro__):
            if not _ours(klass):
                continue
            for attr, value in vars(klass).items():
                public = not attr.startswith("_") or attr in {d for p in DUNDER_TWINS for d in p}
                if not public:
                    continue
                key = f"{klass.__name__}.{attr}"  # where it is written: one verdict
                if inspect.isfunction(_function(value)) or key in PROPERTY_TWINS:
                    below = members.get(attr)
                    bases = () if below is None else (below.key, *below.overrides)
                    members[attr] = Member(attr, key, value, bases)
        owners[name] = members
    return owners


def _is_async(value: Any) -> bool:
    function = _function(value)
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def pairs(members: dict[str, Member]) -> Iterator[tuple[Member | None, Member | None]]:
    """(sync, async) for every callable of one owner; a missing side is None."""
    done: set[str] = set()
    for name, member in members.items():
        twin = PROPERTY_TWINS.get(member.key) or f"a{name}"
        if name.startswith("__"):
            twin = dict(DUNDER_TWINS).get(name, "")
        if twin in members and not _is_async(member.value):
            done |= {name, twin}
            yield member, members[twin]
    async_dunders = {a for _, a in DUNDER_TWINS}
    for name, member in members.items():
        if name in done:
            continue
        if _is_async(member.value) or name in async_dunders:
            yield None, member
        else:
            yield member, None


_AWAITABLE = re.compile(r"\b(?:Awaitable|Coroutine\[Any, Any,)\[?")
_ASYNC_NAMES = {
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
}


def _unwrap(annotation: str, wrapper: str) -> str:
    """`annotation` with every `wrapper[...]` replaced by what it wraps."""
    while (start := annotation.find(f"{wrapper}[")) >= 0:
        depth, end = 0, start + len(wrapper)
        for end in range(start + len(wrapper), len(annotation)):
            depth += {"[": 1, "]": -1}.get(annotation[end], 0)
            if depth == 0:
                break
        inner = annotation[start + len(wrapper) + 1 : end]
        annotation = annotation[:start] + inner + annotation[end + 1 :]
    return annotation


def as_sync(annotation: object) -> str:
    """An async twin's annotation as its sync twin would spell it."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    text = _unwrap(text, "Awaitable")
    for async_name, sync_name in _ASYNC_NAMES.items():
        text = re.sub(rf"\b{async_name}\b", sync_name, text)
    return text


def _shape(function: Callable[..., Any]) -> tuple[list[tuple[str, str, str, str]], str]:
    signature = inspect.signature(function)
    parameters = [
        (p.name, p.kind.name, repr(p.default), as_sync(p.annotation))
        for p in signature.parameters.values()
    ]
    return parameters, as_sync(signature.return_annotation)


def differences(sync: Member, twin: Member) -> list[str]:
    """What differs between the two sides of one pair, in words."""
    if isinstance(sync.value, property) or isinstance(twin.value, property):
        return []
    found = []
    sync_parameters, sync_returns = _shape(_function(sync.value))
    async_parameters, async_returns = _shape(_function(twin.value))
    if sync_parameters != async_parameters:
        found.append(f"parameters {sync_parameters} != {async_parameters}")
    if sync_returns != async_returns and "Iterator" not in sync_returns + async_returns:
        found.append(f"returns {sync_returns} != {async_returns}")
    if isinstance(sync.value, classmethod | staticmethod) != isinstance(
        twin.value, classmethod | staticmethod
    ):
        found.append("one is a class or static method, the other is not")
    return found


def _doc(member: Member) -> str:
    value = member.value.fget if isinstance(member.value, property) else _function(member.value)
    return inspect.getdoc(value) or ""


def doc_problems(sync: Member, twin: Member) -> list[str]:
    """The sync side is documented; the async side documents itself or names its twin."""
    found = []
    if not _doc(sync):
        found.append(f"{sync.key} has no docstring")
    doc = _doc(twin)
    pointer = re.match(r"Async twin of `([\w.]+)`", doc)
    if pointer is not None and pointer.group(1).split(".")[-1] != sync.name:
        found.append(f"{twin.key} says it is the twin of {pointer.group(1)}, not of {sync.name}")
    if not doc:
        found.append(f"{twin.key} has no docstring (say: Async twin of `{sync.name}`.)")
    return found


def twin_problems() -> list[str]:
    """Every missing twin, differing signature and misleading docstring, one line each."""
    problems: list[str] = []
    for owner, members in public_api().items():
        for sync, twin in pairs(members):
            if twin is None:
                assert sync is not None
                if not sync.exempt():
                    problems.append(f"{sync.key} has no async twin a{sync.name}")
            elif sync is None:
                problems.append(f"{twin.key} has no sync twin")
            else:
                where = f"{owner}." if owner else ""
                pair = f"{where}{sync.name}/{twin.name}"
                problems += [f"{pair}: {d}" for d in differences(sync, twin)]
                problems += doc_problems(sync, twin)
    return sorted(set(problems))


def test_every_public_callable_has_a_matching_twin() -> None:
    assert twin_problems() == []


def test_the_exemptions_name_callables_that_exist() -> None:
    """A renamed or removed callable leaves no stale exemption behind."""
    keys = {
        key
        for members in public_api().values()
        for member in members.values()
        for key in (member.key, *member.overrides)
    }
    assert set(SYNC_ONLY) - keys == set()
    assert set(PROPERTY_TWINS) <= keys


def test_the_enumeration_reaches_every_surface() -> None:
    owners = public_api()
    expected = {
        "SemanticRecall": {"recall", "arecall", "forget_thread", "aforget_thread", "purge"},
        "SemanticRecallChatHistory": {"messages", "aget_messages", "add_messages"},
        "SemanticRecallRetriever": {"invoke", "ainvoke"},
        "MemorySearchTool": {"run", "arun"},
        "RecallNode": {"invoke", "ainvoke"},
        "IndexNode": {"invoke", "ainvoke"},
        "SemanticRecallMiddleware": {"before_agent", "abefore_agent", "awrap_model_call"},
        "MessageStorage": {"put", "aput", "list_threads", "alist_threads"},
        "SQLiteStorage": {"put", "aput"},
        "PostgresStorage": {"put", "aput"},
        "VectorIndex": {"query", "aquery", "export", "aexport"},
        "ChromaVectorIndex": {"drop"},
        "ChromaServerVectorIndex": {"heartbeat"},
        "LangChainVectorIndex": {"upsert", "aupsert"},
        "": {"bulk_index", "abulk_index", "read_jsonl", "recall_turn", "arecall_turn"},
    }
    for owner, names in expected.items():
        assert names <= set(owners[owner]), owner


# --- the checker finds what it is for ------------------------------------------------------


class _Drifted:
    def search(self, query: str, *, top_k: int = 4) -> list[str]:
        """Search."""
        return []

    async def asearch(self, query: str, *, top_k: int = 5) -> list[str]:
        """Async twin of `search`."""
        return []

    def forget(self, thread_id: str) -> int:
        """Forget."""
        return 0

    async def aforget(self, thread_id: str, resource_id: str) -> int:
        """Async twin of `search`."""
        return 0

    def drop(self) -> None:
        """Drop."""

    async def apurge(self) -> None:
        """Async only."""

    def export(self) -> Iterator[str]:
        """Export."""
        yield ""

    def aexport(self) -> Any:
        """Async twin of `export`."""


def _members_of(cls: type) -> dict[str, Member]:
    return {
        name: Member(name, f"{cls.__name__}.{name}", value)
        for name, value in vars(cls).items()
        if not name.startswith("_")
    }


def test_the_checker_finds_drift_a_missing_twin_and_a_wrong_pointer() -> None:
    found: list[str] = []
    for sync, twin in pairs(_members_of(_Drifted)):
        if sync is None or twin is None:
            found.append(f"{(sync or twin).name} alone")  # type: ignore[union-attr]
        else:
            found += [f"{sync.name}: {d}" for d in differences(sync, twin)]
            found += doc_problems(sync, twin)
    assert "drop alone" in found
    assert "apurge alone" in found
    assert any(line.startswith("search: parameters") and "'4'" in line for line in found)
    assert any(line.startswith("forget: parameters") for line in found)
    assert "_Drifted.aforget says it is the twin of search, not of forget" in found
    assert not any(line.startswith("export") for line in found)


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ("Awaitable[ModelResponse[Any]]", "ModelResponse[Any]"),
        (
            "Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]",
            "Callable[[ModelRequest[Any]], ModelResponse[Any]]",
        ),
        ("AsyncIterator[list[VectorRecord]]", "Iterator[list[VectorRecord]]"),
        ("int", "int"),
    ],
)
def test_async_annotations_read_as_their_sync_spelling(annotation: str, expected: str) -> None:
    assert as_sync(annotation) == expected
