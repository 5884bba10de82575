"""An offline, deterministic chat model, so the demo and notebooks need no network or key.

`OfflineChatModel` quotes the remembered line (memory block, recalled messages or
tool results) that best matches the question. `default_chat_model` returns
`ChatOpenAI` when `OPENAI_API_KEY` is set, this model otherwise.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.messages import is_recalled

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    """a about after again all also am an and any are as at be been before but by can could
    did do does for from had has have how i if in into is it its just me my no not of on or
    our please remember should so some tell that the their them then there these they this
    to told us was we were what when where which who why will with would you your yours
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_DATE = re.compile(r"^the following messages are from (?P<date>.+)$")
_LINE = re.compile(
    r'^\[conversation "(?P<label>(?:[^"\\]|\\.)*)"\] Message from previous conversation at '
    r"[^:]+:\d\d [AP]M: (?P<role>\w+): (?P<text>.*)$"
)
_TOOL_HIT = re.compile(r'^\d+\. score [\d.]+, conversation "(?P<label>.*)", (?P<date>\S+)')
_TOOL_LINE = re.compile(r"^\s+[> ] (?P<role>\w+): (?P<text>.*)$")
_QUESTION_START = ("what", "which", "when", "where", "who", "how", "why", "any", "can", "do")


@dataclass(frozen=True, slots=True)
class _Remembered:
    where: str
    """Where it comes from, as the answer says it: 'In our conversation "x" (date)'."""
    role: str
    text: str


def _stems(text: str) -> set[str]:
    """Content words cut to five letters, so that "allergy" meets "allergic"."""
    return {w[:5] for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def _is_question(text: str) -> bool:
    stripped = text.strip().lower()
    return stripped.endswith("?") or stripped.startswith(_QUESTION_START)


def _remembered(messages: Sequence[BaseMessage]) -> list[_Remembered]:
    """What the model was given to remember: memory block, recalled messages, tool results."""
    found: list[_Remembered] = []
    for message in messages:
        if isinstance(message, SystemMessage) and is_recalled(message):
            date = ""
            for line in message.text.splitlines():
                if header := _DATE.match(line):
                    date = header["date"]
                elif entry := _LINE.match(line):
                    where = f'In our conversation "{entry["label"]}" ({date})'
                    found.append(_Remembered(where, entry["role"].lower(), entry["text"]))
        elif is_recalled(message):
            role = "user" if isinstance(message, HumanMessage) else "assistant"
            found.append(_Remembered("Earlier in this conversation", role, message.text))
        elif isinstance(message, ToolMessage):
            where = "My memory search found"
            for line in message.text.splitlines():
                if hit := _TOOL_HIT.match(line):
                    where = f'In our conversation "{hit["label"]}" ({hit["date"]})'
                elif entry := _TOOL_LINE.match(line):
                    found.append(_Remembered(where, entry["role"], entry["text"]))
    return found


def _best(question: str, remembered: Sequence[_Remembered]) -> int | None:
    """The remembered line sharing the rarest words with the question (IDF-weighted)."""
    stems = [_stems(r.text) for r in remembered]
    frequency = Counter(stem for line in stems for stem in line)
    wanted = _stems(question)
    best, best_score = None, 0.0
    for position, line in enumerate(stems):
        score = sum(math.log(1 + len(stems) / frequency[s]) for s in wanted & line)
        if score > best_score:
            best, best_score = position, score
    return best


def offline_answer(messages: Sequence[BaseMessage], tool_names: Sequence[str] = ()) -> AIMessage:
    """The offline model's answer (pure and deterministic).

    A statement is acknowledged. A question is answered by quoting the remembered line
    that shares the rarest words with it (and the reply that followed it, when it was a
    question of the user's). With a `search_memory` tool bound, a question that asks
    to search calls the tool first.
    """
    position = next(
        (n for n in range(len(messages) - 1, -1, -1) if isinstance(messages[n], HumanMessage)),
        None,
    )
    if position is None:
        return AIMessage("Hello! What can I do for you?")
    question = messages[position].text
    searched = any(isinstance(m, ToolMessage) for m in messages[position:])
    if "search_memory" in tool_names and "search" in question.lower() and not searched:
        call = {"name": "search_memory", "args": {"query": question}, "id": f"call_{position}"}
        return AIMessage("", tool_calls=[call])
    if not _is_question(question):
        return AIMessage("Noted, I'll remember that.")
    remembered = _remembered(messages)
    best = _best(question, remembered)
    if best is None:
        return AIMessage("I don't remember anything about that yet.")
    line = remembered[best]
    following = remembered[best + 1] if best + 1 < len(remembered) else None
    if line.role != "user":
        return AIMessage(f'{line.where} I said: "{line.text}"')
    if _is_question(line.text) and following is not None and following.where == line.where:
        return AIMessage(
            f'{line.where} you asked: "{line.text}" and I answered: "{following.text}"'
        )
    return AIMessage(f'{line.where} you said: "{line.text}"')


class OfflineChatModel(BaseChatModel):
    """A deterministic, offline stand-in for a chat model (no network, no key).

    It answers from what it is given: it acknowledges statements and answers a question
    by quoting the remembered line (memory block, recalled messages or tool results) that
    shares the most words with it. Enough to watch recall work; not a language model.

    Example:
        ```python
        model = OfflineChatModel()
        model.invoke([HumanMessage("What am I allergic to?")]).text
        ```
    """

    @property
    def _llm_type(self) -> str:
        return "semantic-recall-offline"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Remember the tools' names (only `search_memory` is ever called)."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        names = [t["function"]["name"] for t in kwargs.get("tools") or []]
        return ChatResult(generations=[ChatGeneration(message=offline_answer(messages, names))])


def default_chat_model() -> BaseChatModel:
    """`ChatOpenAI` when `OPENAI_API_KEY` is set, else `OfflineChatModel`."""
    if os.environ.get("OPENAI_API_KEY"):
        try:
            from langchain_openai import ChatOpenAI
        except ImportError as exc:
            raise InvalidOptionError(
                "OPENAI_API_KEY is set but langchain-openai is not installed: "
                "pip install 'langchain-semantic-recall[openai]' (or unset OPENAI_API_KEY "
                "to use the offline model)"
            ) from exc

        return ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), temperature=0)
    return OfflineChatModel()
