"""Keyword terms: tokens, stop words, the Porter stemmer and BM25 (pure functions)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from langchain_semantic_recall.keywords import (
    STOP_WORDS,
    BM25Params,
    bm25_score,
    has_cjk,
    index_terms,
    message_terms,
    query_terms,
    rank_bm25,
    stem,
    term_set,
    tokenize,
)

# Pairs from Porter's paper and the reference implementation's vocabulary.
PORTER = {
    "caresses": "caress",
    "ponies": "poni",
    "ties": "ti",
    "caress": "caress",
    "cats": "cat",
    "feed": "feed",
    "agreed": "agre",
    "plastered": "plaster",
    "bled": "bled",
    "motoring": "motor",
    "sing": "sing",
    "conflated": "conflat",
    "troubled": "troubl",
    "sized": "size",
    "hopping": "hop",
    "tanned": "tan",
    "falling": "fall",
    "hissing": "hiss",
    "fizzed": "fizz",
    "failing": "fail",
    "filing": "file",
    "happy": "happi",
    "sky": "sky",
    "relational": "relat",
    "conditional": "condit",
    "rational": "ration",
    "digitizer": "digit",
    "operator": "oper",
    "hopefulness": "hope",
    "goodness": "good",
    "revival": "reviv",
    "allowance": "allow",
    "inference": "infer",
    "airliner": "airlin",
    "adjustable": "adjust",
    "adjustment": "adjust",
    "dependent": "depend",
    "adoption": "adopt",
    "communism": "commun",
    "activate": "activ",
    "effective": "effect",
    "probate": "probat",
    "rate": "rate",
    "cease": "ceas",
    "controlling": "control",
    "generalizations": "gener",
    "oscillators": "oscil",
    "roll": "roll",
}


@pytest.mark.parametrize(("word", "expected"), sorted(PORTER.items()))
def test_porter_stemmer_matches_the_reference(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_word_forms_share_a_stem() -> None:
    assert {stem(w) for w in ("paint", "paints", "painted", "painting")} == {"paint"}
    assert stem("camping") == stem("camped") == stem("camps")


def test_short_and_non_ascii_words_are_left_alone() -> None:
    assert stem("is") == "is"
    assert stem("café") == "café"
    assert stem("2023") == "2023"


def test_tokenize_folds_case_drops_possessives_and_apostrophes() -> None:
    assert tokenize("John's DOG didn't bark—at Café Zoë’s!") == [
        "john",
        "dog",
        "didnt",
        "bark",
        "at",
        "café",
        "zoë",
    ]
    assert tokenize("snake_case and 8 May, 2023") == ["snake", "case", "and", "8", "may", "2023"]


def test_cjk_runs_are_cut_into_overlapping_pairs() -> None:
    """Chinese and Japanese have no spaces, Korean glues particles to words: a run was one
    term (a whole clause, matching nothing else); its pairs, and its Han and Hangul
    characters, match the same words in any sentence. Latin words and digits inside a
    run are words of their own."""
    assert tokenize("花生过敏。请记住") == [
        *("花生", "生过", "过敏", "花", "生", "过", "敏"),
        *("请记", "记住", "请", "记", "住"),
    ]
    assert {"我对", "过敏", "过", "敏"} <= set(query_terms("我对什么过敏？"))
    assert set(query_terms("我对什么过敏？")) & set(index_terms("我对花生过敏")) == {
        *("我对", "过敏", "我", "对", "过", "敏"),
    }
    assert tokenize("存在PostgreSQL16里") == ["存在", "存", "在", "postgresql16", "里"]
    assert tokenize("ピーナッツ") == ["ピー", "ーナ", "ナッ", "ッツ"]  # kana are sounds
    assert tokenize("娘は") == ["娘は", "娘"]
    assert tokenize("딸은 좋아") == ["딸은", "딸", "은", "좋아", "좋", "아"]
    assert tokenize("中 a") == ["中", "a"]
    assert has_cjk("ok 谢谢")
    assert has_cjk("ㅋㅋ")
    assert not has_cjk("café ½ 😀 مرحبا")


def test_text_is_read_in_one_unicode_form() -> None:
    """The same words typed in another Unicode form are the same terms: accents typed as
    combining marks (NFD, as macOS and some clients send them) cut a word in two at the
    mark, and fullwidth Latin (CJK input methods) matched no plain Latin."""
    import unicodedata

    sentence = "Je suis allergique aux cacahuètes, café, 땅콩 알레르기"
    assert index_terms(unicodedata.normalize("NFD", sentence)) == index_terms(sentence)
    assert "cacahuètes" in index_terms(unicodedata.normalize("NFD", sentence))
    assert query_terms("ＰｏｓｔｇｒｅＳＱＬ　１６") == ["postgresql", "16"]
    assert tokenize("ﾋﾟｰﾅｯﾂ") == tokenize("ピーナッツ")  # half-width katakana


_OLD_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def _tokenize_before_cjk(text: str) -> list[str]:
    """`tokenize` as it was before CJK pairs and NFKC (schema 3 / 4 indexes hold its terms)."""
    words = []
    for raw in _OLD_WORD.findall(text.casefold()):
        word = re.sub(r"['’]", "", re.sub(r"['’]s$", "", raw))
        if word:
            words.append(word)
    return words


@given(st.text(max_size=80).filter(lambda text: not has_cjk(text)))
def test_text_without_cjk_in_one_form_is_cut_as_before(text: str) -> None:
    """Only text holding CJK or not in NFKC has new terms: ASCII never has, and the
    migration re-indexes the messages whose terms changed, and only them."""
    import unicodedata

    assume(unicodedata.is_normalized("NFKC", text))
    assume(unicodedata.is_normalized("NFKC", text.casefold()))
    assert tokenize(text) == _tokenize_before_cjk(text)


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=120))
def test_ascii_text_is_cut_as_the_word_pattern_cuts_it(text: str) -> None:
    """ASCII text without an apostrophe takes a faster path: the same words."""
    assert tokenize(text) == _tokenize_before_cjk(text)
    assert tokenize(text + "'") == _tokenize_before_cjk(text + "'")


def test_index_terms_drop_stop_words_and_keep_repeats() -> None:
    assert index_terms("What did Melanie paint? She painted the lake and the lake.") == [
        "melani",
        "paint",
        "paint",
        "lake",
        "lake",
    ]
    assert {"what", "the", "did", "didnt", "she"} <= STOP_WORDS


def test_query_terms_are_distinct_in_order() -> None:
    assert query_terms("lake, lakes and the Lake house") == ["lake", "hous"]
    assert query_terms("what is the") == []


def test_only_user_and_assistant_messages_have_terms() -> None:
    assert message_terms("user", "Harbour") == ["harbour"]
    assert message_terms("assistant", "Harbour") == ["harbour"]
    assert message_terms("system", "Harbour") == []
    assert message_terms("tool", "Harbour") == []


def test_bm25_params_are_validated() -> None:
    assert BM25Params() == BM25Params(k1=1.2, b=0.3)
    with pytest.raises(ValueError, match="BM25"):
        BM25Params(b=1.5)
    with pytest.raises(ValueError, match="BM25"):
        BM25Params(k1=-1)


def score(tf: int, length: int, *, df: int = 1, b: float = 0.3) -> float:
    return bm25_score(
        ["x"],
        {"x": tf},
        length,
        doc_freq={"x": df},
        docs=10,
        avg_length=5.0,
        params=BM25Params(b=b),
    )


def test_bm25_grows_with_term_frequency_and_saturates() -> None:
    one, two, ten, hundred = score(1, 5), score(2, 5), score(10, 5), score(100, 5)
    assert one < two < ten < hundred < 2.2 * math.log(1 + 9.5 / 1.5)
    assert hundred - ten < two - one


def test_bm25_rarer_terms_weigh_more_and_length_matters_by_b() -> None:
    assert score(1, 5, df=1) > score(1, 5, df=8)
    assert score(1, 20, b=0.75) < score(1, 20, b=0.3) < score(1, 20, b=0.0)
    assert score(1, 20, b=0.0) == pytest.approx(score(1, 2, b=0.0))
    assert score(0, 5) == 0.0


def test_rank_bm25_equals_bm25_score_and_breaks_ties_by_id() -> None:
    candidates = {
        "b": ["lake", "boat", "lake"],
        "a": ["lake", "boat", "lake"],
        "c": ["boat"],
        "d": ["tree"],
    }
    params = BM25Params()
    doc_freq = {"lake": 2, "boat": 3}
    ranked = rank_bm25(
        ["lake", "boat"],
        candidates,
        doc_freq=doc_freq,
        docs=4,
        avg_length=2.25,
        params=params,
        limit=10,
    )
    assert [key for key, _ in ranked] == ["a", "b", "c"]
    for key, value in ranked:
        terms = candidates[key]
        expected = bm25_score(
            ["lake", "boat"],
            {t: terms.count(t) for t in set(terms)},
            len(terms),
            doc_freq=doc_freq,
            docs=4,
            avg_length=2.25,
            params=params,
        )
        assert value == pytest.approx(expected, rel=1e-12)
    assert (
        len(
            rank_bm25(
                ["lake"],
                candidates,
                doc_freq=doc_freq,
                docs=4,
                avg_length=2,
                params=params,
                limit=1,
            )
        )
        == 1
    )


@given(st.text(alphabet=st.sampled_from("abcdeiostyz'’ ,.?!-_ÉéÅ1花生过敏ピー땅콩"), max_size=60))
def test_term_set_is_the_set_of_index_terms(text: str) -> None:
    assert term_set(text) == frozenset(index_terms(text))
