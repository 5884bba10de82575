"""The errors of langchain-semantic-recall.

Every error derives from `SemanticRecallError`; option errors also derive from
`ValueError` so that `except ValueError` keeps working for configuration code.
Messages say what went wrong and what to do next. Every error class of the package is
defined here (older import paths, such as `vectors.base.ExportNotSupportedError` or
`cli.common.CommandError`, still work: they name these same classes).
"""

from __future__ import annotations


class SemanticRecallError(Exception):
    """Root of every error raised by this package."""


class InvalidOptionError(SemanticRecallError, ValueError):
    """An option is out of range or of the wrong type (raised at construction)."""


class InvalidInputError(SemanticRecallError, ValueError):
    """A call received input it cannot use (wrong types, missing ids, malformed content)."""


class EmbeddingMismatchError(SemanticRecallError):
    """The embedder does not match the model or dimension an existing index was built with.

    Recall fails closed instead of silently comparing vectors of different models.
    """


class OwnershipError(SemanticRecallError):
    """A thread or message id is already owned by another resource or thread.

    A thread belongs to exactly one resource and a message to exactly one thread; writing
    one under another owner would let one user's data surface for another.
    """


class ThreadOwnerError(OwnershipError):
    """The thread belongs to another resource than the write's.

    Raised by a write only once no message id of it belongs to another thread (that is
    an `OwnershipError` itself): a thread stored without a resource may then be adopted.
    """


class MessageIdTakenError(OwnershipError):
    """Message ids of the write are already stored in another thread.

    Attributes:
        message_ids: Every id of the write that another thread holds (none is written).
    """

    def __init__(self, text: str, message_ids: tuple[str, ...] = ()) -> None:
        """The refusal's `text`, and every taken id of the write.

        Args:
            text: What went wrong and what to do.
            message_ids: The write's ids that other threads hold.
        """
        super().__init__(text)
        self.message_ids = message_ids

    def __reduce__(self) -> tuple[type, tuple[str, tuple[str, ...]]]:
        return type(self), (str(self), self.message_ids)


class ForgottenThreadError(SemanticRecallError):
    """A write targeted a thread that was forgotten; forgotten thread ids are retired."""


class StorageError(SemanticRecallError):
    """The message storage could not be opened or written."""


class MissingIdentityError(InvalidInputError):
    """A call needs a thread or resource id that no source gave (arguments, config, context).

    Raised instead of guessing an owner: a guessed owner would bind a conversation to the
    wrong resource for good.
    """


class IdentityMismatchError(OwnershipError, PermissionError):
    """A resource id differs from the authenticated user of a LangGraph server run.

    On an authenticated server the resource is always the signed-in user; a resource
    supplied by the client that differs is refused, never obeyed.
    """


class ReadOnlyError(SemanticRecallError):
    """A write (import, reindex, forget) was asked of an engine built with `read_only`."""


class CompactNotSupportedError(SemanticRecallError, NotImplementedError):
    """A backend cannot erase the bytes of deleted data (`purge` / `compact`).

    Raised before anything is changed, by `SemanticRecall.purge` on an engine whose
    storage or vector index has no compaction (a LangChain `VectorStore`, a custom backend).
    """


class ExportNotSupportedError(SemanticRecallError, NotImplementedError):
    """This vector index cannot list its vectors, so they cannot be exported or copied.

    Raised by `export` (at the call) on a backend without an `_export` hook, and by
    `LangChainVectorIndex` when its store's dialect cannot read vectors back.
    `semantic-recall migrate` (and `migrate`) then embeds the messages again instead of
    copying their vectors.
    """


class EngineClosedError(SemanticRecallError):
    """A `SemanticRecall` was used after `close()` / `aclose()` (or its `with` block ended).

    Closing released what the engine owned (its SQLite connection, its Chroma client):
    build a new engine (`SemanticRecall.local(path)`) to go on.
    """


class ForkedEngineError(EngineClosedError):
    """A `SemanticRecall` was used in a process forked from the one that opened it.

    Its SQLite connection, Chroma client and threads do not cross a fork: a call there
    hung (embedded Chroma) or could damage the store. Open one engine in each process,
    when it starts (gunicorn's `post_fork`, Celery's `worker_process_init`), not at import
    time under `gunicorn --preload`; with embedded Chroma, open none before the fork
    (docs/guide.md).
    """


class CommandError(SemanticRecallError):
    """A failure the `semantic-recall` command reports with a message and an exit code.

    Args:
        message: What went wrong, and what to do next.
        code: The exit code (one of the documented `cli.common.EXIT_*` codes; 1: error).
    """

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class NotFoundError(CommandError):
    """Something named on the command line does not exist (exit code 3).

    Args:
        message: What was not found, and where to look instead.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, 3)


class UsageError(CommandError):
    """Bad arguments or values on the command line (exit code 2).

    Args:
        message: What is wrong, and what to pass instead.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, 2)


PROGRAMMING_ERRORS: tuple[type[Exception], ...] = (
    TypeError,
    AttributeError,
    NameError,
    AssertionError,
)
"""Errors of code (ours, a backend's, a caller's), never of a backend being unavailable.

Recall degrades to "no recall" when the embedder, vector index or storage fails; these
are raised instead, so that a bug is seen rather than read as "nothing to remember".
"""

__all__ = [
    "PROGRAMMING_ERRORS",
    "CommandError",
    "CompactNotSupportedError",
    "EmbeddingMismatchError",
    "EngineClosedError",
    "ExportNotSupportedError",
    "ForgottenThreadError",
    "ForkedEngineError",
    "IdentityMismatchError",
    "InvalidInputError",
    "InvalidOptionError",
    "MessageIdTakenError",
    "MissingIdentityError",
    "NotFoundError",
    "OwnershipError",
    "ReadOnlyError",
    "SemanticRecallError",
    "StorageError",
    "ThreadOwnerError",
    "UsageError",
]
