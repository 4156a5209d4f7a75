"""Text a store can hold. PostgreSQL refuses the NUL character in text and JSON columns, and no
store can encode a lone UTF-16 surrogate as UTF-8; both arrive easily in JSON (`\\u0000`,
`\\ud800`). Accepted, such text fails later, inside a worker, where nobody can tell the client: it is
refused where it enters, naming where it was."""

from __future__ import annotations

import re
from typing import Any

_BAD = re.compile("[\x00\ud800-\udfff]")


def flaw(text: str) -> str | None:
    """What makes `text` unstorable, or None."""
    found = _BAD.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "holds a NUL character (\\u0000)"
    return f"holds a lone surrogate (\\u{ord(found.group()):04x}), which is not valid Unicode text"


def unstorable(value: Any, where: str = "") -> tuple[str, str] | None:
    """The first place (dotted path, as `messages.0.content`) in a JSON-like value whose text (or
    key) cannot be stored, with what is wrong there; None when it all can."""
    if isinstance(value, str):
        problem = flaw(value)
        return (where or "value", problem) if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and (problem := flaw(key)):
                return (where or "object", f"has a key that {problem}")
            if found := unstorable(item, path):
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := unstorable(item, f"{where}.{i}" if where else str(i)):
                return found
    return None
