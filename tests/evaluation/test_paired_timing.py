"""Paired timing through the real CPU harness: known ratios under background load, timing
windows that never overlap other work, lock waits and lazy compiles charged to the right limit.

The CPU hogs are bounded busy loops in child processes (they end by themselves after
HOG_SECONDS and are killed when the test ends)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.settings import settings
from stratagem.domains.pytorch.worker.timing import PAIRS_MIN, pair_count
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.results import Evaluation
from stratagem.evaluation.service import Evaluator
from stratagem.worker_api.device_lock import DeviceLock

PAIRED = Path(__file__).resolve().parents[1] / "fixtures" / "paired"
HOG_SECONDS = 120
SAME_TOLERANCE = 0.05
"""The reference as its own candidate: 1.00x, inside the interval widened by 5%."""
TWICE_TOLERANCE = 0.10
"""Twice the reference's work: 0.50x, inside the interval widened by 10% (its true ratio is
a little under 0.5: the second matmul's output allocation and the comparison cost a few
percent)."""


@contextlib.contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    code = f"import time\nt = time.time() + {HOG_SECONDS}\nwhile time.time() < t: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        time.sleep(0.3)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def other_evaluations(cfg: Any, tmp: Path) -> Iterator[None]:
    """Another stratagem process evaluating designs over and over, with its own cache folder
    (so its own device lock: another user's run), until the test ends."""
    code = ("import asyncio, sys\nfrom pathlib import Path\nfrom stratagem.config import load_config\n"
            "from stratagem.core.design import Design\nfrom stratagem.domains.pytorch.problem import load_problem\n"
            "from stratagem.evaluation.executors import LocalExecutor\nfrom stratagem.evaluation.service import Evaluator\n"
            "cfg = load_config(None, {'evaluation': {'device': 'cpu', 'baselines': ['eager'], 'timing': "
            "{'budget_ms': 300}}}).evaluation\n"
            f"p = load_problem(Path({str(PAIRED / 'problem.py')!r}))\n"
            f"d = candidate_design(Path({str(PAIRED / 'twice.py')!r}).read_text())\n"
            "ex = LocalExecutor.for_devices(['cpu'], cfg, {'PATH': '/usr/bin:/bin'})\n"
            "while True:\n    asyncio.run(Evaluator(cfg, ex, 'cpu').evaluate(p, d, with_baseline=False))\n")
    env = {**os.environ, "STRATAGEM_CACHE_DIR": str(tmp / "other-cache")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        yield
    finally:
        proc.kill()
        proc.wait()


def _config(cpu_config: Any, **timing: Any) -> Any:
    busy = settings(cpu_config).timing.busy.model_copy(update={"wait_s": 5.0, "enabled": True})
    t = settings(cpu_config).timing.model_copy(update={"budget_ms": 300, "warmup_ms": 30, "min_reps": 10,
                                             "max_reps": 2000, "busy": busy, **timing})
    return cpu_config.model_copy(update={"timing": t, "correctness_trials": 2, "timeout_s": 120})


def _evaluate(cfg: Any, name: str, problem: Path = PAIRED / "problem.py", source: str | None = None,
              on_stage: Any = None) -> Evaluation:
    design = candidate_design(source if source is not None else (PAIRED / name).read_text())
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    return asyncio.run(Evaluator(cfg, ex, "cpu").evaluate(load_problem(problem), design, with_baseline=False,
                                                          on_stage=on_stage))


def test_paired_ratios_are_right_under_cpu_load(cpu_config, tmp_path) -> None:
    """The issue's observation was a 100x swing of absolute times under load; the paired ratio
    of a candidate against the eager reference must stay where the work says it is, or be
    `not measured: the machine was busy` (issue 41), never a wrong ratio called stable. The
    first round adds another stratagem process evaluating designs beside the two hogs."""
    cfg = _config(cpu_config)
    stable, seen = 0, []
    # Another round only when the one before settled nothing: the host's own load (other
    # tenants of a shared CI machine) comes on top of the hogs, so each round has fewer of them;
    # every result of every round is checked (a stable one must hold the truth, an unstable one
    # must say why), and at least one must settle, or the harness could call everything noise.
    for hogs in (2, 1, 0):
        if stable:
            break
        other = other_evaluations(cfg, tmp_path) if hogs == 2 else contextlib.nullcontext()
        with cpu_hogs(hogs), other:
            same = _evaluate(cfg, "same.py")
            twice = _evaluate(cfg, "twice.py")
        stable += _check_paired(cfg, ((same, 1.0, SAME_TOLERANCE), (twice, 0.5, TWICE_TOLERANCE)), seen)
    # at least one settles, unless the harness said of every one that the machine was too busy
    # to time it (on a machine loaded beyond the hogs, as a shared one can be)
    assert stable >= 1 or all(s[0] == "busy" for s in seen), ("under load a timing should settle", seen)


def _check_paired(cfg: Any, cases: Any, seen: list[Any]) -> int:
    """Check each (evaluation, true ratio, tolerance); the number of stable ones."""
    stable = 0
    for ev, truth, tol in cases:
        assert ev.verdict.status == "valid", ev.verdict.report()
        d = ev.verdict.result("timing").details  # type: ignore[union-attr]
        if ev.stability is not None and ev.stability.busy:
            # too busy to time: said so, with what was seen, and no ratio anywhere
            assert d["busy"]["busy"] and d["busy"]["measured"] < d["busy"]["wanted"], d["busy"]
            assert ev.stability.reasons[0].startswith("not measured: the machine was busy ("), ev.stability
            assert ev.paired is None
            seen.append(("busy", ev.stability.reasons[0][:200]))
            continue
        assert d["pairs"] >= 10 and len(d["pair_ratios"]) == d["pairs"]
        r = ev.paired
        assert r is not None and r.low <= r.ratio <= r.high
        seen.append([(a["budget_ms"], a["pairs"], a["stability"]["reasons"]) for a in d["attempts"]])
        assert [a["budget_ms"] for a in d["attempts"]] == [300 * 2 ** i for i in range(len(d["attempts"]))]
        if ev.stability is not None and ev.stability.stable:
            # a stable result is what users rank by: its interval holds the truth (widened by
            # `tol` for the bootstrap's 5% misses and twice.py's few percent of extra work) and
            # is as narrow as the rule says
            stable += 1
            assert r.low * (1 - tol) <= truth <= r.high * (1 + tol), (r, d["stability"])
            assert r.rel_halfwidth <= settings(cfg).timing.stability.ci_max, (r, d["stability"])
        else:  # an unsettled one is said to be so, after every re-timing, with its reasons
            assert ev.stability is not None and ev.stability.reasons, d["stability"]
            assert len(d["attempts"]) == 1 + settings(cfg).timing.max_retimes, d["attempts"]
    return stable


def test_an_unstable_timing_is_retimed_with_more_pairs_and_budget(cpu_config) -> None:
    """A timing judged unstable (here: an interval limit no measurement meets) is measured
    again `max_retimes` times, each with twice the budget and pairs of the one before; it
    stays valid, is flagged unstable with its reason, and keeps every attempt."""
    from stratagem.domains.pytorch.settings import StabilityConfig

    cfg = _config(cpu_config, budget_ms=100, pairs=10, max_retimes=2,
                  stability=StabilityConfig(ci_max=1e-9))
    ev = _evaluate(cfg, "same.py")
    assert ev.verdict.status == "valid", ev.verdict.report()
    d = ev.verdict.result("timing").details  # type: ignore[union-attr]
    verdicts = [a["stability"]["verdict"] for a in d["attempts"]]
    # every attempt but the last unstable; all three made unless one found the machine busy
    # (re-timing stops there: a longer timing on a busy machine is only longer)
    assert all(v == "unstable" for v in verdicts[:-1]) and (len(verdicts) == 3 or verdicts[-1] == "busy"), verdicts
    assert [a["budget_ms"] for a in d["attempts"]] == [100, 200, 400][:len(verdicts)]
    # twice the pairs each time, fewer (never below PAIRS_MIN) when the slower program's calls
    # do not fit that many in the attempt's budget, as on a loaded machine
    pairs = [a["pairs"] for a in d["attempts"] if a["stability"]["verdict"] != "busy"]  # busy: what was quiet
    assert all(PAIRS_MIN <= n <= 10 * 2 ** i for i, n in enumerate(pairs)), pairs  # pair_count: below
    assert ev.stability is not None and not ev.stability.stable
    assert ev.stability.busy or any("interval" in r for r in ev.stability.reasons), ev.stability


def test_pair_count_is_the_asked_pairs_unless_the_budget_fits_fewer() -> None:
    cfg = {"budget_ms": 400.0, "pairs": 40}
    assert pair_count(1.0, cfg) == 40  # 400 calls fit: the asked pairs
    assert pair_count(20.0, cfg) == 20  # a 20 ms call: 20 fit in the budget
    assert pair_count(1000.0, cfg) == PAIRS_MIN  # a slow call: the floor, not one pair
    assert pair_count(1000.0, {"budget_ms": 400.0, "pairs": 4}) == 4  # never more than asked


def _windows(ev: Evaluation) -> list[dict[str, Any]]:
    out = []
    for r in ev.verdict.results:
        out += list((r.details or {}).get("locks") or [])
    return out


def test_concurrent_evaluations_never_time_while_the_other_works(cpu_config) -> None:
    """Two evaluations of one run at once (two CPU slots): each one's exclusive (timing)
    windows overlap no window of the other, shared or exclusive (its compiles, correctness
    trials and timing), by the recorded wall-clock timestamps."""
    cfg = _config(cpu_config, budget_ms=100).model_copy(update={"cpu_slots": 2})
    ex = LocalExecutor.for_devices(["cpu"], cfg, {"PATH": "/usr/bin:/bin"})
    ev = Evaluator(cfg, ex, "cpu")
    problem = load_problem(PAIRED / "problem.py")

    async def go() -> list[Evaluation]:
        return await asyncio.gather(*(
            ev.evaluate(problem, candidate_design((PAIRED / n).read_text()), with_baseline=False)
            for n in ("same.py", "twice.py")))

    a, b = asyncio.run(go())
    assert a.verdict.status == b.verdict.status == "valid"
    wa, wb = _windows(a), _windows(b)
    assert any(w["mode"] == "exclusive" for w in wa) and any(w["mode"] == "exclusive" for w in wb)
    assert any(w["mode"] == "shared" for w in wa) and any(w["mode"] == "shared" for w in wb)
    for mine, theirs in ((wa, wb), (wb, wa)):
        for x in (w for w in mine if w["mode"] == "exclusive"):
            for y in theirs:
                overlap = min(x["released_at"], y["released_at"]) - max(x["acquired_at"], y["acquired_at"])
                assert overlap <= 0, (x, y)
    # and the two did overlap in time at all (the test would be empty otherwise)
    start = lambda ws: min(w["acquired_at"] for w in ws)  # noqa: E731
    end = lambda ws: max(w["released_at"] for w in ws)  # noqa: E731
    assert min(end(wa), end(wb)) > max(start(wa), start(wb))


def test_waiting_for_the_lock_is_not_charged_to_the_candidate(cpu_config) -> None:
    """Another process times on the CPU for longer than the candidate's whole run limit: the
    candidate waits, then passes; its verdict records the wait."""
    # the limit leaves the candidate's own run room on a loaded 2-core machine (6 s was cut
    # short there); the other process holds the lock for longer than the limit all the same,
    # counting from the moment the worker is seen waiting (counted from the test's start, the
    # worker's start-up under load ate into it: 10.5 s of 25 waited, with two builds beside it)
    cfg = _config(cpu_config, budget_ms=50).model_copy(update={"timeout_s": 20.0})
    lock_path = LocalExecutor.for_devices(["cpu"], cfg, {}).slots[0].lock_path
    assert lock_path is not None
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    held = threading.Event()
    release = threading.Event()

    def other_timing() -> None:
        with DeviceLock(str(lock_path)).hold("exclusive", owner={"process": 424242, "label": "design 0123456789"}):
            held.set()
            release.wait(60)

    t = threading.Thread(target=other_timing)
    t.start()
    held.wait(5)
    threading.Timer(120.0, release.set).start()  # a bound, should the wait never be seen
    stages: list[str] = []
    timer: list[threading.Timer] = []

    def on_stage(name: str) -> None:
        stages.append(name)
        if "waiting for the timing lock" in name and not timer:
            # held for 25 s from the moment the worker waits: longer than its whole run limit,
            # however long its start took on a loaded machine
            timer.append(threading.Timer(25.0, release.set))
            timer[0].start()

    try:
        ev = _evaluate(cfg, "same.py", on_stage=on_stage)
    finally:
        release.set()
        t.join(10)
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert max(w["waited_s"] for w in _windows(ev)) > 20.0
    # the wait is said as a wait, on whom, apart from the stage's own work (issue 23: a 186 s
    # wait for another process's timing was shown as a load "longer than usual")
    waits = [s for s in stages if "waiting for the timing lock" in s]
    assert any("another process on this machine (pid 424242, design 0123456789)" in s for s in waits), stages
    i = stages.index(waits[0])
    assert stages[i + 1] == waits[0].split(": waiting")[0], stages  # back to the stage it was in
    held_by = [w.get("holder") for w in _windows(ev) if w["waited_s"] > 20.0]
    assert held_by and held_by[0]["process"] == 424242, _windows(ev)
    waited = sum(float((r.details or {}).get("lock_wait_s", 0.0)) for r in ev.verdict.results)
    assert waited > 20.0 and ev.sandbox["lock_wait_s"] > 20.0, (waited, ev.sandbox)


SLOW_FIRST_CALL = '''
import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Its first call takes 7 s (as a lazy compile would, but nothing compiles); later calls are fast."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim**0.5)
        self.compiled = False

    def forward(self, x):
        if not self.compiled:
            time.sleep(7.0)
            self.compiled = True
        return torch.tanh(x @ self.weight)
'''


def test_a_slow_first_call_that_compiles_nothing_is_running(cpu_config, monkeypatch) -> None:
    """The compile budget pays for compiles (torch.compile's, compiler processes), not for the
    first call as such: a first call that sleeps is cut at the run limit (issue 23); given room
    by the run limit, it passes. (tests/evaluation/test_compile_timeout.py: a real compile.)"""
    from stratagem.core.verdict import ValidatorResult
    from stratagem.domains.pytorch import domain

    # its first-call flag is state the static checks refuse; the sandbox's limits are on trial here
    monkeypatch.setattr(domain, "run_static_checks", lambda *a, **k: ValidatorResult("static_checks", "passed"))
    cfg = _config(cpu_config, budget_ms=50).model_copy(update={"timeout_s": 5.0, "compile_timeout_s": 60.0})
    ev = _evaluate(cfg, "", source=SLOW_FIRST_CALL)
    f = ev.verdict.failures[0]
    assert f.kind == "timeout" and "5 s run limit" in (f.reason or ""), f.reason
    roomy = cfg.model_copy(update={"timeout_s": 60.0})
    ev = _evaluate(roomy, "", source=SLOW_FIRST_CALL)
    assert ev.verdict.result("correctness").outcome == "passed", ev.verdict.report()  # type: ignore[union-attr]
