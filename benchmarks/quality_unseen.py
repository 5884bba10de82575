"""Recall on conversations nobody fitted on: our own hand-written facts, questions and chat.

Not a test: the check behind *Conversations nobody fitted on* in `docs/quality.md`. The
three development sets choose every fitted number; this set chose none. Eight personas
(`unseen/facts.json`) each tell the assistant five facts (allergies, work, family, plans,
health); each fact has one question that shares no content word with it (the package's
own stemmer checked that) and twenty facts have one that does (`unseen/lexical.json`).
Every persona is asked twenty small-talk lines (four of them "thanks for the ..."), twenty
chat questions about the user's own things that ask nothing a persona said ("Did you get
my message?", `unseen/personal_chat.json`), twenty questions about nothing any persona
said, and the next persona's questions.

Three stores, each a fresh `SemanticRecall.local` (SQLite, embedded Chroma, the local
model), one resource per persona, questions asked in resource scope:

- **small**: the facts alone, each with the assistant's short reply, in two threads;
- **busy**: the facts among ~300 messages of household how-to chat (`unseen/filler.json`);
- **busy-personal**: the same, half of the chat first-person ("I repainted the hallway").

Per mode (the defaults; dense mode with `top_k=5, message_range=1`, up to 15 messages;
keyword mode): the share of no-shared-word questions whose fact comes back, the same for
the questions that share words, and messages per small-talk line, off-topic question
and another persona's question.

Usage::

    .venv/bin/python benchmarks/quality_unseen.py                    # ~1 minute
    .venv/bin/python benchmarks/quality_unseen.py --stores small --personas 2   # smoke
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall

DATA = Path(__file__).resolve().parent / "unseen"
STORES = ("small", "busy", "busy-personal")
FILLER = {"busy": "filler.json", "busy-personal": "filler_personal.json"}
COLUMNS = ("paraphrase", "shared words", "small talk", "personal chat", "off-topic", "another's")
"""Found shares for the two kinds of question, then messages per line of each kind."""


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def message(role: str, text: str, message_id: str) -> BaseMessage:
    return (HumanMessage if role == "user" else AIMessage)(text, id=message_id)


def build(store: str, folder: Path, facts: list[dict[str, str]]) -> SemanticRecall:
    """A fresh store of `store`'s kind holding every persona of `facts`."""
    memory = SemanticRecall.local(folder)
    personas = list(dict.fromkeys(f["persona"] for f in facts))
    filler = load(FILLER[store]) if store in FILLER else {}
    for number, persona in enumerate(personas):
        told = [
            [("user", f["fact"], f["id"]), ("assistant", f["reply"], f"{f['id']}-r")]
            for f in facts
            if f["persona"] == persona
        ]
        if store == "small":
            threads = [[m for pair in part for m in pair] for part in (told[:3], told[3:])]
        else:  # each fact and its reply between two turns of a random thread of chat
            rng = random.Random(100 + number)
            threads = [
                [(role, text, f"{persona}-b{t}-{i}") for i, (role, text) in enumerate(chat)]
                for t, chat in enumerate(filler[persona])
            ]
            for pair in told:
                thread = rng.choice(threads)
                at = 2 * rng.randrange(len(thread) // 2 + 1)
                thread[at:at] = pair
        for t, rows in enumerate(threads):
            memory.index(
                [message(*row) for row in rows], thread_id=f"{persona}-{t}", resource_id=persona
            )
    return memory


def returned(engine: SemanticRecall, question: str, persona: str) -> list[str]:
    """The ids of every message `search` returns (hits and their windows), once each."""
    hits = engine.search(question, resource_id=persona, scope="resource")
    return list(dict.fromkeys(m.id for hit in hits for m in hit.window))


def measure(engine: SemanticRecall, facts: list[dict[str, str]]) -> dict[str, float]:
    """One row of `COLUMNS` for one engine."""
    personas = list(dict.fromkeys(f["persona"] for f in facts))
    lexical = [q for q in load("lexical.json") if q["persona"] in personas]

    def found(questions: Sequence[dict[str, str]], key: str) -> float:
        hits = [q[key] in returned(engine, q["question"], q["persona"]) for q in questions]
        return statistics.fmean(hits)

    def per_line(lines: Sequence[str]) -> float:
        return statistics.fmean(len(returned(engine, t, p)) for p in personas for t in lines)

    def another(f: dict[str, str]) -> int:
        other = personas[(personas.index(f["persona"]) + 1) % len(personas)]
        return len(returned(engine, f["question"], other))

    return {
        "paraphrase": found(facts, "id"),
        "shared words": found(lexical, "fact_id"),
        "small talk": per_line(load("smalltalk.json")),
        "personal chat": per_line(load("personal_chat.json")),
        "off-topic": per_line(load("offtopic.json")),
        "another's": statistics.fmean(another(f) for f in facts),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stores", default=",".join(STORES), help="which stores, by name")
    parser.add_argument("--personas", type=int, default=8, help="the first N personas")
    args = parser.parse_args(argv)
    facts: list[dict[str, str]] = load("facts.json")
    personas = list(dict.fromkeys(f["persona"] for f in facts))[: args.personas]
    facts = [f for f in facts if f["persona"] in personas]
    print(f"{len(personas)} personas, {len(facts)} facts; found shares, then messages per line")
    print("| store | mode | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as folder:
            memory = build(store, Path(folder), facts)
            modes = {
                "defaults": memory,
                "dense top 5 x 3": memory.with_options(
                    search_mode="dense", top_k=5, message_range=1
                ),
                "keyword": memory.with_options(search_mode="keyword"),
            }
            for mode, engine in modes.items():
                row = measure(engine, facts)
                cells = " | ".join(f"{row[c]:.3f}" for c in COLUMNS)
                print(f"| {store} | {mode} | {cells} |", flush=True)
            memory.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
