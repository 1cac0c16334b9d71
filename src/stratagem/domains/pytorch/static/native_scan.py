"""Owns scanning the C++/CUDA source a candidate carries in strings (syntax only, no compiler).

Comments are stripped and string/char literals blanked before anything is matched (`clean`:
`cuda_text.blank`, the domain's one C++ lexer), keeping offsets and newlines, so findings carry
line numbers and prose never triggers a rule. The scans are lexical: `static` variables,
namespace-scope mutable state, `__global__` kernels, `<<<...>>>` launches and a name-based call
graph from the exported functions to the launches.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from stratagem.domains.pytorch.static.cuda_text import blank as clean
from stratagem.domains.pytorch.static.cuda_text import top_level_split


def strip_preprocessor(text: str) -> str:
    """Blank preprocessor lines (with their continuations), keeping offsets."""
    return re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket closing the one at `i` (or len(text))."""
    depth = 0
    for k in range(i, len(text)):
        if text[k] == open_:
            depth += 1
        elif text[k] == close:
            depth -= 1
            if depth == 0:
                return k + 1
    return len(text)


_TYPE_WORDS = frozenset(
    "int float double char bool long short unsigned signed void size_t int64_t int32_t uint32_t "
    "uint64_t int8_t uint8_t int16_t uint16_t half auto".split()
)


def _looks_like_params(params: str) -> bool:
    """`(int a, float* b)` declares parameters; `(10)` or `(n, 0)` passes arguments."""
    p = params.strip()
    if p in ("", "void"):
        return True
    if "(" in p or "{" in p or '"' in p:
        return False
    for part in top_level_split(p):
        words = re.findall(r"[A-Za-z_]\w*", part)
        if part.strip() == "...":
            continue
        if len(words) >= 2 or (words and ("*" in part or "&" in part)) or (words and words[0] in _TYPE_WORDS):
            continue
        return False
    return True


_OK_AFTER_STATIC = re.compile(
    r"\b(?:const|constexpr|consteval|__device__|__global__|__host__|__forceinline__|inline|"
    r"__inline__|__noinline__|__shared__|__constant__|struct|class|union|enum|operator)\b"
)
_FUNC_TAIL = re.compile(r"\s*(?:\{|const\b|noexcept\b|override\b|final\b|->|throw\b|__attribute__|&)")


def static_variables(text: str) -> Iterator[tuple[int, str]]:
    """(offset, declaration) of each non-const `static` or `thread_local` variable."""
    for m in re.finditer(r"\b(?:static|thread_local)\b", text):
        rest = text[m.end():]
        stop = re.search(r"[;{=(]", rest)
        if stop is None:
            continue
        head = rest[: stop.start()]
        decl = " ".join((m.group(0) + head).split())
        if _OK_AFTER_STATIC.search(head):
            continue
        if stop.group(0) == "(":
            close = _matching(rest, stop.start(), "(", ")")
            after = rest[close:]
            if _FUNC_TAIL.match(after):
                continue
            if after.lstrip().startswith(";") and _looks_like_params(rest[stop.start() + 1: close - 1]):
                continue
        yield m.start(), decl


_STATE_TYPES = re.compile(
    r"\*|\[|\b(?:Tensor|TensorBase|Storage|DataPtr|IValue|map|unordered_map|multimap|set|unordered_set|"
    r"vector|deque|list|array|shared_ptr|unique_ptr|optional|pair|tuple|any|variant|atomic|"
    r"cudaGraph\w*|cudaStream_t|cudaEvent_t|uintptr_t|intptr_t|void)\b"
)
_SKIP_DECL = re.compile(
    r"^\s*(?:using|typedef|template|struct|class|union|enum|extern|static_assert|namespace|friend|"
    r"return|static|thread_local)\b|\b(?:const|constexpr|consteval|__device__|__constant__|"
    r"__shared__|__managed__|static|thread_local)\b"
)


@dataclass(frozen=True)
class Block:
    """A brace-delimited body at namespace scope: a function (or class) definition."""

    head: str
    head_start: int
    body: str
    name: str | None


_INITIALIZER = re.compile(r"=\s*$|\]\s*(?:\([^()]*\))?\s*(?:mutable\s*)?(?:->\s*[\w:<>]+\s*)?$")


def top_level(text: str) -> tuple[list[tuple[int, str]], list[Block]]:
    """Namespace-scope statements ending in `;` and namespace-scope `{}` bodies.

    `text` must be cleaned. Namespaces and `extern "C"` blocks are
    transparent; a `{` after `=` is an initializer, part of its statement.
    """
    text = strip_preprocessor(text)
    stmts: list[tuple[int, str]] = []
    blocks: list[Block] = []
    i, start, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            head = text[start:i]
            if re.search(r"\bnamespace\b[\w\s:]*$|\bextern\s*\"\s*\w*\s*\"\s*$", head):
                i = start = i + 1
                continue
            end = _matching(text, i, "{", "}")
            if _INITIALIZER.search(head):
                i = end  # initializer braces or a lambda body: part of the statement
                continue
            blocks.append(Block(head, start, text[i + 1: end - 1], _function_name(head)))
            i = start = end
            continue
        if c == ";":
            stmts.append((start, text[start:i]))
            start = i + 1
        elif c == "}":  # closing a namespace
            start = i + 1
        i += 1
    return stmts, blocks


_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)")
_NOT_NAMES = frozenset({"__attribute__", "alignas", "__declspec", "decltype", "if", "for", "while", "switch"})


def _function_name(head: str) -> str | None:
    h = _LAUNCH_BOUNDS.sub(" ", head)
    for m in re.finditer(r"(\w+)\s*(?:<[^;{}()]*>)?\s*\(", h):
        if m.group(1) not in _NOT_NAMES:
            return m.group(1)
    return None


def namespace_state(text: str) -> Iterator[tuple[int, str]]:
    """(offset, declaration) of namespace-scope non-const variables that can hold state."""
    stmts, _ = top_level(text)
    for start, stmt in stmts:
        s = stmt.strip()
        if not s or _SKIP_DECL.search(s):
            continue
        paren = s.find("(")
        eq = s.find("=")
        if paren >= 0 and (eq < 0 or paren < eq):
            close = _matching(s, paren, "(", ")")
            if _looks_like_params(s[paren + 1: close - 1]) and not s[close:].strip().startswith("("):
                continue  # a function prototype
        if _STATE_TYPES.search(s.split("=")[0]):
            yield start + (len(stmt) - len(stmt.lstrip())), " ".join(s.split())[:80]


_GLOBAL_KERNEL = re.compile(r"\b__global__\b")
_LAUNCH = re.compile(r"\b(\w+)\s*(?:<(?:[^;<>]|<[^;<>]*>)*>)?\s*<<<")
_API_LAUNCH = re.compile(r"\b(?:cudaLaunch\w*|cuLaunch\w*)\s*\(([^;]*)")


@dataclass(frozen=True)
class NativeProgram:
    """The functions of one extension's sources (cleaned, preprocessor-free)."""

    functions: dict[str, list[str]]
    kernels: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> NativeProgram:
        _, blocks = top_level(text)
        functions: dict[str, list[str]] = {}
        kernels: set[str] = set()
        for b in blocks:
            if b.name is None:
                continue
            functions.setdefault(b.name, []).append(b.body)
            if _GLOBAL_KERNEL.search(b.head):
                kernels.add(b.name)
        return cls(functions, frozenset(kernels))

    def launches(self, body: str) -> set[str]:
        out = {m.group(1) for m in _LAUNCH.finditer(body)} & self.kernels
        for m in _API_LAUNCH.finditer(body):
            out |= set(re.findall(r"\w+", m.group(1))) & self.kernels
        return out

    def reachable(self, roots: set[str]) -> set[str]:
        """The functions `roots` are or call, directly or not (by name, over-approximated)."""
        seen: set[str] = set()
        todo = [r for r in roots if r in self.functions]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for body in self.functions[name]:
                todo.extend(set(re.findall(r"\b\w+\b", body)) & self.functions.keys())
        return seen

    def launched_from(self, roots: set[str]) -> set[str]:
        """Kernels launched by `roots` or anything they call (by name, over-approximated)."""
        return {k for name in self.reachable(roots) for body in self.functions[name] for k in self.launches(body)}


_PYBIND_DEF = re.compile(r"\.\s*def\s*\(\s*\"(\w+)\"\s*,\s*&?\s*(?:\w+::)*(\w+)")


def pybind_exports(text: str) -> dict[str, str]:
    """python name -> C++ function, from `m.def("name", &fn)` lines."""
    return {m.group(1): m.group(2) for m in _PYBIND_DEF.finditer(clean(text, keep_strings=True))}
