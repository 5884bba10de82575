"""Keyword search helpers: tokens, a Porter stemmer and BM25 scoring (pure, no I/O).

Every storage that searches by keyword indexes the same terms, so the embedded default
(SQLite FTS5) and the in-memory backend rank alike:

- text is case-folded and cut into runs of letters and digits; a possessive `'s` is
  dropped (`"John's"` -> `john`) and other apostrophes are removed (`don't` ->
  `dont`). Text that is not ASCII is read in NFKC first, so the same words typed in
  another form are the same terms: an accent typed as a combining mark (NFD, which would
  cut the word at the mark), fullwidth Latin and digits (`U+FF33 U+FF31` -> `sq`, from CJK
  input methods), half-width katakana;
- Chinese, Japanese and Korean are written without spaces between words (or, in Korean,
  with particles glued to them), so a run of their characters is cut into overlapping
  pairs (`CJK`: `"花生过敏"` -> `花生 生过 过敏`), as search engines index CJK when they
  have no dictionary: `花生` then matches whatever sentence it is written in. Each Han
  character and Hangul syllable of the run is a term too (`花 生 过 敏`): one is often a
  word (`娘`, `딸`) with a particle glued to it (`娘は`, `딸은`), while a kana is a sound.
  Latin letters or digits inside such a run are words of their own (`"存在PostgreSQL里"`
  -> `存在 postgresql 里`). Text without these characters is cut exactly as before;
- common English function words (`STOP_WORDS`) are dropped: they match nearly every
  message, carry no evidence and would only make the candidate lists long;
- each remaining word is reduced by the Porter stemmer (M.F. Porter, "An algorithm for
  suffix stripping", 1980; the widely used reference implementation's variant), so
  `painting`, `painted` and `paints` all match `paint`.

The stemmer is implemented here (about 150 lines, no dependency): it is small, stable
since 1980, and keeping it in the package means an index written today reads the same
with every later release.

BM25 (Robertson and Zaragoza) ranks the candidates, with the length normalisation `b`
lower than the usual 0.75: in chat, long messages are long because they say more, and
`b = 0.3` measured better on long conversations (`docs/quality.md`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "CJK",
    "KEYWORD_ROLES",
    "STOP_WORDS",
    "BM25Params",
    "bm25_ceiling",
    "bm25_idf",
    "bm25_score",
    "has_cjk",
    "index_terms",
    "message_terms",
    "query_terms",
    "rank_bm25",
    "stem",
    "term_set",
    "tokenize",
]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_POSSESSIVE = re.compile(r"['’]s$")
_APOSTROPHE = re.compile(r"['’]")

CJK: str = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0003134f"
)
"""Character ranges (a regex class body) written without spaces between words: Han
ideographs, Hiragana, Katakana (and the half-width forms) and Hangul (syllables, jamo)."""
_WORD_CHARACTER = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]"
)
"""The `CJK` characters that are a term on their own too: Han ideographs, Hangul syllables."""
_HAS_CJK = re.compile(f"[{CJK}]")
_CJK_OR_NOT = re.compile(f"[{CJK}]+|[^{CJK}]+")

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t d ll m re ve dont didnt doesnt isnt arent wasnt werent
    im ive id youre youve thats
    """.split()  # noqa: SIM905 - a word list reads best as text
)
"""Words left out of the index and the queries (they carry no evidence)."""


@dataclass(frozen=True, slots=True)
class BM25Params:
    """BM25's two constants: term-frequency saturation `k1` and length normalisation `b`."""

    k1: float = 1.2
    b: float = 0.3

    def __post_init__(self) -> None:
        if not (self.k1 >= 0 and 0.0 <= self.b <= 1.0):
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got {self}")


_NOT_ASCII_WORD = str.maketrans({c: " " for c in map(chr, range(128)) if not c.isalnum()})
"""Every ASCII character but letters and digits as a space (`tokenize`'s fast path)."""


def tokenize(text: str) -> list[str]:
    """Case-folded words of `text` in NFKC (possessives dropped, apostrophes removed).

    A run of `CJK` characters gives its overlapping pairs and its Han and Hangul
    characters instead (a lone character, itself).
    """
    text = text.casefold()
    if text.isascii() and "'" not in text:
        # Most messages: the words are the runs of letters and digits, as `_WORD` cuts
        # them, at half its cost (hybrid search works out the terms of ~35 new messages
        # per search); no CJK, and no form to normalise.
        return text.translate(_NOT_ASCII_WORD).split()
    if not text.isascii():  # one form for the same words (see the module doc)
        text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    found: list[str] = _WORD.findall(text)
    if "'" in text or "’" in text:
        words: list[str] = []
        for raw in found:
            word = (
                _APOSTROPHE.sub("", _POSSESSIVE.sub("", raw)) if "'" in raw or "’" in raw else raw
            )
            if word:
                words.append(word)
        found = words
    if _HAS_CJK.search(text) is None:
        return found  # the common case: words are cut by spaces and punctuation
    return [term for word in found for term in _cjk_terms(word)]


def has_cjk(text: str) -> bool:
    """Whether `text` holds a `CJK` character (its terms changed in schema 4 / 5)."""
    return _HAS_CJK.search(text) is not None


def _cjk_terms(word: str) -> list[str]:
    """`word`, or its CJK pairs, Han and Hangul characters and other parts."""
    if _HAS_CJK.search(word) is None:
        return [word]
    terms: list[str] = []
    for part in _CJK_OR_NOT.findall(word):
        if _HAS_CJK.match(part) is None or len(part) == 1:
            terms.append(part)
        else:
            terms.extend(part[i : i + 2] for i in range(len(part) - 1))
            terms.extend(c for c in part if _WORD_CHARACTER.match(c))
    return terms


def index_terms(text: str) -> list[str]:
    """The terms a message is indexed under, in order (repeats kept: they are its tf)."""
    return [stem(word) for word in tokenize(text) if word not in STOP_WORDS]


def term_set(text: str) -> frozenset[str]:
    """The distinct terms of `text`: `index_terms` as a set (each word stemmed once)."""
    return frozenset(map(stem, set(tokenize(text)).difference(STOP_WORDS)))


KEYWORD_ROLES: frozenset[str] = frozenset({"user", "assistant"})
"""Roles whose messages are keyword-searchable: those that get vectors too."""


def message_terms(role: str, text: str) -> list[str]:
    """The terms a stored message is keyword-searchable under (none for system/tool)."""
    return index_terms(text) if role in KEYWORD_ROLES else []


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query, in first-seen order."""
    return list(dict.fromkeys(index_terms(text)))


def bm25_ceiling(
    terms: Iterable[str], *, doc_freq: Mapping[str, int], docs: int, params: BM25Params
) -> float:
    """What no document can reach from `terms` alone: per term, BM25 < idf x (k1 + 1).

    A search that has scored every document holding its other terms can stop when its
    `limit`-th best is above this: a document holding none of them scores less.
    """
    return sum(bm25_idf(doc_freq.get(term, 0), docs) * (params.k1 + 1.0) for term in terms)


def bm25_idf(doc_freq: int, docs: int) -> float:
    """BM25's idf of a term held by `doc_freq` of `docs` documents (never negative)."""
    return math.log(1.0 + (docs - doc_freq + 0.5) / (doc_freq + 0.5))


def bm25_score(
    terms: Iterable[str],
    counts: Mapping[str, int],
    length: int,
    *,
    doc_freq: Mapping[str, int],
    docs: int,
    avg_length: float,
    params: BM25Params,
) -> float:
    """BM25 of one document for the query `terms`.

    Args:
        terms: Distinct query terms.
        counts: Term -> occurrences in the document.
        length: Number of terms in the document.
        doc_freq: Term -> documents of the collection (the search scope) containing it.
        docs: Documents in the collection.
        avg_length: Mean document length in the collection.
        params: `k1` and `b`.
    """
    k1, b = params.k1, params.b
    norm = k1 * (1.0 - b + b * length / avg_length) if avg_length > 0 else k1
    score = 0.0
    for term in terms:
        tf = counts.get(term, 0)
        if not tf:
            continue
        idf = bm25_idf(doc_freq.get(term, 0), docs)
        score += idf * tf * (k1 + 1.0) / (tf + norm)
    return score


def rank_bm25(
    terms: Sequence[str],
    candidates: Mapping[str, Sequence[str]],
    *,
    doc_freq: Mapping[str, int],
    docs: int,
    avg_length: float,
    params: BM25Params,
    limit: int,
) -> list[tuple[str, float]]:
    """The `limit` best candidates (id -> its indexed terms) by BM25, best first.

    The same sums as `bm25_score` (query terms in order), with the per-term
    constants computed once. Ties are broken by id so that every backend returns the same
    order. Candidates that share no term with the query are left out.
    """
    k1, b = params.k1, params.b
    idf = {term: bm25_idf(doc_freq.get(term, 0), docs) for term in terms}
    scored: list[tuple[str, float]] = []
    for doc_id, doc_terms in candidates.items():
        counts: dict[str, int] = {}
        for term in doc_terms:
            if term in idf:
                counts[term] = counts.get(term, 0) + 1
        if not counts:
            continue
        length = len(doc_terms)
        norm = k1 * (1.0 - b + b * length / avg_length) if avg_length > 0 else k1
        score = 0.0
        for term in terms:
            tf = counts.get(term, 0)
            if tf:
                score += idf[term] * tf * (k1 + 1.0) / (tf + norm)
        if score > 0:
            scored.append((doc_id, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


# --- the Porter stemmer ----------------------------------------------------------------

_VOWELS = frozenset("aeiou")


def _is_consonant(word: str, i: int) -> bool:
    char = word[i]
    if char in _VOWELS:
        return False
    if char == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem_: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in `[C](VC)^m[V]`."""
    m = 0
    previous_vowel = False
    for i in range(len(stem_)):
        consonant = _is_consonant(stem_, i)
        if consonant and previous_vowel:
            m += 1
        previous_vowel = not consonant
    return m


def _has_vowel(stem_: str) -> bool:
    return any(not _is_consonant(stem_, i) for i in range(len(stem_)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (`*o`)."""
    n = len(word)
    if n < 3 or word[-1] in "wxy":
        return False
    return (
        _is_consonant(word, n - 1) and not _is_consonant(word, n - 2) and _is_consonant(word, n - 3)
    )


def _replace(word: str, rules: tuple[tuple[str, str], ...], min_m: int) -> str:
    """The first rule whose suffix ends `word`; applied if the stem's m exceeds min_m."""
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem_ = word[: -len(suffix)]
            return stem_ + replacement if _measure(stem_) > min_m else word
    return word


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("logi", "log"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _by_length(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(rules, key=lambda rule: -len(rule[0])))


_STEP2_SORTED = _by_length(_STEP2)
_STEP3_SORTED = _by_length(_STEP3)
_STEP4_SORTED = tuple(sorted(_STEP4, key=len, reverse=True))


def _step1ab(word: str) -> str:
    if word.endswith(("sses", "ies")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
        return word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            word = word[: -len(suffix)]
            if word.endswith(("at", "bl", "iz")):
                return word + "e"
            if _double_consonant(word) and word[-1] not in "lsz":
                return word[:-1]
            if _measure(word) == 1 and _cvc(word):
                return word + "e"
            return word
    return word


def _step4(word: str) -> str:
    for suffix in _STEP4_SORTED:
        if word.endswith(suffix):
            stem_ = word[: -len(suffix)]
            if suffix == "ion" and not stem_.endswith(("s", "t")):
                return word
            return stem_ if _measure(stem_) > 1 else word
    return word


def _step5(word: str) -> str:
    if word.endswith("e"):
        stem_ = word[:-1]
        m = _measure(stem_)
        if m > 1 or (m == 1 and not _cvc(stem_)):
            word = stem_
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Porter stem of a lower-case word; words of 1-2 letters or non-ASCII stay as is."""
    if len(word) <= 2 or not word.isascii() or not word.isalpha():
        return word
    word = _step1ab(word)
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace(word, _STEP2_SORTED, 0)
    word = _replace(word, _STEP3_SORTED, 0)
    word = _step4(word)
    return _step5(word)
