r"""Quoting remembered text as data: look-alike folding, escaping and per-block nonces.

Pure functions, no I/O. Recalled text is data (SPEC §10, "Authority"): it is shown on
one line after our own prefix, and text that merely *looks like* our delimiters is
neutralised visibly. Three layers:

* **A nonce per block** (`new_nonce`): the memory block's tags carry an id keyed on a
  random per-process secret, so a remembered message cannot write the closing tag,
  whatever it guesses.
* **Folding** (`fold`): NFKC, case folding, accents and invisible characters dropped,
  then a small table of look-alikes (Cyrillic and Greek letters, angle quotes, curly
  quotes) mapped to the ASCII they imitate. Used to *decide*, never shown.
* **Escaping** (`escape_memory_text`, `escape_label`):
    * line breaks (`\r\n`, `\n`, `\r`, `\v`, `\f`, `\x1c`-`\x1e`, U+0085, U+2028,
      U+2029) become `⏎` (`NEWLINE_MARK`); a literal `⏎` stays as it is, so the
      mapping is readable rather than strictly reversible;
    * other C0 controls and DEL become their Unicode Control Pictures (`\x00` -> `␀`,
      `\t` -> `␉`, `\x7f` -> `␡`); C1 controls and lone surrogates become U+FFFD;
    * bidi overrides and isolates (U+202A-U+202E, U+2066-U+2069) become U+FFFD too, so
      `<` + RLO + a reversed closing tag shows as what it is; zero-width and other
      invisible characters (U+200B-U+200F, U+061C, U+2060-U+2064, U+FEFF, U+180E, the
      tag characters U+E0000-U+E007F) are removed (`INVISIBLE`);
    * chat-template control tokens (`CONTROL_TOKEN`) lose their delimiters: `<|` and
      `|>` (also with the fullwidth bar U+FF5C of DeepSeek's tokens) become `&lt;|` and
      `|&gt;`, so `<|im_end|>` shows as `&lt;|im_end|&gt;` and no tokenizer reads it as
      its special token; `<s>`, `</s>`, `<<SYS>>`, `<start_of_turn>`, `<eos>`, ... get
      `&lt;` / `&gt;`, and the bracketed `[INST]`, `[/INST]`, `[SYSTEM_PROMPT]`,
      `[TOOL_CALLS]`, ... get parentheses: `(INST)`;
    * if the folded text mentions "remembered" (spacing, punctuation and `rn` for `m`
      ignored), every character that folds to an angle bracket (`<`, fullwidth and
      small forms, single and double angle quotes U+2039/U+203A/U+00AB/U+00BB,
      mathematical angle brackets, ...) becomes `&lt;` or `&gt;`: the closing tag
      spelt with a Cyrillic `e` (U+0435) between U+2039 and `>` is shown as
      `&lt;end_r<U+0435>membered_from_other_conversation&gt;`, its letters unchanged.
      Other text keeps its brackets (`if a < b`, `<div>`).
* **Labels** (conversation titles and thread ids, shown between `"`) get the same
  escaping, then every double-quote look-alike becomes `'`, square brackets become
  parentheses and `\` becomes `\\`, so a title can neither close its label nor start a
  forged one; a label is capped at `LABEL_MAX_CHARS` (`…` marks the cut).

Escaping is idempotent, and cuts (`cut`) never split an escape.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata
from functools import lru_cache

__all__ = [
    "BIDI_CONTROLS",
    "CONTROL_TOKEN",
    "INVISIBLE",
    "LABEL_MAX_CHARS",
    "NEWLINE_MARK",
    "cut",
    "escape_label",
    "escape_memory_text",
    "fold",
    "has_text",
    "looks_like_tag",
    "new_nonce",
    "printable",
]

NEWLINE_MARK = "\u23ce"
LABEL_MAX_CHARS = 64
"""Longest rendered (escaped) label; longer labels end with `…`."""

_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_LESS = "<\u2039\uff1c\ufe64\u2329\u3008\u27e8\u00ab\u276e\u276c\u1438\u02c2\u29fc\u276a"
_MORE = ">\u203a\uff1e\ufe65\u232a\u3009\u27e9\u00bb\u276f\u276d\u1433\u02c3\u29fd\u276b"
_QUOTES = (
    '"\u201c\u201d\u201e\u201f\u2033\u02ba\u02dd\u3003\uff02\u05f4\u02ee\u301d\u301e\u301f\u2036'
)
_OPEN_SQUARE = "\u27e6\u2045\u298b\u298d\u298f"  # not the CJK title brackets: in use
_CLOSE_SQUARE = "\u27e7\u2046\u298c\u298e\u2990"
_LOOKALIKES = {  # ASCII: characters that imitate it (lower case: folding comes first)
    "<": _LESS,
    ">": _MORE,
    '"': _QUOTES,
    "[": _OPEN_SQUARE,
    "]": _CLOSE_SQUARE,
    "a": "\u0430\u03b1",
    "b": "\u044c\u0432\u03b2\u0185",
    "c": "\u0441\u03f2",
    "d": "\u0501",
    "e": "\u0435\u0454\u03b5\u04bd",
    "h": "\u04bb",
    "i": "\u0456\u03b9\u0131\u04cf",
    "j": "\u0458",
    "k": "\u043a\u03ba",
    "m": "\u043c",
    "n": "\u0578\u03b7",
    "o": "\u043e\u03bf\u0585",
    "p": "\u0440\u03c1",
    "r": "\u0433\uab47\u2c85",
    "s": "\u0455",
    "t": "\u0442\u03c4",
    "u": "\u03c5\u057d",
    "v": "\u03bd\u0475",
    "x": "\u0445\u03c7",
    "y": "\u0443",
}
_LATIN_VARIANTS = (  # Latin Extended-A/B, IPA, phonetic, Extended Additional, -C/D/E
    *range(0x100, 0x2B0),
    *range(0x1D00, 0x1DC0),
    *range(0x1E00, 0x1F00),
    *range(0x2C60, 0x2C80),
    *range(0xA720, 0xA800),
    *range(0xAB30, 0xAB70),
)
_LATIN_NAME = re.compile(r"LATIN (?:SMALL |CAPITAL )?LETTER (?:SMALL CAPITAL )?([A-Z])(?: |$)")


def _latin_variants() -> dict[int, str]:
    """Each Latin letter with a hook, stroke, tail... or in small capitals: its base letter.

    NFKD takes accents off, but not these (`ᴇ`, `ʀ`, `ɓ`, `đ`, `ɇ`, `ɾ`): they are read
    from the Unicode names, so that no hand-kept list misses one.
    """
    found: dict[int, str] = {}
    for code in _LATIN_VARIANTS:
        match = _LATIN_NAME.match(unicodedata.name(chr(code), ""))
        if match:
            found[code] = match.group(1).lower()
    return found


_FOLD = {
    **_latin_variants(),
    **{ord(c): ascii_ for ascii_, chars in _LOOKALIKES.items() for c in chars},
}
_INVISIBLE = {"Mn", "Me", "Cf"}
BIDI_CONTROLS = frozenset(map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
"""Bidi embeddings, overrides and isolates: they reorder how the text around them shows."""
INVISIBLE = frozenset(
    map(
        chr,
        [
            *range(0x200B, 0x2010),  # zero-width space, non-joiner, joiner; LRM, RLM
            0x061C,  # Arabic letter mark
            *range(0x2060, 0x2065),  # word joiner, invisible operators
            0xFEFF,  # zero-width no-break space (byte order mark)
            0x180E,  # Mongolian vowel separator
            *range(0xE0000, 0xE0080),  # tag characters: invisible ASCII
        ],
    )
)
"""Characters that show nothing: removed from remembered text."""
_UNSEEN = dict.fromkeys(map(ord, INVISIBLE | BIDI_CONTROLS))
_BAR = "|\uff5c"
CONTROL_TOKEN = re.compile(
    rf"<(?=[{_BAR}])|(?<=[{_BAR}])>"
    r"|</?s>|<</?SYS>>|<(?:start|end)_of_turn>|<(?:bos|eos|pad|unk|mask)>"
    r"|\[/?(?:INST|SYSTEM_PROMPT|TOOL_CALLS|TOOL_RESULTS|AVAILABLE_TOOLS|TOOL_CONTENT|THINK)\]",
    re.IGNORECASE,
)
"""The delimiters of chat-template control tokens (see the module doc).

The `<|...|>` family (ChatML's `<|im_start|>` and `<|im_end|>`, `<|endoftext|>`, Llama 3's
`<|eot_id|>` and `<|start_header_id|>`, Phi's `<|end|>`, DeepSeek's with U+FF5C, ...) is
matched by its two delimiters, whatever the name; the others by name.
"""


def _controls() -> dict[int, str]:
    table = {code: chr(0x2400 + code) for code in range(0x20)}
    table[0x7F] = "\u2421"
    table.update(dict.fromkeys(range(0x80, 0xA0), "\ufffd"))
    table.update(dict.fromkeys(range(0xD800, 0xE000), "\ufffd"))
    table.update(dict.fromkeys(map(ord, _LINE_BREAKS), NEWLINE_MARK))
    table.update(dict.fromkeys(map(ord, BIDI_CONTROLS), "\ufffd"))
    table.update(dict.fromkeys(map(ord, INVISIBLE), ""))
    return table


_CONTROLS = _controls()
_SECRET = secrets.token_bytes(32)
_NOT_ALNUM = re.compile("[^a-z0-9]")
_ESCAPES = ("&lt;", "&gt;")


def has_text(text: str) -> bool:
    """Whether `text` shows anything: not only spaces, zero-width or bidi characters.

    The memory block removes those (`INVISIBLE`, `BIDI_CONTROLS`), so a message of
    nothing else would be an empty line there, and its vector the vector of no text.
    """
    stripped = text.strip()
    return bool(stripped) and (stripped.isascii() or bool(stripped.translate(_UNSEEN).strip()))


def fold(text: str) -> str:
    """The text as a reader might take it: look-alikes folded to the ASCII they imitate.

    NFKC (fullwidth and compatibility forms), case folding, accents and invisible
    characters (zero-width, bidi, soft hyphen) dropped, then the look-alike table
    (Cyrillic and Greek letters, angle quotes, curly quotes, square brackets) and every
    Latin letter variant (hooks, strokes, small capitals). Not length-preserving: use it
    to decide, never to show.

    Args:
        text: Any text.

    Returns:
        The folded text.
    """
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in _INVISIBLE)
    return kept.translate(_FOLD)


_TAG_WORD = re.compile(r"rem+e?m*b+ered")
"""The tags' word, and spellings a reader takes for it ("remebered", "remembbered")."""


def looks_like_tag(text: str) -> bool:
    """Whether the text, folded, mentions "remembered" (the word of the block's tags)."""
    return _TAG_WORD.search(_NOT_ALNUM.sub("", fold(text)).replace("rn", "m")) is not None


def escape_memory_text(text: str) -> str:
    """Make remembered text safe to quote on one line of the block (see the module doc).

    Args:
        text: Any text, including control characters and lone surrogates.

    Returns:
        The text on one line, with controls made visible and tag look-alikes neutralised.
        Idempotent: escaping an escaped text changes nothing.
    """
    one_line = CONTROL_TOKEN.sub(_token_defused, text.replace("\r\n", "\n").translate(_CONTROLS))
    return "".join(map(_defused, one_line)) if looks_like_tag(one_line) else one_line


def _token_defused(found: re.Match[str]) -> str:
    """A control token's delimiters, neutralised: `&lt;` / `&gt;`, brackets to parentheses."""
    token = found.group()
    if token.startswith("["):
        return f"({token[1:-1]})"
    return token.replace("<", _ESCAPES[0]).replace(">", _ESCAPES[1])


def printable(text: str) -> str:
    r"""Stored text made safe to print on a terminal (the CLI's tables and `inspect`).

    Line breaks and tabs stay; other controls become their Control Pictures (`\x1b` ->
    `␛`: no terminal escape sequence runs), C1 controls and lone surrogates U+FFFD, and
    every bidi control and invisible character (`BIDI_CONTROLS`, `INVISIBLE`) shows as
    its code point, `<U+202E>`: what a reader sees is what is stored.

    Args:
        text: Any text.
    """
    return text.translate(_PRINTABLE)


def _printable() -> dict[int, str]:
    table = {code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in "\n\t"}
    table[0x7F] = "\u2421"
    table.update(dict.fromkeys(range(0x80, 0xA0), "\ufffd"))
    table.update(dict.fromkeys(range(0xD800, 0xE000), "\ufffd"))
    table.update({ord(c): f"<U+{ord(c):04X}>" for c in BIDI_CONTROLS | INVISIBLE})
    return table


_PRINTABLE = _printable()


@lru_cache(maxsize=4096)
def _defused(char: str) -> str:
    """`&lt;` / `&gt;` for a character that folds to an angle bracket, else itself."""
    folded = fold(char)
    return _ESCAPES[0] if "<" in folded else _ESCAPES[1] if ">" in folded else char


@lru_cache(maxsize=4096)
def _label_safe(char: str) -> str:
    """A label character that can neither close the label nor open a forged one."""
    if char == "\\":
        return "\\\\"
    folded = fold(char) + (char if char in _QUOTES else "")
    for delimiter, replacement in (('"', "'"), ("[", "("), ("]", ")")):
        if delimiter in folded:
            return replacement
    return char


def cut(text: str, end: int) -> int:
    """The largest cut position `<= end` that splits no `&lt;` / `&gt;` of `text`.

    Args:
        text: An escaped text (`escape_memory_text`).
        end: Where the caller would like to cut.
    """
    end = max(0, min(end, len(text)))
    amp = text.rfind("&", max(0, end - 3), end)
    if amp >= 0 and text.startswith(_ESCAPES, amp) and amp + 4 > end:
        return amp
    return end


def escape_label(label: str) -> str:
    """A conversation label, safe between `"` on one line (see the module doc).

    Args:
        label: A conversation title or thread id.

    Returns:
        The label with no `"` look-alike, no square bracket and no line break, at most
        `LABEL_MAX_CHARS` long; backslashes are doubled.
    """
    escaped = "".join(map(_label_safe, escape_memory_text(label)))
    if len(escaped) <= LABEL_MAX_CHARS:
        return escaped
    end = cut(escaped, LABEL_MAX_CHARS - 1)
    if (end - len(escaped[:end].rstrip("\\"))) % 2:
        end -= 1  # an odd run of trailing backslashes: do not cut an escape in half
    return escaped[:end] + "\u2026"


def new_nonce(body: str) -> str:
    """The id of one block's tags: 16 hex digits no quoted text can guess.

    A keyed hash (HMAC-SHA256) of the block's own body under a secret drawn at random
    (`secrets`) when the process starts. A remembered message would have to contain
    the hash of a text that contains it, under a key it never sees. The same body gives
    the same id within a process, so recall stays reproducible (sync and async agree,
    prompt caches keep working); a new process draws a new key.

    Args:
        body: The block's lines between its tags.
    """
    data = body.encode("utf-8", "surrogatepass")
    return hmac.new(_SECRET, data, hashlib.sha256).hexdigest()[:16]
