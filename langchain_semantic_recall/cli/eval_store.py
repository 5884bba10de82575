"""`eval --store DIR`: load a dataset once, reuse its stored vectors and messages after.

Loading embeds every message (LongMemEval's 3,712 took 10.4 min on two shared cores),
so `eval --store DIR` writes a manifest beside the store, `semantic-recall-eval.json`:
a fingerprint of the messages loaded (sha256 of every conversation's resource, thread and
messages, ids and times included), their count and the embedder: its name and a
fingerprint of its vector for a fixed text (`embedder_fingerprint`), since another build
of a model can keep its name; and what wrote them: the package version and a fingerprint
of the keyword terms (`keywords_fingerprint`), since the keyword index holds the terms
of the version that loaded it (a development checkout can change them under one version
number). The next run with the same DIR:

- same messages and embedder, written by this version, load finished: nothing is loaded
  or embedded again;
- a store another version wrote (or other keyword terms): a `UsageError` before the store
  is opened, saying to load it again; its messages, keyword index or vectors may differ
  from what this version writes (0.3 cut CJK text into pairs, put message metadata beside
  the vectors), and its figures would mix the two;
- anything else (another dataset, the same one loaded differently such as `--scope
  thread` or `--busy`, another embedder, a load that never finished, a folder that holds
  files but no manifest): a `UsageError` saying what differs, never a mixed store.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import message_to_dict

from langchain_semantic_recall.cli.common import UsageError

if TYPE_CHECKING:
    from langchain_semantic_recall.eval_records import Dataset
    from langchain_semantic_recall.recall import SemanticRecall

__all__ = [
    "EMBEDDER_PROBE",
    "MANIFEST",
    "embedder_fingerprint",
    "fingerprint",
    "keywords_fingerprint",
    "load_or_reuse",
    "read_manifest",
    "reusable",
]

MANIFEST = "semantic-recall-eval.json"
"""The manifest's file name in the store folder."""
_KIND = "semantic-recall eval store"
_COMPARED = ("messages_sha256", "messages", "embeddings", "embedder_sha256")
EMBEDDER_PROBE = "semantic-recall eval: is this the embedder that wrote the stored vectors?"
"""The text whose vector fingerprints the embedder (`embedder_fingerprint`)."""
KEYWORD_PROBE = (
    "John's cats don't like painting; cacahue\u0300tes \uff33\uff31\uff2c \uff83\uff7d\uff84 "
    "\u6211\u5bf9\u82b1\u751f\u8fc7\u654f \u5b58\u5728PostgreSQL\u91cc \ub538\uc740"
)
"""The text whose keyword terms fingerprint the tokenizer (`keywords_fingerprint`): a
possessive, an apostrophe, stop words, stems, NFD, fullwidth Latin, half-width katakana,
Chinese with Latin inside, Korean with a particle."""


def embedder_fingerprint(embeddings: Embeddings) -> str:
    """sha256 of the embedder's vector for a fixed text, rounded to 3 decimals.

    Tells apart embedders of the same name whose vectors differ (another build or size
    of the model), while the float noise of one model on two machines rounds away.
    """
    vector = [round(float(x), 3) + 0.0 for x in embeddings.embed_query(EMBEDDER_PROBE)]
    return hashlib.sha256(json.dumps(vector).encode()).hexdigest()


def keywords_fingerprint() -> str:
    """sha256 of the keyword terms a message of each role gets for `KEYWORD_PROBE`."""
    from langchain_semantic_recall.keywords import message_terms

    roles = ("user", "assistant", "system", "tool")
    terms = {role: message_terms(role, KEYWORD_PROBE) for role in roles}
    return hashlib.sha256(json.dumps(terms, ensure_ascii=False).encode()).hexdigest()


def fingerprint(dataset: Dataset) -> str:
    """sha256 of the messages `dataset` loads: resources, threads, ids, text and times."""
    digest = hashlib.sha256()
    for conversation in dataset.conversations:
        row: list[object] = [conversation.resource_id, conversation.thread_id]
        row += [message_to_dict(m) for m in conversation.messages]
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def read_manifest(store: Path) -> dict[str, Any] | None:
    """The manifest in `store`; None when the folder is missing or empty.

    Raises `UsageError` when the folder holds files but no readable manifest (it is not
    a store `eval` made, and loading into it would mix datasets), or a manifest another
    package version or other keyword terms wrote (`_check_writer`): read it before the
    engine opens the store, so a refused store is left as it was (not migrated).
    """
    if not store.exists() or (store.is_dir() and not any(store.iterdir())):
        return None
    if not store.is_dir():
        raise UsageError(f"--store {store} is a file; give a folder")
    path = store / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("kind") != _KIND:
        raise UsageError(
            f"--store {store} holds files but no eval manifest ({MANIFEST}), so what it "
            "holds is unknown; give an empty or new folder"
        )
    _check_writer(store, manifest)
    return manifest


def _check_writer(store: Path, manifest: dict[str, Any]) -> None:
    from langchain_semantic_recall import __version__

    built = manifest.get("version")
    if built != __version__:
        differs = f"was built by langchain-semantic-recall {built}, and this is {__version__}"
    elif manifest.get("keywords_sha256") != keywords_fingerprint():
        differs = (
            "holds keyword terms this checkout cuts otherwise (same version, other "
            "tokenizing; or a store from before eval checked keyword terms)"
        )
    else:
        return
    raise UsageError(
        f"--store {store} {differs}: its messages, keyword index or vectors may differ "
        "from what this version writes, and the figures would mix the two; give another "
        "folder, or delete this one to load it again"
    )


def reusable(store: Path, manifest: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether `store` already holds `wanted` (skip loading), or False for an empty one.

    Raises `UsageError` when it holds something else or an unfinished load.
    """
    if manifest is None:
        return False
    if manifest.get("status") != "complete":
        raise UsageError(
            f"an earlier load into --store {store} did not finish; delete the folder (or "
            "give another) and run again"
        )
    if manifest.get("embeddings") == wanted.get("embeddings") and manifest.get(
        "embedder_sha256"
    ) != wanted.get("embedder_sha256"):
        raise UsageError(
            f"--store {store} holds vectors of {wanted.get('embeddings')}, but this run's "
            f"{wanted.get('embeddings')} vectors differ from them (another build or size of "
            "the model, or a store from before eval checked vectors): searching them would "
            "score stale vectors; give another folder, or delete this one to load it again"
        )
    if any(manifest.get(key) != wanted.get(key) for key in _COMPARED):
        raise UsageError(
            f"--store {store} holds {_describe(manifest)}, but this run loads "
            f"{_describe(wanted)}; give another folder, or delete this one to load it again"
        )
    return True


def _describe(facts: dict[str, Any]) -> str:
    busy = f" with --busy {facts['busy']}" if facts.get("busy") else ""
    scope = f" for --scope {facts['scope']}" if facts.get("scope") else ""
    return (
        f"{facts.get('messages')} messages of {facts.get('format')} {facts.get('dataset')}"
        f"{busy}{scope} (sha256 {str(facts.get('messages_sha256'))[:12]}), embedded with "
        f"{facts.get('embeddings')}"
    )


def write_manifest(store: Path, facts: dict[str, Any], *, complete: bool) -> None:
    """Write the manifest: `facts` (`_COMPARED`, `_check_writer`), whether the load finished."""
    manifest = {"kind": _KIND, "status": "complete" if complete else "loading", **facts}
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    (store / MANIFEST).write_text(text, encoding="utf-8")


def load_or_reuse(
    memory: SemanticRecall,
    dataset: Dataset,
    store: Path | None,
    manifest: dict[str, Any] | None,
    *,
    source: dict[str, Any],
    progress: bool,
) -> float | None:
    """Load `dataset` into `memory` (the seconds it took), or None when `store` holds it.

    Args:
        memory: The engine over `store` (or over a temporary folder when `store` is None).
        dataset: What to load.
        store: `--store DIR`, or None for a temporary store (always loaded).
        manifest: `read_manifest(store)`, read before the engine created its files there.
        source: Where the dataset came from, kept in the manifest for the reader.
        progress: Draw a progress bar.
    """
    from langchain_semantic_recall import __version__, evaluation
    from langchain_semantic_recall.embeddings import embedding_model_name

    facts = {
        "messages_sha256": fingerprint(dataset),
        "messages": dataset.message_count,
        "embeddings": embedding_model_name(memory.embeddings),
        "version": __version__,
        "keywords_sha256": keywords_fingerprint(),
        **source,
    }
    if store is not None:  # one query embedding; a temporary store is never reused
        facts["embedder_sha256"] = embedder_fingerprint(memory.embeddings)
    if store is not None and reusable(store, manifest, facts):
        _check_unchanged(store, manifest or {}, memory)
        print(
            f"Reusing {store}: it holds these {dataset.message_count} messages, embedded with "
            f"{facts['embeddings']} ({MANIFEST}); nothing is loaded or embedded again"
        )
        return None
    print(
        f"Loading {dataset.message_count} messages in {len(dataset.conversations)} "
        f"threads into {store or 'a temporary store'} ..."
    )
    if store is not None:
        write_manifest(store, facts, complete=False)
    started = time.perf_counter()
    evaluation.load_dataset(memory, dataset, progress=progress)
    if store is not None:
        facts["stored"], facts["stored_sha256"] = _stored(memory)
        write_manifest(store, facts, complete=True)
    return time.perf_counter() - started


def _stored(memory: SemanticRecall) -> tuple[int, str]:
    """How many messages the store holds, and sha256 of them all (ids, threads, texts)."""
    digest, count, after = hashlib.sha256(), 0, None
    while page := memory.storage.list_messages(after=after, limit=1000):
        for m in page:
            digest.update(json.dumps([m.id, m.thread_id, m.resource_id, m.text]).encode())
        count += len(page)
        after = (page[-1].thread_id, page[-1].seq)
    return count, digest.hexdigest()


def _check_unchanged(store: Path, manifest: dict[str, Any], memory: SemanticRecall) -> None:
    """Refuse a store changed since its load (a `forget`, an `ingest` into it).

    The manifest says what was loaded, not what is there now: reused after a forget,
    the run scored the forgotten resource's questions as misses; a forget and an ingest
    of as many messages kept the count. Manifests written before this check are not
    checked.

    Raises:
        UsageError: the store holds other messages than its load left.
    """
    if (stored := manifest.get("stored")) is None:
        return
    now, digest = _stored(memory)
    if now == stored and manifest.get("stored_sha256", digest) == digest:
        return
    held = f"{now} messages, but its load left {stored}" if now != stored else "other messages"
    raise UsageError(
        f"--store {store} holds {held}: it was changed since (a forget, an ingest); "
        "delete the folder to load it again, or give another"
    )
