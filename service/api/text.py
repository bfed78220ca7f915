"""Text that cannot be encoded: lone UTF-16 surrogates in a JSON body found, with their field paths.

JSON may spell any UTF-16 code unit as ``\\uXXXX``, so ``"\\udfff"`` decodes to a Python string
holding a lone surrogate, which no UTF-8 encoder (the JSON answer, PostgreSQL, SQLite's driver)
accepts. `surrogate_issues` finds every such string, key or value, in a body, so the API refuses
it with 422 naming the field before anything stores or echoes it; `printable` makes any text safe
to echo in an answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: ``\\uD800``-``\\uDFFF`` spelled in JSON (a pair is two of them; only an unpaired one is refused).
_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_ISSUES = 20
REASON = "contains a lone UTF-16 surrogate ({}), which cannot be encoded as UTF-8"


def encodable(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """``text`` with every lone surrogate written as its ``\\uXXXX`` escape (safe to echo)."""
    return text if encodable(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def surrogate_issues(body: bytes) -> list[dict[str, Any]]:
    """The 422 ``detail`` items for every lone surrogate in a JSON ``body`` (at most `MAX_ISSUES`);
    empty when there is none or the body is not JSON (the route's own parse answers that)."""
    if _ESCAPE.search(body) is None:  # the common case: one C-speed scan, no second parse
        return []
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return []
    issues: list[dict[str, Any]] = []
    _walk(data, ["body"], issues)
    return issues


def _walk(value: Any, loc: list[str | int], issues: list[dict[str, Any]]) -> None:
    stack: list[tuple[Any, list[str | int]]] = [(value, loc)]
    while stack and len(issues) < MAX_ISSUES:
        item, where = stack.pop()
        if isinstance(item, str):
            if not encodable(item):
                issues.append(_issue(where, item))
        elif isinstance(item, dict):
            for key, sub in item.items():
                if not encodable(key):
                    issues.append(_issue([*where, printable(key)], key))
                else:
                    stack.append((sub, [*where, key]))
        elif isinstance(item, list):
            stack.extend((sub, [*where, i]) for i, sub in enumerate(item))
    issues.sort(key=lambda i: json.dumps(i["loc"]))


def _issue(loc: list[str | int], text: str) -> dict[str, Any]:
    bad = next(c for c in text if 0xD800 <= ord(c) <= 0xDFFF)
    return {"loc": loc, "msg": REASON.format(f"\\u{ord(bad):04x}"), "type": "string_unicode"}
