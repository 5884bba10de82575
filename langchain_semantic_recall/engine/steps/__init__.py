"""The I/O an operation asks for, as typed step records, and the two drivers that perform it.

An operation is a generator: it yields a `Step` (embed these texts, read these
windows, write these records...), receives the step's result (or, if the step raised,
the exception, thrown in at the `yield`), and returns its answer. All decisions live
in the generator, written once; `drive` performs the steps with the backends'
synchronous methods and `adrive` with their async twins (LangGraph's `BaseStore.batch`
/ `abatch` and its `GetOp`/`PutOp` records are the model). Each record calls its
backend method by name in code, so mypy checks every call. For example,
`drive(owner_op("t1"), backends)` or `await adrive(owner_op("t1"), backends)` with:

```python
def owner_op(thread_id: str) -> Op[str | None]:
    return (yield ThreadOwner(thread_id))
```

- `base`: `Step`, `Op`, `Backends`.
- `storage`: one record per `MessageStorage` call.
- `vectors`: embedding (through the cache) and one record per `VectorIndex` call.
- `drivers`: `drive`, `adrive`, and the steps that compose others (`Background`,
  `Settle`, `Nested`, `Both`).
"""

from langchain_semantic_recall.engine.steps.base import Backends, Op, Progress, Step
from langchain_semantic_recall.engine.steps.drivers import (
    Background,
    Both,
    Nested,
    Settle,
    adrive,
    drive,
)
from langchain_semantic_recall.engine.steps.storage import (
    AdoptThread,
    CompactStorage,
    CountMessages,
    DeleteBefore,
    DeleteResource,
    DeleteThread,
    IdsInScope,
    IsForgotten,
    KeptShare,
    KeywordSearch,
    LastMessages,
    ListMessages,
    ListThreads,
    MoveThread,
    PutMessages,
    ReadWindows,
    ThreadOwner,
    UnretireThread,
)
from langchain_semantic_recall.engine.steps.vectors import (
    ClearCaches,
    CompactVectors,
    DeleteVectors,
    Embed,
    EmbedEach,
    NearestMessages,
    OpenIndex,
    ProbeDimension,
    UpsertVectors,
    VectorIds,
    VectorMessageIds,
    WriteFailures,
)

__all__ = [
    "AdoptThread",
    "Backends",
    "Background",
    "Both",
    "ClearCaches",
    "CompactStorage",
    "CompactVectors",
    "CountMessages",
    "DeleteBefore",
    "DeleteResource",
    "DeleteThread",
    "DeleteVectors",
    "Embed",
    "EmbedEach",
    "IdsInScope",
    "IsForgotten",
    "KeptShare",
    "KeywordSearch",
    "LastMessages",
    "ListMessages",
    "ListThreads",
    "MoveThread",
    "NearestMessages",
    "Nested",
    "Op",
    "OpenIndex",
    "ProbeDimension",
    "Progress",
    "PutMessages",
    "ReadWindows",
    "Settle",
    "Step",
    "ThreadOwner",
    "UnretireThread",
    "UpsertVectors",
    "VectorIds",
    "VectorMessageIds",
    "WriteFailures",
    "adrive",
    "drive",
]
