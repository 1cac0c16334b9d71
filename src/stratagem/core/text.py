"""Owns cutting text for views: at word boundaries, never mid-word where it can be helped; and
telling a number's text (`is_number`).

Standard library only (policies, views and the CLI all use it).
"""

from __future__ import annotations

_SEPARATORS = "/\\,;:=)]}>|"
"""Where a single long token (a path, a URL, a dotted name) may be cut when no space is near."""


def is_number(text: str) -> bool:
    """Whether `text` is a number as `float` reads it (`3`, `-1.5e3`, `inf`)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def clip(text: str, n: int) -> str:
    """`text` within `n` characters, cut at a word boundary with `...` when longer: at the last
    space (or line break) of the first n - 3 characters, or, in one long token with no space in
    the second half, after its last separator (`/`, `,`, `:`, ...); only a token with neither
    is cut inside. Views that clip a reason give the whole of it in their `--json`."""
    if len(text) <= n:
        return text
    limit = max(0, n - 3)
    head = text[:limit]
    if limit < len(text) and not text[limit].isspace():  # the cut falls inside a word
        space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        sep = max(head.rfind(c) for c in _SEPARATORS)
        if space >= limit // 2:
            head = head[:space]
        elif sep >= limit // 2:
            head = head[: sep + 1]
        elif space > 0:
            head = head[:space]
    return head.rstrip().rstrip(";,:") + "..."
