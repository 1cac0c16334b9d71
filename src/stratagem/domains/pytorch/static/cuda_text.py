"""Owns reading the top level of a CUDA source as text, the domain's one C++ lexer (the static
checks' `native_scan.py`, the split build's `build/kernel_split.py`): comments and literals
blanked, preprocessor lines, declarations and definitions as items, balanced brackets,
declared names, top-level commas. Standard library only; what it cannot read is a `NotSplit`
with the reason."""

from __future__ import annotations

import re
from dataclasses import dataclass

TYPE_HEAD = re.compile(r"^(?:typedef\s+)?(?:struct|class|union|enum)\b|^(?:typedef|using)\b")


class NotSplit(Exception):
    """The source is not split, and why (the message)."""


@dataclass(frozen=True)
class Item:
    """One top-level item of a source."""

    kind: str  # "pp" (a preprocessor line), "decl" (ends with ;) or "body" (a function or block)
    text: str
    code: str  # the text with comments and literals blanked (for searching)


def items(text: str) -> list[Item]:
    """The top-level items: preprocessor lines (with continuations), declarations ending with
    `;` and definitions ending with their closing brace (a type's or an initializer's `;`
    included)."""
    code = blank(text)
    out: list[Item] = []
    i, n, start, depth, paren = 0, len(text), 0, 0, 0
    while i < n:
        c = code[i]
        if c == "#" and depth == 0 and line_start(code, i):
            if code[start:i].strip():
                raise NotSplit("a preprocessor line inside a declaration")
            e = directive_end(text, code, i)
            if "<<<" in code[i:e]:
                raise NotSplit("a macro launches a kernel")
            out.append(Item("pp", text[i:e], code[i:e]))
            i = start = e
            continue
        depth += (c == "{") - (c == "}")
        paren += (c == "(") - (c == ")")
        if depth < 0:
            raise NotSplit("unbalanced braces")
        ends = (c == "}" and depth == 0 and paren == 0 and not needs_semicolon(code[start:i])) or (
            c == ";" and depth == 0 and paren == 0)
        if ends:
            out.append(Item("body" if c == "}" else "decl", text[start:i + 1], code[start:i + 1]))
            start = i + 1
        i += 1
    if depth != 0 or code[start:].strip():
        raise NotSplit("the source does not end at the top level")
    return [Item(it.kind, it.text.strip("\n"), it.code.strip("\n")) for it in out if it.code.strip()]


def directive_end(text: str, code: str, i: int) -> int:
    """Where the preprocessor line at `i` ends (its backslash continuations included)."""
    while True:
        e = code.find("\n", i)
        if e == -1:
            return len(text)
        if text[e - 1] != "\\":
            return e
        i = e + 1


def line_start(code: str, i: int) -> bool:
    j = code.rfind("\n", 0, i)
    return code[j + 1:i].strip() == ""


def needs_semicolon(head_and_body: str) -> bool:
    """Whether a definition at this closing brace goes on to a `;` (a type, an initializer)."""
    head = head_and_body[:head_and_body.find("{")].strip() if "{" in head_and_body else head_and_body.strip()
    head = drop_template_prefix(head)
    if re.match(r"(?:inline\s+)?namespace\b", head) or re.match(r'extern\s+"', head) and "(" not in head:
        raise NotSplit("a namespace or extern \"C\" block")
    if TYPE_HEAD.match(head):
        return True
    return "=" in re.sub(r"\([^()]*\)|\[[^\]]*\]", "", head)


def drop_template_prefix(head: str) -> str:
    while head.startswith("template"):
        k = head.find("<")
        if k == -1:
            return head
        end = match_angle(head, k)
        if end is None:
            return head
        head = head[end + 1:].strip()
    return head


def match_angle(s: str, k: int) -> int | None:
    """The index of the `>` closing the `<` at `k`."""
    return closing(s, k, "<>")


def blank(text: str, *, keep_strings: bool = False) -> str:
    """The text with comments, string and character literals replaced by spaces (newlines kept),
    so braces, names and `<<<` are searched in code only; `keep_strings`: comments only (a
    literal is kept, and still read as one, so a `//` inside it starts no comment)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            e = text.find("\n", i)
            e = n if e == -1 else e
        elif text.startswith("/*", i):
            e = text.find("*/", i + 2)
            e = n if e == -1 else e + 2
        elif c == '"' and i > 0 and text[i - 1] == "R" and (m := re.match(r'"([^(\s]{0,16})\(', text[i:])):
            e = text.find(")" + m.group(1) + '"', i)
            e = n if e == -1 else e + len(m.group(1)) + 2
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            e = i + 1
            while e < n and text[e] != c and text[e] != "\n":
                e += 2 if text[e] == "\\" else 1
            e = min(e + 1, n)
        else:
            i += 1
            continue
        quoted = c in "\"'"
        if not (quoted and keep_strings):
            for j in range(i + quoted, e - quoted):
                if out[j] != "\n":
                    out[j] = " "
        i = e
    return "".join(out)


def declared_name(it: Item) -> str | None:
    """The function's name (the name before its parameter list) or the variable's."""
    code = it.code
    head = code[:code.find("{")] if it.kind == "body" and "{" in code else code.rstrip(";")
    head = drop_template_prefix(head.strip())
    if "(" in head:
        k = last_group_open(head)
        if k is None:
            return None
        m = re.search(r"([A-Za-z_]\w*)\s*$", head[:k])
        return m.group(1) if m else None
    head = re.split(r"[=\[]", head)[0]
    m = re.search(r"([A-Za-z_]\w*)\s*$", head)
    return m.group(1) if m else None


def last_group_open(head: str) -> int | None:
    """The index of the `(` that opens the head's last top-level parenthesized group (the
    parameter list, after any `__launch_bounds__(...)`)."""
    end = head.rfind(")")
    if end == -1:
        return None
    depth = 0
    for j in range(end, -1, -1):
        if head[j] == ")":
            depth += 1
        elif head[j] == "(":
            depth -= 1
            if depth == 0:
                return j
    return None


def top_level_split(s: str, angles: bool = True) -> list[str]:
    """`s` cut at its top-level commas (`angles`: inside `<...>` is not top level, as in
    declarations; off for expressions, where `<` compares and `>>` shifts)."""
    opening, closing = ("(<[{", ")>]}") if angles else ("([{", ")]}")
    parts, depth, cur = [], 0, []
    for c in s:
        depth += (c in opening) - (c in closing)
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def opening_angle(code: str, k: int) -> int | None:
    depth = 0
    while k >= 0:
        depth += (code[k] == ">") - (code[k] == "<")
        if depth == 0:
            return k
        k -= 1
    return None


def closing(code: str, a: int, pair: str = "()") -> int | None:
    """The index of the bracket closing the one at `a` (`pair`: the opening and closing ones)."""
    depth = 0
    for b in range(a, len(code)):
        depth += (code[b] == pair[0]) - (code[b] == pair[1])
        if depth == 0:
            return b
    return None


def split_like(text: str, code: str) -> list[str]:
    """`text` cut at the top-level commas of its blanked `code`."""
    parts, start = [], 0
    for piece in top_level_split(code, angles=False):
        parts.append(text[start:start + len(piece)])
        start += len(piece) + 1
    return parts
