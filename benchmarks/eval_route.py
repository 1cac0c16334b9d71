"""The stratagem modules a real `stratagem eval` loads, per process and in all (issue 61): runs
one evaluation with a `sitecustomize` on the path that writes, as each process ends, the
stratagem modules it loaded (the parent, the worker and the judge: the sandbox keeps the
parent's PYTHONPATH, and the worker ends with `os._exit`, which the hook wraps).

    python benchmarks/eval_route.py [PROBLEM CANDIDATE] [--device cpu]

Defaults: examples/01_elementwise and its torch_rewrite.py candidate, on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOOK = """import atexit, json, os, sys
def _dump():
    mods = sorted(m for m in sys.modules if m.split(".")[0] == "stratagem")
    if mods:
        with open({out!r}, "a") as f:
            f.write(json.dumps({{"argv": sys.argv[:1], "mods": mods}}) + "\\n")
atexit.register(_dump)
_exit = os._exit
def _dump_then_exit(code):
    try:
        _dump()
    finally:
        _exit(code)
os._exit = _dump_then_exit
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?", type=Path, default=ROOT / "examples/01_elementwise/problem.py")
    ap.add_argument("candidate", nargs="?", type=Path,
                    default=ROOT / "examples/01_elementwise/candidates/torch_rewrite.py")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as hook:
        out = Path(hook) / "modules.jsonl"
        (Path(hook) / "sitecustomize.py").write_text(HOOK.format(out=str(out)))
        path = os.pathsep.join([hook, str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        run = subprocess.run([sys.executable, "-m", "stratagem", "eval", str(args.problem), str(args.candidate),
                              "--device", args.device, "--json"], env={**os.environ, "PYTHONPATH": path},
                             capture_output=True, text=True, check=False)
        status = json.loads(run.stdout).get("status") if run.stdout.strip() else f"no output (exit {run.returncode})"
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    union: set[str] = set()
    print(f"evaluation: {status}")
    for r in rows:
        union |= set(r["mods"])
        print(f"{Path(r['argv'][0]).name:<14} {len(r['mods'])} stratagem modules")
    print(f"{'in all':<14} {len(union)} stratagem modules")


if __name__ == "__main__":
    main()
