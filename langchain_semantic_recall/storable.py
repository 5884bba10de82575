"""The text every backend keeps, one rule for ids, metadata values and payloads.

No NUL (PostgreSQL refuses it in text) and no lone surrogate (the unencodable half of a
pair: no UTF-8 store holds one). Pure functions, no imports of the package, so the
lowest modules (`filters`, `messages`) share them.
"""

from __future__ import annotations

__all__ = ["encodable", "storable"]


def encodable(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> bool:
    """Whether every backend keeps `text` as it is: no NUL, no lone surrogate."""
    return "\x00" not in text and encodable(text)
