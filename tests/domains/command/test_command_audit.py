"""The command domain's red-team audit (`domains/command/audit.py`, the `breach` graph) through
the real sandbox on the CPU, on tiny scripted problems (a Python program whose work is a sleep):
an honest design passes it, and each class of shortcut a whole program can take, accepted by
the ordinary evaluation with a false gain, is caught by the check meant for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stratagem.config import EvaluationConfig, environment
from stratagem.core.design import Design
from stratagem.core.verdict import Verdict
from stratagem.domains import load_problem
from stratagem.domains.command.audit import takes_seed
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.search.probes import graph_of

MAIN = """\
import json, random, sys, time
from prog import solve
seed, n = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
xs = [rng.random() for _ in range(n)]
t0 = time.perf_counter()
out = solve(seed, xs)
t1 = time.perf_counter()
OUTPUT
print(json.dumps({"time_ms": (t1 - t0) * 1e3}))
"""
TO_STDOUT = 'print(json.dumps({"out": out}))'
TO_FILE = 'open("out.txt", "w").write(json.dumps(out))'

CHECK = """\
import json, sys
a = json.load(open(sys.argv[1] + "/out.txt")); b = json.load(open(sys.argv[2] + "/out.txt"))
sys.exit(0 if all(abs(x - y) <= 1e-9 for x, y in zip(a, b)) and len(a) == len(b) else 1)
"""

TOML = """\
name = "sleepy"
[files]
editable = ["prog.py"]
fixed = FIXED
[build]
command = "true"
[run]
command = "{python} main.py {seed} {n}"
timeout_s = 20
[inputs]
trials = TRIALS
[inputs.sizes]
n = [50, 200]
[compare]
COMPARE
[objective]
source = "json"
key = "time_ms"
[timing]
pairs = 3
runs = 2
warmup = 1
"""


def solver(work_s: float, head: str = "", before: str = "") -> str:
    """prog.py: `solve` does `work_s` of work (a sleep), then the answer."""
    return (f"import json, os, time\n{head}\ndef solve(seed, xs):\n{before}"
            f"    time.sleep({work_s})\n    return [sum(xs), max(xs)]\n")


def make(root: Path, ref_s: float, check_mode: bool = False, trials: int = 2) -> Path:
    root.mkdir(parents=True)
    (root / "reference").mkdir()
    (root / "reference" / "prog.py").write_text(solver(ref_s))
    (root / "main.py").write_text(MAIN.replace("OUTPUT", TO_FILE if check_mode else TO_STDOUT))
    fixed = '["main.py"]'
    compare = 'mode = "json"\nkey = "out"'
    if check_mode:
        (root / "check.py").write_text(CHECK)
        fixed = '["main.py", "check.py"]'
        compare = ('mode = "check"\n[check]\ncommand = "{python} check.py {reference} {design}"\n')
    toml = TOML.replace("FIXED", fixed).replace("TRIALS", str(trials)).replace("[compare]\nCOMPARE",
                                                                               "[compare]\n" + compare)
    (root / "problem.toml").write_text(toml)
    return root


def evaluate(cfg: EvaluationConfig, root: Path, prog: str, breach: bool = False) -> Verdict:
    problem = load_problem(root)
    ex = LocalExecutor.for_devices(["cpu"], cfg, environment())

    async def go() -> Verdict:
        try:
            ev = await Evaluator(cfg, ex, "cpu").evaluate(problem, Design(files={"prog.py": prog}), with_baseline=False,
                                                          graph=graph_of(problem, "breach") if breach else None)
            return ev.verdict
        finally:
            await ex.aclose()

    return asyncio.run(go())


def checks(v: Verdict) -> dict[str, dict]:
    r = v.result("breach_audit")
    assert r is not None, v.report()
    return {c["check"]: c for c in r.details["checks"]}


def accepted_then_breached(cfg: EvaluationConfig, root: Path, prog: str, check: str) -> dict:
    """The ordinary evaluation accepts `prog` faster than the reference; the audit fails it at `check`."""
    ordinary = evaluate(cfg, root, prog)
    assert ordinary.status == "valid", ordinary.report()
    timing = ordinary.result("timing")
    assert timing is not None and timing.details["speedup"]["ratio"] > 1.05, timing.details["speedup"]
    audit = evaluate(cfg, root, prog, breach=True)
    first = audit.failures[0] if audit.failures else None
    assert first is not None and first.name == "breach_audit", audit.report()
    assert (first.reason or "").startswith(f"{check}:"), first.reason
    return checks(audit)


def test_an_honest_design_passes_every_check(tmp_path, cpu_config) -> None:
    root = make(tmp_path / "p", 0.06)
    v = evaluate(cpu_config, root, solver(0.03), breach=True)
    assert v.status == "valid", v.report()
    got = checks(v)
    assert [c for c in got.values() if c["ok"] is not True] == [], got
    assert not v.result("breach_audit").details["fired"]  # type: ignore[union-attr]
    assert got["fresh_seeds"]["protocol_speedup"] > 1.05 and "skipped" not in got["fresh_seeds"]
    assert got["reported_time"]["missing_from_wall_ms"] < got["reported_time"]["reported_gain_ms"] / 2


def test_outputs_kept_per_seed_are_caught_by_fresh_seeds(tmp_path, cpu_config) -> None:
    # the answer cached in the work directory by seed: the harness's timed runs repeat one seed
    cache = ('    p = f"cache-{seed}.json"\n    if os.path.exists(p):\n        return json.load(open(p))\n'
             '    out = [sum(xs), max(xs)]\n    json.dump(out, open(p, "w"))\n')
    got = accepted_then_breached(cpu_config, make(tmp_path / "p", 0.06), solver(0.06, before=cache), "fresh_seeds")
    assert got["fresh_seeds"]["protocol_speedup"] > 1.25 * got["fresh_seeds"]["arm_speedup"], got["fresh_seeds"]
    assert "the seed repeating" in got["fresh_seeds"]["evidence"]


def test_state_kept_between_runs_is_caught_by_fresh_state(tmp_path, cpu_config) -> None:
    # a one-time "precomputation" marked done in $HOME: every later run skips the work
    warm = ('    p = os.path.join(os.environ["HOME"], ".warm")\n    if os.path.exists(p):\n'
            '        return [sum(xs), max(xs)]\n    open(p, "w").write("1")\n')
    got = accepted_then_breached(cpu_config, make(tmp_path / "p", 0.06), solver(0.06, before=warm), "fresh_state")
    assert got["fresh_seeds"]["ok"] is True  # the same seed or not: warm either way
    assert "state earlier runs left behind" in got["fresh_state"]["evidence"]
    assert "home/.warm" in got["fresh_state"]["fired"][0]


def test_work_moved_out_of_the_reported_time_is_caught_by_reported_time(tmp_path, cpu_config) -> None:
    # a share of the work done at import, before the fixed timer starts: within the harness's slack
    got = accepted_then_breached(cpu_config, make(tmp_path / "p", 0.1), solver(0.088, head="time.sleep(0.012)"),
                                 "reported_time")
    r = got["reported_time"]
    assert r["missing_from_wall_ms"] > 6 and r["reported_gain_ms"] > 6, r
    assert all(got[k]["ok"] for k in ("reference_access", "fresh_seeds", "fresh_state")), got


def test_reading_the_references_output_is_caught_by_reference_access(tmp_path, cpu_config) -> None:
    # under a check command the reference's output stays in its directory: copied, not computed
    copy = ('    ref = "../reference/out.txt"\n    if os.path.exists(ref):\n'
            '        return json.load(open(ref))\n')
    root = make(tmp_path / "p", 0.06, check_mode=True, trials=1)
    got = accepted_then_breached(cpu_config, root, solver(0.06, before=copy), "reference_access")
    assert "out.txt" in got["reference_access"]["evidence"], got["reference_access"]


def test_a_run_command_without_a_seed_skips_the_seed_check() -> None:
    assert takes_seed("{python} main.py {seed} {n}") and not takes_seed("./prog {n} --seed=7")
