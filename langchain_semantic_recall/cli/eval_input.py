"""`semantic-recall eval`: the dataset read and checked against the options, before loading.

Everything here runs before the store is opened, so what the dataset cannot answer (or
an option it does not use, or a `--json-out` that could not be written) is refused
before minutes of embedding.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_semantic_recall.cli.common import CommandError, NotFoundError, UsageError

__all__ = ["check", "read", "refuse_a_store"]


def refuse_a_store(args: argparse.Namespace) -> None:
    """Refuse the options that name a store: eval loads the dataset into a fresh one."""
    from langchain_semantic_recall.cli.common import index_name

    if getattr(args, "storage_url", None) or getattr(args, "vector_url", None):  # either
        raise UsageError(
            "eval loads the dataset into a fresh embedded store and does not use "
            "--storage / --vector: leave them out (--store DIR keeps the store)"
        )
    if index_name(args) is not None:
        raise UsageError(
            "eval embeds into the local model's own index of the store it loads: leave "
            "--index-name out"
        )
    if getattr(args, "path", None) is not None:  # given; $SEMANTIC_RECALL_PATH is no choice
        raise UsageError(
            "eval does not read the store at --path: it measures recall on a labelled "
            "dataset it loads into a fresh store; leave --path out (--store DIR keeps that "
            "store, in a new or empty folder)"
        )


def read(args: argparse.Namespace, path: Path) -> tuple[Any, str | None]:
    """The dataset (checked against the options) and a line saying what `--busy` added."""
    from langchain_semantic_recall import eval_paraphrase, evaluation

    if args.include_adversarial and args.format != "locomo":
        raise UsageError("--include-adversarial is for LoCoMo (category 5); drop it")
    if args.busy and args.format != "paraphrase":
        raise UsageError("--busy is for 'eval paraphrase'; drop it")
    if args.foreign and args.format == "paraphrase":  # 10.5 "false memories" a question
        raise UsageError(
            "--foreign asks each persona's questions of another persona, but the paraphrase "
            "set's personas tell the same kinds of thing (a job, a home, a child): another "
            "persona's question has true answers there, and they would be counted as false "
            "memories; drop --foreign (its small-talk and off-topic lines are asked anyway)"
        )
    if args.scope == "thread" and args.format != "locomo":
        raise UsageError(
            f"eval {args.format} asks in the question's own or a new thread; use --scope resource"
        )
    if args.format == "paraphrase":
        if not path.is_dir():
            raise NotFoundError(f"no paraphrase set folder {path}")
        if not (path / eval_paraphrase.PARAPHRASE_FILE).is_file():
            raise NotFoundError(
                f"no {eval_paraphrase.PARAPHRASE_FILE} in the paraphrase set {path}"
            )
        dataset = eval_paraphrase.read_paraphrase(path)
        if not args.busy:
            return dataset, None
        if not Path(args.busy).is_file():
            raise NotFoundError(f"no LoCoMo file {args.busy} (--busy)")
        chosen = eval_paraphrase.add_busy(dataset, args.busy)
        added = "; ".join(
            f"{r}: {len(threads)} sessions, {threads[0]} to {threads[-1]}"
            for r, threads in chosen.items()
        )
        return dataset, f"busy store: each persona also holds LoCoMo sessions ({added})"
    if not path.is_file():
        raise NotFoundError(f"no dataset file {path}")
    if args.format == "locomo":
        return evaluation.read_locomo(
            path, include_adversarial=args.include_adversarial, one_thread=args.scope == "thread"
        ), None
    return evaluation.read_eval_jsonl(path), None


def check(args: argparse.Namespace, dataset: Any, path: Path) -> None:
    """Refuse, before anything is loaded, what the dataset cannot answer.

    A file with nothing to ask is a bad input file (exit 1, as `ingest` of a file that
    yields nothing); an option it cannot use is a usage error (exit 2).
    """
    if not dataset.questions and not dataset.probes:
        skipped, examples = dataset.evidence.questions_without_evidence, dataset.evidence.examples
        why = (
            f" ({skipped} question(s) skipped: no evidence id of theirs names a message of "
            f"their resource{f'; e.g. {examples[0]}' if examples else ''})"
            if skipped
            else ""
        )
        raise CommandError(f"{path} has no question with evidence and no probe line to ask{why}")
    if not dataset.resources:
        raise CommandError(
            f"{path} holds no message: its probe lines would be asked of no resource; "
            "add the conversations they are asked of"
        )
    if not dataset.questions:
        for option, given in (("--small-talk", args.small_talk), ("--folds", args.folds)):
            if given:
                raise UsageError(
                    f"{option} reports on the resources that have questions, and {path} has "
                    "no question with evidence (probe lines only); drop it"
                )
    if args.json_out:  # before the load, which can take minutes
        out = Path(args.json_out)
        if out.is_dir():
            raise UsageError(f"--json-out {out} is a folder; give a file name")
        if not out.parent.is_dir():
            raise UsageError(f"--json-out {out}: there is no folder {out.parent} to write it in")
        _refuse_an_input(args, out, path)
    owner = dataset.thread_owners
    for line in dataset.probes:  # a question line with this fault is refused as it is read
        if line.resource is not None and owner.get(line.thread_id, line.resource) != line.resource:
            raise CommandError(
                f"a probe line for {line.resource!r} names thread {line.thread_id!r}, a "
                f"conversation of {owner[line.thread_id]!r}; name one of {line.resource!r}'s "
                "threads, or leave 'thread' out"
            )
    asked = sorted({q.sample_id for q in dataset.questions})
    if args.foreign and len(asked) < 2:
        raise UsageError(
            f"--foreign asks each resource's questions of another resource, but {path} has "
            f"questions of {len(asked)} resource(s) ({', '.join(asked) or 'none'}): they "
            "would be asked of their own memory and correct answers counted as false "
            "memories; drop --foreign or add questions of a second resource"
        )


def _refuse_an_input(args: argparse.Namespace, out: Path, path: Path) -> None:
    """Refuse a `--json-out` that would replace what the run reads or keeps.

    The dataset (a file, or the paraphrase set's folder), `--probes`, `--busy`, and
    anything inside `--store` (its manifest among them: the next run could not reuse it).

    Raises:
        UsageError: `out` is one of them.
    """
    target = out.expanduser().resolve()
    inputs = [("the dataset", path), ("--probes", args.probes), ("--busy", args.busy)]
    for name, given in inputs:
        if not given:
            continue
        source = Path(given).expanduser().resolve()
        if target == source or (source.is_dir() and target.is_relative_to(source)):
            raise UsageError(f"--json-out {out} would replace {name} ({given}); give a new file")
    if args.store and target.is_relative_to(Path(args.store).expanduser().resolve()):
        raise UsageError(
            f"--json-out {out} is inside --store {args.store}, which the next run reuses; "
            "write it elsewhere"
        )
