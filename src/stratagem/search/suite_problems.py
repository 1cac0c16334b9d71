"""Owns finding a suite's problems in the user's checkout (`stratagem bench SUITE_PATH`):
KernelBench's `KernelBench/level{N}/{id}_{Name}.py` (chosen with `--levels` and
`--problems`), PIKE's `level3-pike/` and `level5/` folders, and any folder of problem files
(a `problem.py` per directory as in examples/, loose problem files, or a problem's own
directory, such as a command problem's holding `problem.toml`). What a problem is, the
registered domains say (`Domain.claims`, asked through `domains.claimant`), so a plug-in
domain's problems are found too. Only paths are returned; nothing is copied out of the
checkout.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from stratagem.domains import claimant, names
from stratagem.errors import ConfigError
from stratagem.search.suite_manifest import RUNS_DIR, ProblemEntry

_LEVEL_DIR = re.compile(r"^level(?P<level>[0-9][A-Za-z0-9_-]*)$")
_KB_FILE = re.compile(r"^(?P<id>[0-9]+)_.+\.py$")
_SKIP_DIRS = frozenset({"candidates", "__pycache__", "runs", "results", "node_modules", "venv"})


def parse_ids(text: str) -> frozenset[int]:
    """`1-20`, `1,3,7-9`, or the path of a file listing ids or ranges (one or more a line, `#`
    comments) as a set of problem ids.

    Raises:
        ConfigError: a part is neither a number nor a range.
    """
    p = Path(text)
    if p.is_file():
        lines = [ln.split("#", 1)[0] for ln in p.read_text(encoding="utf-8").splitlines()]
        parts = [x for ln in lines for x in re.split(r"[,\s]+", ln) if x]
        where = f"--problems file {p}"
    else:
        parts = [x.strip() for x in text.split(",") if x.strip()]
        where = f"--problems {text!r}"
    out: set[int] = set()
    for part in parts:
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
        if m is None:
            raise ConfigError(f"{where}: {part!r} is neither a problem id nor a range (e.g. 1-20 or 1,3,7-9)")
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if hi < lo:
            raise ConfigError(f"{where}: the range {part!r} runs backwards")
        out.update(range(lo, hi + 1))
    if not out:
        raise ConfigError(f"{where}: no problem ids")
    return frozenset(out)


def parse_levels(text: str) -> tuple[str, ...]:
    """`1,2,3` or `3-pike,5` as level names (the part after `level` in a folder's name)."""
    levels = tuple(x.strip().removeprefix("level") for x in text.split(",") if x.strip())
    if not levels:
        raise ConfigError(f"--levels {text!r}: give one or more levels (e.g. 1,2,3 or 3-pike,5)")
    return levels


def level_dirs(root: Path) -> dict[str, Path]:
    """The `level*` folders of a KernelBench or PIKE checkout (under `KernelBench/` or at its
    top), by level name; empty when `root` has none (a plain folder of problems)."""
    out: dict[str, Path] = {}
    for base in (root / "KernelBench", root):
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir()):
            m = _LEVEL_DIR.match(d.name)
            if d.is_dir() and m is not None:
                out.setdefault(m.group("level"), d)
    return out


def find_problems(root: Path, levels: Sequence[str] | None = None,
                  ids: frozenset[int] | None = None) -> list[ProblemEntry]:
    """The suite's problems under `root`, in a stable order (level, then id, then path), each a
    pending entry of a new suite's manifest (its key names its run directory: `level1-19_ReLU`;
    its path is the problem file, or a command problem's directory, absolute; its level and
    number are KernelBench's or PIKE's, when the layout has them).

    A checkout with `level*` folders is read level by level (`levels`: those named, default
    every one found); any other folder is walked for problems. `ids` keeps only problems whose
    file name starts with one of those numbers.

    Raises:
        ConfigError: `root` is missing, a named level is not there, or nothing was selected.
    """
    root = root.resolve()
    if not root.exists():
        raise ConfigError(f"{root}: no such suite (give a KernelBench or PIKE checkout, or a folder of problems)")
    if root.is_file():
        found = [_problem(root, root.parent, None)]
    else:
        by_level = level_dirs(root)
        if by_level and not _LEVEL_DIR.match(root.name):
            wanted = list(levels) if levels else list(by_level)
            missing = [lv for lv in wanted if lv not in by_level]
            if missing:
                raise ConfigError(f"{root}: no level folder for --levels {','.join(missing)} "
                                  f"(found: {', '.join('level' + k for k in by_level) or 'none'})")
            found = [p for lv in wanted for p in _walk(by_level[lv], by_level[lv].parent, lv)]
        else:
            if levels:
                raise ConfigError(f"--levels: {root} has no level* folders (a KernelBench or PIKE checkout has)")
            lv = m.group("level") if (m := _LEVEL_DIR.match(root.name)) else None
            found = _walk(root, root.parent if lv else root, lv)
    if ids is not None:
        found = [p for p in found if p.number in ids]
    if not found:
        raise ConfigError(f"{root}: no problems found" + (" with those --problems ids" if ids is not None else "")
                          + f" (no file or folder there is a problem of a domain: {', '.join(names())})")
    keys = [p.key for p in found]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(f"{root}: two problems would share the run directory {dup[0]}")
    return found


def _walk(folder: Path, base: Path, level: str | None) -> list[ProblemEntry]:
    """Problems under `folder`: a directory a domain claims (a command problem's), or one
    holding a claimed problem.py, is one problem (not looked into further); elsewhere each file
    a domain claims is one."""
    out: list[ProblemEntry] = []
    if claimant(folder) is not None:
        return [_problem(folder, base, level)]
    if (folder / "problem.py").is_file() and claimant(folder / "problem.py") is not None:
        return [_problem(folder / "problem.py", base, level)]
    for p in sorted(folder.iterdir(), key=_order):
        if p.is_dir() and p.name not in _SKIP_DIRS and not p.name.startswith("."):
            out.extend(_walk(p, base, level))
        elif p.is_file() and claimant(p) is not None:
            out.append(_problem(p, base, level))
    return out


def _order(p: Path) -> tuple[int, str]:
    m = _KB_FILE.match(p.name)
    return (int(m.group("id")) if m else 1 << 30, p.name)


def _problem(path: Path, base: Path, level: str | None) -> ProblemEntry:
    shown = path.parent if path.name == "problem.py" else path
    try:
        rel = shown.relative_to(base)
    except ValueError:
        rel = Path(shown.name)
    stem = "-".join(part.removesuffix(".py") for part in rel.parts) or shown.name.removesuffix(".py")
    key = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "problem"
    m = _KB_FILE.match(path.name)
    return ProblemEntry(key=key, path=str(path.resolve()), run_dir=f"{RUNS_DIR}/{key}", level=level,
                        number=int(m.group("id")) if m else None)
