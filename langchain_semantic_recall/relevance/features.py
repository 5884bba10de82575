"""What relevance knows of a query and its candidates (pure, no I/O).

Two kinds of row:

- **direct** (`DIRECT`): one per candidate (a keyword or vector match): how well the message
  itself matches the query. Every similarity is measured against the query's baseline
  (`reference.QueryBaseline`), so nothing here depends on the embedder's scale.
- **context** (`CONTEXT`): one per message in reach of the best candidates: its own direct
  row plus how well its neighbours match (`match`), so a message earns its place by what it
  and its neighbours hold, not by sitting next to a hit. The reply to a matching question
  (`match_prev_question`) is the classic case.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

import numpy as np

from langchain_semantic_recall.keywords import index_terms, query_terms, term_set
from langchain_semantic_recall.periods import CALENDAR_WORDS, Period
from langchain_semantic_recall.records import StoredMessage
from langchain_semantic_recall.relevance.reference import QueryBaseline

__all__ = [
    "CONTEXT",
    "CONVERSATIONAL",
    "DIRECT",
    "MATCH",
    "Query",
    "TermCache",
    "TextFacts",
    "asked_names",
    "content_terms",
    "context_rows",
    "direct_rows",
    "is_question",
    "other_script",
    "text_facts",
]

DIRECT: tuple[str, ...] = (
    "z",  # cosine in spreads above unrelated text (the pool's lowest when not a vector match)
    "log1p_bm25",  # raw BM25 (0 when not a keyword match)
    "coverage",  # share of the query's content terms in the message
    "question",  # the message is a question
    "user",  # written by the user (used only to choose among neighbours, see the model)
    "log1p_length",  # terms of the message
    "z_relative",  # z minus the query's best z
    "bm25_relative",  # BM25 over the query's best BM25
    "in_period",  # written in a period the query names
    "query_found",  # share of the query's content terms found in any candidate
    "name_missing",  # a capitalised name of the query is in no candidate
    "log1p_terms",  # content terms of the query
    "in_keyword",  # a keyword match
    "in_dense",  # a vector match
    "log1p_top_bm25",  # the query's best BM25
    "bm25_found",  # log1p_bm25 x query_found: keywords count when the query's words are here
    "bm25_relative_found",  # bm25_relative x query_found
    "z_found",  # z x query_found
)

MATCH: tuple[int, ...] = tuple(
    DIRECT.index(name)
    for name in ("z", "log1p_bm25", "coverage", "z_relative", "bm25_relative", "in_period")
)
"""The columns that say how well a message matches (not what kind of message it is)."""

CONTEXT: tuple[str, ...] = (
    *DIRECT,
    "match_prev",  # how well the message before matches
    "match_prev_question",  # ... when it is a question (this message may be its answer)
    "match_prev2",  # two before
    "match_prev2_question",
    "match_next",  # the message after
)

CONVERSATIONAL: frozenset[str] = frozenset(
    index_terms(
        "hi hello hey hiya howdy yo greetings morning afternoon evening night good goodbye "
        "bye see later soon cheers thanks thank thx ty appreciate welcome please sorry "
        "pardon excuse ok okay alright right sure yes yeah yep yup no nope nah maybe fine "
        "great cool nice awesome perfect wow lol haha hmm um uh oh ah well so anyway got it "
        "sounds understood agreed indeed exactly true really how going doing what up you me "
        "i can could would will help question continue go on tell more think mind never "
        "again there here that this something anything "
        # Contractions typed without the apostrophe: "whats my name" asks what "what's" does.
        "whats hows wheres whos whens whys thats cant dont wont im ive youre u ur "
        # The same in the languages users write to the package most after English
        # (each phrase's CJK pairs, `keywords.tokenize`): a "谢谢!" is small talk too.
        "谢谢 多谢 谢啦 好的 好吧 你好 您好 再见 拜拜 是的 嗯嗯 哈哈 明白 知道了 "
        "不客气 没事 早上好 晚安 "
        "ありがとう ありがとうございます どうも 了解 はい いいえ こんにちは こんばんは "
        "おはよう さようなら すみません ごめん なるほど 大丈夫 よろしく "
        "고마워 고마워요 감사합니다 감사해요 안녕 안녕하세요 알겠어요 알겠습니다 좋아요 "
        "괜찮아요 미안해요 죄송합니다 네 ㅋㅋ ㅎㅎ "
        "شكرا شكراً مرحبا أهلا سلام حسنا نعم تمام ممتاز "
        "תודה שלום בסדר כן אוקיי סבבה מעולה "
        "merci daccord bonjour salut bonsoir oui danke hallo tschüss gracias hola adiós "
        "obrigado obrigada olá grazie ciao спасибо привет пока"
    )
)
"""Stems of greetings, thanks, acknowledgements and the like: not content terms."""

_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
"""A capitalised word inside a sentence: a name the query asks about (`Query.name_missing`)."""


def asked_names(query: str) -> list[str]:
    """The index terms of the names `query` asks about (month and weekday names are times)."""
    words = [word for word in _NAME.findall(query) if word.lower() not in CALENDAR_WORDS]
    return [term for word in words for term in index_terms(word)]


def content_terms(query: str) -> list[str]:
    """The query's distinct terms that are not `CONVERSATIONAL`."""
    return [term for term in query_terms(query) if term not in CONVERSATIONAL]


_LETTER = re.compile(r"[^\W\d_]")
_LATIN = re.compile(r"[A-Za-z\u00aa\u00ba\u00c0-\u024f\u1e00-\u1eff\u2c60-\u2c7f\ua720-\ua7ff]")


def other_script(text: str, *, sample: int = 200) -> bool:
    """Whether most letters of `text` (its first `sample` characters) are not Latin.

    The shipped numbers were fitted on English conversations; with the default
    embedder, text in another script (CJK, Arabic, Hebrew, Cyrillic, ...) reads as
    related to any other text of that script, so recall is rarely silent for it
    (`docs/quality.md`, "Other languages"). Text without letters is not counted.
    """
    head = text[:sample]
    if head.isascii():
        return False  # the common case, at no cost (stats reads every message)
    letters = len(_LETTER.findall(head))
    return letters > 0 and 2 * len(_LATIN.findall(head)) < letters


def is_question(text: str) -> bool:
    """Whether `text` ends with a question mark (a trailing `[...]` note ignored).

    The note runs from the first `[` after the `]` before the last one. It is found by
    search: a regular expression for it took quadratic time over a long run of spaces
    (0.1 s for 8,000 of them, seconds for a pasted block), on every search reading it.
    """
    text = text.rstrip()
    if text.endswith("]"):
        start = text.find("[", text.rfind("]", 0, len(text) - 1) + 1)
        if start != -1:
            text = text[:start].rstrip()
    return text.endswith("?")


@dataclass(frozen=True, slots=True)
class TextFacts:
    """What relevance reads of one message's text, whatever the query."""

    terms: frozenset[str]
    """Its distinct index terms (`keywords.term_set`)."""
    log1p_length: float
    """`log1p` of how many there are."""
    question: float
    """1.0 when the text is a question (`is_question`), else 0.0."""
    bare: bool
    """No content term: every term is `CONVERSATIONAL` ("yes", "ok thanks", "Great.")."""


def text_facts(text: str) -> TextFacts:
    """`TextFacts` of `text`, worked out afresh (`TermCache` keeps them)."""
    terms = term_set(text)
    bare = terms <= CONVERSATIONAL
    return TextFacts(terms, math.log1p(len(terms)), float(is_question(text)), bare)


class TermCache:
    """`TextFacts` by message text, the last `size` texts kept: the same messages come back.

    Owned by one engine (its searches share it); `clear` it when messages are forgotten,
    since its keys are their text. `of(text)` gives the facts of `text`, worked out once
    while it stays in the cache.
    """

    def __init__(self, size: int = 8192) -> None:
        self._facts = lru_cache(maxsize=size)(text_facts)
        self.of: Callable[[str], TextFacts] = self._facts  # the cache itself: no extra call

    def clear(self) -> None:
        """Forget every text."""
        self._facts.cache_clear()

    def __len__(self) -> int:
        return self._facts.cache_info().currsize


_SPEAKER: Final = frozenset(("i", "i'm", "im", "i've", "i'd", "i'll", "my", "me", "mine", "myself"))
_LISTENER: Final = frozenset(("you", "your", "yours", "yourself", "you're", "youre", "u", "ur"))
_ASKING: Final = frozenset(
    (
        *("what", "what's", "whats", "who", "who's", "whose", "whom", "where", "where's", "when"),
        *("which", "why", "how", "how's", "do", "did", "does", "am", "is", "are", "was", "were"),
        *("hows", "wheres", "whos", "whens", "whys"),
        *("have", "has", "can", "could", "should", "would", "will"),
    )
)
_REMEMBERING: Final = frozenset(("know", "remember", "recall", "remind"))
_ENGLISH_WORD = re.compile(r"[a-z']+")


def asks_about_speaker(text: str) -> bool:
    """Whether `text` is a question about the one asking ("What's my name?", "Am I married").

    Short ones sit near small talk (MiniLM puts "What's my name?" 0.17 nearer to "how are
    you doing?" than to any unrelated sentence), so the small-talk rule silenced the
    memory's commonest question; `Evidence.is_small_talk` lets them through when something
    the user said is nearer still. One that also speaks to the listener ("Am I boring
    you?") is small talk as before, unless it asks what the listener remembers ("Do you
    know my name?"). English words only: elsewhere the rule stands as it was.
    """
    words = _ENGLISH_WORD.findall(text.lower().replace("\u2019", "'"))
    if not words or not (is_question(text) or words[0] in _ASKING):
        return False
    said = set(words)
    # "Do you remember my name?" asks the memory; "Did you get my message?" is chat.
    return not said.isdisjoint(_SPEAKER) and (
        said.isdisjoint(_LISTENER) or not said.isdisjoint(_REMEMBERING)
    )


@dataclass(frozen=True, slots=True)
class Query:
    """One query's candidates and what is known of it before any message is scored."""

    terms: tuple[str, ...]
    """Its content terms (empty: nothing to score)."""
    baseline: QueryBaseline | None
    """Its similarity to unrelated text (None: no vector half, e.g. no dense matches)."""
    cosines: Mapping[str, float]
    """Vector matches: message id -> cosine."""
    bm25: Mapping[str, float]
    """Keyword matches: message id -> raw BM25."""
    period: Period | None
    query_found: float
    name_missing: float
    keyword_coverage: float = 0.0
    """The largest share of the query's content terms that one keyword match holds."""
    about_speaker: bool = False
    """A question about the one asking (`asks_about_speaker`)."""
    top_user_statement: float | None = None
    """The best cosine among vector matches that the user said, that ask nothing (no
    question) and that hold a content word of the query: what a question about the one
    asking is answered by ("my name is Priya" for "What's my name?")."""
    texts: TermCache = field(default_factory=TermCache, compare=False, repr=False)
    """Where the messages' `TextFacts` are kept (the engine's, shared by its searches)."""
    zs: Mapping[str, float] = field(init=False, compare=False, repr=False)
    """Vector matches: message id -> `z` of its cosine (worked out once)."""
    floor_z: float = field(init=False, compare=False, repr=False)
    """The z of a message outside the vector matches: at most the pool's lowest."""
    top_z: float = field(init=False, compare=False, repr=False)
    """The best vector match's z (the floor when there is none)."""

    def __post_init__(self) -> None:
        ids = list(self.cosines)
        if ids and self.baseline is not None:
            cosines = np.fromiter(self.cosines.values(), dtype=np.float64, count=len(ids))
            z = np.asarray(self.baseline.z(cosines))
            zs = dict(zip(ids, z.tolist(), strict=True))
            floor, top = float(z.min()), float(z.max())  # z rises with the cosine
        else:
            zs, floor = dict.fromkeys(ids, 0.0), 0.0
            top = floor
        object.__setattr__(self, "zs", zs)
        object.__setattr__(self, "floor_z", floor)
        object.__setattr__(self, "top_z", top)

    @classmethod
    def build(  # noqa: PLR0917 - one argument per source of facts
        cls,
        query: str,
        dense: Sequence[tuple[str, float]],
        keyword: Sequence[tuple[str, float]],
        messages: Mapping[str, StoredMessage],
        baseline: QueryBaseline | None,
        period: Period | None,
        texts: TermCache | None = None,
    ) -> Query:
        """Gather the query-level facts over the candidates that `messages` holds.

        `texts` keeps the messages' terms between searches (None: a cache for this query).
        """
        texts = TermCache() if texts is None else texts
        terms = tuple(content_terms(query))
        cosines = {k: v for k, v in dense if k in messages}
        bm25 = {k: v for k, v in keyword if k in messages}
        names = asked_names(query)
        of = texts.of
        facts = {k: of(messages[k].text) for k in {*cosines, *bm25}}
        bags = {k: fact.terms for k, fact in facts.items()}
        said = [  # what the user said of what the query asks (`top_user_statement`)
            cosine
            for k, cosine in cosines.items()
            if messages[k].role == "user"
            and not facts[k].question
            and not bags[k].isdisjoint(terms)
        ]
        # Which of the query's terms and names some candidate holds: each bag is met with
        # those few words, not merged into the union of every candidate's terms.
        asked = frozenset((*terms, *names))
        anywhere: set[str] = set()
        for bag in bags.values():
            anywhere.update(asked.intersection(bag))
        covered = max((len(bags[k].intersection(terms)) for k in bm25), default=0)
        return cls(
            terms=terms,
            baseline=baseline,
            cosines=cosines,
            bm25=bm25,
            period=period,
            query_found=sum(t in anywhere for t in terms) / len(terms) if terms else 0.0,
            name_missing=float(any(name not in anywhere for name in names)),
            keyword_coverage=covered / len(terms) if terms else 0.0,
            about_speaker=asks_about_speaker(query),
            top_user_statement=max(said, default=None),
            texts=texts,
        )

    @property
    def said_nearer_than_small_talk(self) -> bool:
        """Whether the user said something of it nearer to it than any small-talk turn.

        Only the user's statements holding a word of the query count
        (`top_user_statement`): stored small talk is mostly questions ("How's my day
        going?" said yesterday, the assistant's "How is your day going?"), and a chatty
        statement ("my day is going ok, a bit tired") sits as near "Am I boring?" (0.31
        against small talk's 0.29) as "my name is Priya" does to "What's my name?" (0.37
        against 0.35): only the shared word tells them apart.
        """
        baseline, top = self.baseline, self.top_user_statement
        return baseline is not None and top is not None and top > baseline.small_talk_top

    @property
    def candidates(self) -> list[str]:
        """Every candidate id, sorted (ties in scores keep this order)."""
        return sorted({*self.cosines, *self.bm25})

    def z(self, cosine: float) -> float:
        """`cosine` in this query's spreads above unrelated text (0 without a baseline)."""
        return float(self.baseline.z(cosine)) if self.baseline is not None else 0.0


_COLUMN = {name: i for i, name in enumerate(DIRECT)}


def direct_rows(query: Query, messages: Sequence[StoredMessage]) -> np.ndarray:
    """One `DIRECT` row per message (a candidate or a neighbour of one), all at once."""
    rows = np.empty((len(messages), len(DIRECT)))
    if not messages:
        return rows
    terms, of, zs, bm25s, floor = query.terms, query.texts.of, query.zs, query.bm25, query.floor_z
    each: list[float] = []  # what each message's row needs, in one pass
    for message in messages:
        facts, key = of(message.text), message.id
        # A message without a content term ("yes") matches nothing by itself: any short
        # text is near a short query. It counts only through its neighbours (`context_rows`).
        own = not facts.bare
        score = bm25s.get(key, 0.0) if own else 0.0
        each += (
            zs.get(key, floor) if own else floor,
            score,
            math.log1p(score),
            len(facts.terms.intersection(terms)),
            facts.question,
            message.role == "user",
            facts.log1p_length,
            own and key in bm25s,
            own and key in zs,
        )
    table = np.fromiter(each, np.float64, len(each)).reshape(len(messages), -1)
    z, bm25, log_bm25, shared, question, user, length, keyword, dense = table.T
    top_bm25 = max(bm25s.values(), default=0.0)
    relative = bm25 / top_bm25 if top_bm25 > 0 else np.zeros(len(messages))
    found = query.query_found
    period = query.period
    c = _COLUMN
    rows[:, c["z"]] = z
    rows[:, c["log1p_bm25"]] = log_bm25
    rows[:, c["coverage"]] = shared / len(terms) if terms else 0.0
    rows[:, c["question"]] = question
    rows[:, c["user"]] = user
    rows[:, c["log1p_length"]] = length
    rows[:, c["z_relative"]] = z - query.top_z
    rows[:, c["bm25_relative"]] = relative
    rows[:, c["in_period"]] = 0.0 if period is None else [m.created_at in period for m in messages]
    rows[:, c["query_found"]] = found
    rows[:, c["name_missing"]] = query.name_missing
    rows[:, c["log1p_terms"]] = math.log1p(len(terms))
    rows[:, c["in_keyword"]] = keyword
    rows[:, c["in_dense"]] = dense
    rows[:, c["log1p_top_bm25"]] = math.log1p(top_bm25)
    rows[:, c["bm25_found"]] = log_bm25 * found
    rows[:, c["bm25_relative_found"]] = relative * found
    rows[:, c["z_found"]] = z * found
    return rows


def context_rows(
    query: Query,
    targets: Sequence[StoredMessage],
    threads: Mapping[str, Sequence[StoredMessage]],
    match_weights: np.ndarray,
) -> np.ndarray:
    """One `CONTEXT` row per target message.

    Args:
        query: The query.
        targets: The messages to score (each among `threads`' messages).
        threads: Thread id -> the messages read around the targets (at least two before
            and one after each target, where the thread has them).
        match_weights: Weights of the `MATCH` columns: a neighbour's match is its
            weighted sum, relative to a message that matches nothing.
    """
    known = {m.id: m for messages in threads.values() for m in messages}
    order = list(known.values())
    direct = direct_rows(query, order)
    nothing = np.zeros(len(DIRECT))
    nothing[_COLUMN["z"]] = query.floor_z
    nothing[_COLUMN["z_relative"]] = query.floor_z - query.top_z
    columns = list(MATCH)
    baseline = float(nothing[columns] @ match_weights)
    # Each known message's match, and its match when it is a question; a last row of
    # zeros stands for a neighbour the thread does not have (or that was not read).
    match = np.zeros(len(order) + 1)
    match[:-1] = direct[:, columns] @ match_weights - baseline
    asks = match * np.append(direct[:, _COLUMN["question"]], 0.0)
    row_of = {message_id: i for i, message_id in enumerate(known)}
    own = np.fromiter((row_of[m.id] for m in targets), np.intp, len(targets))
    near = _neighbours(order, own, _OFFSETS)
    rows = np.empty((len(targets), len(CONTEXT)))
    rows[:, : len(DIRECT)] = direct[own]
    for column, (offset, values) in enumerate(_CONTEXT_COLUMNS, start=len(DIRECT)):
        rows[:, column] = (asks if values == "asks" else match)[near[:, offset]]
    return rows


_OFFSETS = np.array([-1, -2, 1], dtype=np.int64)
"""The neighbours `CONTEXT` reads: the message before, two before, and after."""
_CONTEXT_COLUMNS = ((0, "match"), (0, "asks"), (1, "match"), (1, "asks"), (2, "match"))
"""The columns after `DIRECT`: (which of `_OFFSETS`, match or match as a question)."""


def _neighbours(order: Sequence[StoredMessage], own: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """For each of `order[own]`, the row in `order` of its neighbour at each offset.

    `len(order)` where its thread has no such message among `order`. Each message is a key
    `thread number x span + seq`, so a neighbour is a key plus its offset, found by a
    binary search in the sorted keys (`span` leaves room for the offsets between threads).
    """
    count = len(order)
    if not count or not len(own):
        return np.full((len(own), len(offsets)), count, dtype=np.intp)
    numbers: dict[str, int] = {}
    thread = np.fromiter((numbers.setdefault(m.thread_id, len(numbers)) for m in order), np.int64)
    seq = np.fromiter((m.seq for m in order), np.int64, count)
    low = int(seq.min()) + int(offsets.min())
    span = int(seq.max()) + int(offsets.max()) - low + 1
    keys = thread * span + (seq - low)
    by_key = np.argsort(keys, kind="stable")
    ordered = keys[by_key]
    wanted = keys[own][:, None] + offsets
    spot = np.minimum(np.searchsorted(ordered, wanted), count - 1)
    return np.where(ordered[spot] == wanted, by_key[spot], count).astype(np.intp)
