"""What every step is: a typed record of one unit of I/O, and what it runs against."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.vector_space import VectorSpace
    from langchain_semantic_recall.storage.base import MessageStorage

T = TypeVar("T")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Backends:
    """What steps run against: the message storage and the vector space."""

    storage: MessageStorage
    vector_space: VectorSpace | None = None
    """None for an operation that asks the storage alone (`cli stats` of an embedded
    store reads the vectors' ids from Chroma's file): a vector step then fails loudly."""

    @property
    def space(self) -> VectorSpace:
        """The vector space (RuntimeError when these backends are the storage alone)."""
        if self.vector_space is None:
            raise RuntimeError("a vector step ran on backends made of the storage alone")
        return self.vector_space


class Step(ABC, Generic[R_co]):
    """One unit of I/O, performed by a driver: `run` (sync) or `arun` (async).

    A step that calls a backend names the backend's method in its own code (not as a
    string), so mypy checks every call against the backends' signatures.
    """

    heavy_after: ClassVar[bool] = False
    """Whether the operation does real CPU work with this step's answer (ranking,
    scoring and formatting after a windows read; chunking after a put): the async
    driver then resumes it in an executor, off the event loop."""

    @abstractmethod
    def run(self, backends: Backends) -> R_co:
        """Perform the step synchronously."""

    @abstractmethod
    async def arun(self, backends: Backends) -> R_co:
        """Perform the step on the event loop (or off it, in an executor)."""


Op: TypeAlias = Generator[Step[Any], Any, T]
"""An operation: yields steps, receives their results, returns `T`."""

Progress: TypeAlias = Callable[[int], None]
"""Called with the number of messages just handled (for progress bars)."""
