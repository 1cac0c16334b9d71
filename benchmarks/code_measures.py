"""The code's size and shape, as the architecture reviews measure it (issue 45): lines, modules
over the soft cap, functions over complexity 10 (ruff's mccabe) and over 60 lines, classes with
more than 15 public methods, the Domain protocol's members, stubs and side doors past it, and
duplicate pairs (the `duplicates` command, where it is installed). Prints one table; then,
for every built-in domain's worker and judge module (issue 61), the modules a fresh process
loads to import it, whether pydantic is among them, and its import time (median of 3 fresh
processes; again with torch loaded first, where it is installed).

    python benchmarks/code_measures.py [SRC_DIR]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)


def _complex(src: Path, over: int) -> int:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    out = subprocess.run([ruff, "check", "--isolated", "--select", "C901", "--output-format", "json",
                          "--config", f"lint.mccabe.max-complexity={over}", str(src)],
                         capture_output=True, text=True, check=False).stdout
    return len(json.loads(out or "[]"))


def _long_functions(trees: dict[Path, ast.Module], over: int) -> int:
    return sum(1 for t in trees.values() for n in ast.walk(t)
               if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and (n.end_lineno or n.lineno) - n.lineno + 1 > over)


def _wide_classes(trees: dict[Path, ast.Module], over: int) -> int:
    count = 0
    for t in trees.values():
        for n in ast.walk(t):
            if isinstance(n, ast.ClassDef):
                public = [f for f in n.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                          and not f.name.startswith("_")]
                count += len(public) > over
    return count


def _protocol_members(trees: dict[Path, ast.Module], path: Path, name: str) -> tuple[int, int] | None:
    """The class's public members, and those of them every subclass must write (abstract
    methods, annotations without a value)."""
    tree = trees.get(path)
    for n in ast.walk(tree) if tree is not None else ():
        if isinstance(n, ast.ClassDef) and n.name == name:
            public = [f for f in n.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef | ast.AnnAssign)
                      and not getattr(f, "name", "").startswith("_")]
            required = [f for f in public if (isinstance(f, ast.AnnAssign) and f.value is None) or any(
                getattr(d, "id", None) == "abstractmethod" for d in getattr(f, "decorator_list", ()))]
            return len(public), len(required)
    return None


def _duplicates(src: Path) -> str:
    tool = shutil.which("duplicates")
    if tool is None:
        return "n/a (the duplicates command is not installed)"
    out = subprocess.run([tool, "--seconds", "120"], cwd=src, capture_output=True, text=True, check=False).stdout
    m = re.match(r"(\d+) pairs", out)
    return m.group(1) if m else (out.splitlines() or ["?"])[0]


_LOADS = """
import json, sys, time
pre = sys.argv[2] == "1"
if pre:
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
t = time.perf_counter()
for name in sys.argv[1].split(","):
    __import__(name)
ms = (time.perf_counter() - t) * 1e3
ours = [m for m in sys.modules if m.split(".")[0] == "stratagem"]
print(json.dumps({"ms": ms, "ours": len(ours), "all": len(sys.modules), "pydantic": "pydantic" in sys.modules}))
"""


def _entry_points(src: Path) -> list[str]:
    """Every built-in domain's worker and judge module, read from the registry in a child of
    the tree measured."""
    code = ("import json; from stratagem.domains import BUILTIN, get_domain; "
            "print(json.dumps([m for n in BUILTIN for m in (get_domain(n).worker.module, get_domain(n).worker.judge_module) if m]))")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(src)}, capture_output=True, text=True, check=True)
    return ["stratagem.evaluation.worker", "stratagem.evaluation.judge", *json.loads(out.stdout), EVAL_PARENT]


EVAL_PARENT = "stratagem.cli.evaluate,stratagem.evaluation.api,stratagem.report.live,stratagem.domains.pytorch.domain"
"""What `stratagem eval` imports in the parent for a PyTorch design (its command, the library
call, the live view, the domain)."""


def _loads(src: Path, module: str, torch_first: bool) -> dict[str, float]:
    runs = [json.loads(subprocess.run([sys.executable, "-c", _LOADS, module, "1" if torch_first else "0"],
                                      env={"PYTHONPATH": str(src)}, capture_output=True, text=True, check=True).stdout)
            for _ in range(3)]
    return {**runs[0], "ms": sorted(r["ms"] for r in runs)[1]}


def entry_point_measures(src: Path) -> list[tuple[str, str]]:
    """Per worker or judge entry point: stratagem modules / all modules loaded, pydantic
    loaded or not, import ms cold and with torch already loaded."""
    rows = []
    for m in _entry_points(src):
        cold, warm = _loads(src, m, False), _loads(src, m, True)
        rows.append(("stratagem eval's parent" if m == EVAL_PARENT else m, f"{cold['ours']:.0f} / {cold['all']:.0f} modules, pydantic {'yes' if cold['pydantic'] else 'no'}, "
                        f"{cold['ms']:.0f} ms ({warm['ms']:.0f} ms after torch)"))
    return rows


def measures(src: Path) -> list[tuple[str, str]]:
    mods = _modules(src)
    texts = {p: p.read_text() for p in mods}
    trees = {p: ast.parse(t) for p, t in texts.items()}
    lines = {p: t.count("\n") for p, t in texts.items()}
    generic = [p for p in mods if "domains" not in p.relative_to(src).parts]
    base = src / "stratagem" / "domains" / "base.py"
    return [
        ("modules / lines", f"{len(mods)} / {sum(lines.values()):,}"),
        ("modules over 500 lines", ", ".join(f"{p.relative_to(src)} {n}" for p, n in sorted(
            lines.items(), key=lambda x: -x[1]) if n > 500) or "0"),
        ("functions over complexity 10", str(_complex(src, 10))),
        ("functions over 60 lines", str(_long_functions(trees, 60))),
        ("classes with more than 15 public methods", str(_wide_classes(trees, 15))),
        ("Domain members, all / required (domains/base.py)", "{} / {}".format(*_protocol_members(trees, base, "Domain") or ("?", "?"))),
        ("`getattr(domain` outside domains/", str(sum(texts[p].count("getattr(domain") for p in generic))),
        ("`domain: str = ` defaults outside domains/",  # a required field(kw_only=True) is no default
         str(sum(len(re.findall(r"domain: str = (?!field\(kw_only=True\))", texts[p])) for p in generic))),
        ("duplicate pairs", _duplicates(src)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="?", type=Path, default=ROOT / "src", help="the package tree (default: src/)")
    src = ap.parse_args().src
    if not src.is_dir():
        ap.error(f"{src} is not a directory: name the source tree to measure")
    for title, rows in (("measure", measures(src)), ("entry point (stratagem / all modules loaded)", entry_point_measures(src))):
        width = max(len(k) for k, _ in rows)
        print(f"{title:<{width}}  value")
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
        print()


if __name__ == "__main__":
    main()
