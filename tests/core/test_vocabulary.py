"""The generic layers name no PyTorch concept (issue 25, item 1): `torch`, `ModelNew`, `eager`,
and `compile` where it means torch.compile (the compile baseline), outside `domains/pytorch/`
and user-facing help.

What is scanned: every module of the generic layers (`GENERIC`), token by token
(`tokenize`), in two kinds kept apart:

- identifiers (NAME tokens), split into words at `_` and camel humps (lower-cased): `torch`,
  `modelnew`, `eager`, `autotune` (max-autotune), and `compile` unless the word after it says building
  (`compile_timeout_s`, `compile_limit`, `compile_stage`: `BUILD_NEXT`), and not Python's own
  (`compile(...)`, an attribute such as `re.compile`): so `COMPILE`, `vs_compile`,
  `speedup_compile`, `compile_low`, `compile_fails` count;
- the words `triton`, `torchinductor` and `inductor` in identifiers, and in text the names of
  PyTorch's, Triton's and Inductor's variables (`TORCH_EXTENSIONS_DIR`, `TRITON_CACHE_DIR`,
  `TORCHINDUCTOR_*`): the worker's environment and caches are its domain's (`Domain.worker`);
- text (strings, docstrings and comments): the words `torch` (so `torch.compile` too),
  `ModelNew`, `eager`, PyTorch's file name `candidate.py`, the mode names `max-autotune` and `reduce-overhead`, and `compile` in
  prose that names the baseline: `vs`/`over`/`against`/`than`/`and`/`or` `compile`,
  `compile baseline(s)/mode(s)/speedup(s)/ratio(s)`, `compiled
  baseline(s)/mode(s)/reference(s)`. A string that is `compile` alone is not counted: the
  sandbox's phases use it for building, and the baseline mode's constant is counted by its
  name (`COMPILE`).

`compile` as building code is generic and never counted: `compile_timeout_s`, compile limits,
stages and phases, compilers, compiling. Exempt as user-facing help: strings passed as `help=`
or `help=(...)` (typer's) or `description=` (the MCP tools') (and the strings concatenated with them), and the docstrings of `cli/` functions (typer
shows them as each command's help).

`ALLOWED` holds what remains today, per file and kind: the views now take their words from
the run's domain (`BaselineNames`: `search/numbers.py`, the design view's `compared` fields,
the confirmation round, `show`/`run`/`compare`), and stored keys are the domain's own
(`BaselineNames.key`; the key older databases used for every domain is named once, as data:
`OLD_REFERENCE_KEY`); what is left is prose in comments and docstrings that
speaks of the first domain (the loop, the paired statistics, the session), that old key's
value itself (`OLD_REFERENCE_KEY = "eager"`), the environment keys the report lists, the
analyst's `compile_text` (an alias of `compared_text`) and typer's `is_eager`, for the later
steps of issue 25 item 1. A count may only go down: a new occurrence fails the test
(which prints file, line and word), and so does a file that now has fewer than allowed (lower
its count, or drop the file, in the same change).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import Counter
from pathlib import Path

import stratagem

PKG = Path(stratagem.__file__).resolve().parent

GENERIC = ("core", "store", "search", "agents", "context", "evaluation", "report", "cli", "mcp", "worker_api",
           "config.py", "errors.py", "__init__.py", "__main__.py",
           "domains/__init__.py", "domains/base.py", "domains/prompts.py", "domains/views.py")
"""The generic layers, relative to the package: packages (every module under them) and files."""

HELP = frozenset({"help", "description"})
"""Keywords whose strings are user-facing help: typer's `help=`, the MCP tools' `description=`."""
IDENT_WORDS = frozenset({"torch", "modelnew", "eager", "autotune", "triton", "torchinductor", "inductor"})
BUILD_NEXT = frozenset({"timeout", "limit", "stage", "phase", "s", "time", "seconds"})
"""Words after `compile` in a name that make it building code (the compile limit, its stage)."""
TEXT = re.compile(
    r"\btorch\b|\bModelNew\b|\beager\b|max-autotune|reduce-overhead"
    r"|\b(?:vs\.?|over|against|than|and|or)\s+(?:torch\.)?compile\b"
    r"|\bcompile\s+(?:baseline|mode|speedup|ratio)s?\b"
    r"|\bcompiled\s+(?:baseline|mode|reference)s?\b"
    r"|(?-i:\b(?:TORCH|TORCHINDUCTOR|TRITON)_[A-Z0-9_]*)"
    r"|\bcandidate\.py\b",
    re.IGNORECASE,
)
"""What counts in strings and comments."""

ALLOWED: dict[str, tuple[int, int]] = {
    # file: (identifiers, text)
    "__init__.py": (0, 2),
    "agents/agent_command.py": (0, 1),  # prose: "PyTorch: `candidate.py`; a command problem: ..."
    "agents/analyst.py": (1, 0),
    "cli/common.py": (1, 0),
    "core/design.py": (0, 1),  # prose, as agent_command.py's
    "core/pysyntax.py": (0, 3),  # with `TORCH_LIBRARY`, a C++ marker the normal form recognises
    "core/search.py": (1, 0),
    "evaluation/api.py": (0, 1),  # prose, as agent_command.py's
    "evaluation/phases.py": (0, 1),
    "evaluation/outcome.py": (0, 1),
    "evaluation/queue.py": (0, 1),
    "evaluation/queue_worker.py": (0, 1),
    "evaluation/sandbox.py": (0, 1),
    "evaluation/worker.py": (0, 1),
    "mcp/server.py": (0, 1),  # the server's instructions to the agent: a candidate defines ModelNew
    "report/alignment.py": (0, 1),
    "report/html.py": (0, 1),
    "search/policies/tune.py": (0, 1),  # prose, as agent_command.py's
    "search/session.py": (0, 4),
    "store/records.py": (0, 1),
}
"""What remains today (see the module docstring): only ever lowered."""


def generic_files() -> list[Path]:
    out: set[Path] = set()
    for entry in GENERIC:
        p = PKG / entry
        out.update(p.rglob("*.py") if p.is_dir() else [p] if p.exists() else [])
    return sorted(out)


def _help_docstrings(tree: ast.Module, rel: str) -> set[int]:
    """The lines of the docstrings typer shows as help: those of `cli/` functions."""
    if not rel.startswith("cli/"):
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


CAMEL = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def _words(name: str) -> list[str]:
    """A name's words, lower-cased: split at `_` and at camel humps (`CompileVerdict`), with
    `ModelNew` kept whole."""
    out: list[str] = []
    for part in name.split("_"):
        out += [part.lower()] if part.lower() == "modelnew" else [w.lower() for w in CAMEL.findall(part)]
    return out


def _ident_hits(name: str, prev: str, nxt: str) -> list[str]:
    words = _words(name)
    hits = [w for w in words if w in IDENT_WORDS]
    if len(words) == 1 and (prev == "." or nxt == "("):
        return hits  # Python's compile(...), re.compile
    for i, w in enumerate(words):
        if w == "compile" and not (i + 1 < len(words) and words[i + 1] in BUILD_NEXT):
            hits.append("compile")
    return hits


def occurrences(path: Path) -> list[tuple[int, str, str]]:
    """(line, kind, word) for every PyTorch word in the file: kind `identifier` or `text`."""
    return scan(path.read_text(encoding="utf-8"), path.relative_to(PKG).as_posix())


def scan(source: str, rel: str) -> list[tuple[int, str, str]]:
    """`occurrences` of a module's source, `rel` its path in the package."""
    help_doc = _help_docstrings(ast.parse(source), rel)
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    out: list[tuple[int, str, str]] = []
    in_help = False
    for i, t in enumerate(toks):
        prev = toks[i - 1].string if i else ""
        nxt = toks[i + 1].string if i + 1 < len(toks) else ""
        if t.type == tokenize.NAME:
            out += [(t.start[0], "identifier", w) for w in _ident_hits(t.string, prev, nxt)]
            continue
        if t.type not in (tokenize.STRING, tokenize.COMMENT):  # an f-string is one STRING in 3.11
            in_help = False
            continue
        if t.type == tokenize.STRING:
            # help=..., help=(...), and the strings implicitly concatenated with it
            in_help = (prev == "=" and i >= 2 and toks[i - 2].string in HELP) or (
                prev == "(" and i >= 3 and toks[i - 2].string == "=" and toks[i - 3].string in HELP) or (
                in_help and toks[i - 1].type == tokenize.STRING)
            if in_help or t.start[0] in help_doc:
                continue
        for m in TEXT.finditer(t.string):
            out.append((t.start[0] + t.string.count("\n", 0, m.start()), "text", m.group(0)))
    return out


def counts() -> dict[str, tuple[int, int]]:
    out = {}
    for p in generic_files():
        c = Counter(kind for _, kind, _ in occurrences(p))
        if c:
            out[p.relative_to(PKG).as_posix()] = (c["identifier"], c["text"])
    return out


def test_generic_layers_name_no_pytorch_concept_beyond_what_remains() -> None:
    found = counts()
    more, fewer = [], []
    for rel in sorted(set(found) | set(ALLOWED)):
        have, allowed = found.get(rel, (0, 0)), ALLOWED.get(rel, (0, 0))
        for k, kind in enumerate(("identifier", "text")):
            if have[k] > allowed[k]:
                lines = [f"    {rel}:{line}: {word}" for line, kd, word in occurrences(PKG / rel) if kd == kind]
                more.append(f"{rel}: {have[k]} {kind} occurrences, {allowed[k]} allowed:\n" + "\n".join(lines))
            elif have[k] < allowed[k]:
                fewer.append(f"{rel}: {have[k]} {kind} occurrences, {allowed[k]} allowed: lower ALLOWED")
    assert not more, ("PyTorch words in generic layers (say it in domains/pytorch/, or ask the domain):\n"
                      + "\n".join(more))
    assert not fewer, "the allowlist only shrinks; it is out of date:\n" + "\n".join(fewer)


def test_the_scanner_tells_pytorch_compile_from_building_code() -> None:
    sample = (
        "import re\n"
        "PAT = re.compile('x')  # generic\n"
        "compile_timeout_s = 3  # the compile limit of a build: generic\n"
        "code = compile('1', 'f', 'eval')\n"
        "COMPILE = 'compile'\n"
        "def vs_compile(eager_ms):\n"
        "    '''Speedup over torch.compile, vs compile, than ModelNew.'''\n"
        "    return eager_ms\n"
    )
    got = scan(sample, "search/probe.py")
    assert [(line, kind, w.lower()) for line, kind, w in got] == [
        (5, "identifier", "compile"),
        (6, "identifier", "compile"), (6, "identifier", "eager"),
        (7, "text", "over torch.compile"), (7, "text", "vs compile"), (7, "text", "modelnew"),
        (8, "identifier", "eager"),
    ]


def test_help_strings_are_exempt() -> None:
    src = 'import typer\nopt = typer.Option(help="eager and torch.compile " "as eager")\nx = "eager"\n'
    assert scan(src, "cli/probe.py") == [(3, "text", "eager")]
    app = 'import typer\napp = typer.Typer(help=(\n    "a ModelNew "\n    "for eager"\n), x="eager")\n'
    assert scan(app, "cli/probe.py") == [(5, "text", "eager")]
    doc = 'def run():\n    """Run a search (vs eager and torch.compile)."""\n'
    assert scan(doc, "cli/probe.py") == [] and len(scan(doc, "search/probe.py")) == 2
