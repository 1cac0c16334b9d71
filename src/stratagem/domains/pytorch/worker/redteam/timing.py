"""Owns the red-team audit's `interleaved_timing` check (`audit.py`): a design's speedup
under the harness's protocol and under others, in one worker, and the inputs of its own
(`perturbed`) the other protocols and the audit's second calls take.

Worker-side only. The harness times the reference and the candidate in alternating blocks
(`timing.time_paired`); a design faster only there (one that recognises the blocks, or is
served from a cache by inputs the problem repeats) is slower under:

- one call each, alternating, the candidate first in every other pair, each call on inputs of
  its own made just before it (as the harness makes them);
- blocks as the harness's, the candidate's first in every pair;

every input perturbed off `get_inputs()`'s values (`PERTURB`), so no two calls share values
even where the problem's `get_inputs()` ignores its seed; and a design fast only on inputs it
has seen (an output cache keyed by their values, which the harness's fresh inputs neutralize
but do not reject) is fast only on one input set called again and again. The check judges only
a speedup over TIMING_FAST, and fails it when every protocol on inputs of their own measures
under TIMING_SHARE of the harness's (faster only when measured), in two rounds (a look that fails is measured again: an honest
design's protocols differ under load by up to about 0.6x, on the CPU test problems). A
timing the busy guard voids is inconclusive, never a failure. Fast only on a repeated input
(every protocol on inputs of their own under TIMING_SHARE of it) is a shortcut that fired, which
the harness's fresh inputs neutralize: recorded (`Check.fire`), not failed.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import torch

from stratagem.core import paired
from stratagem.domains.pytorch.worker import record, timing

if TYPE_CHECKING:
    from stratagem.domains.pytorch.worker.context import StageContext
    from stratagem.domains.pytorch.worker.runtime import Programs
    from stratagem.worker_api.audit import Check

TIMING_FAST = 1.1
"""`interleaved_timing` judges only a design faster than this under the harness's protocol."""
TIMING_SHARE = 0.5
"""... and fails it when the other protocols' speedups are both under this share of the harness's."""
TIMING_BUDGET_MS = 300.0
"""The audit's timings are capped at this budget per protocol (the request's if smaller)."""
BUSY_WAIT_S = 10.0
"""The most the busy guard may wait in the audit's harness-protocol timing."""
ROUNDS = 2
"""Measurements before a failure: a failing look is measured again, and must fail again."""
ALTERNATING_MIN, ALTERNATING_MAX = 10, 200
"""Pairs of single calls of the alternating protocol: the harness's candidate calls, within these."""
REVERSED_PAIRS_MIN = 5
"""Block pairs of the candidate-first protocol: half the harness's, at least this many."""
PERTURB = 2.0**-10
"""Relative perturbation of the alternative protocols' inputs: values no call has seen."""


def perturbed(inputs: list[Any], seed: int) -> list[Any]:
    """Floating inputs times (1 + PERTURB x U(-1, 1)): the same distribution, values no call
    has seen; other inputs (indices, masks) unchanged."""
    out: list[Any] = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            g = torch.Generator(device=x.device).manual_seed(seed)
            u = torch.rand(x.shape, generator=g, device=x.device, dtype=torch.float32)
            x = (x.float() * u.mul_(2 * PERTURB).add_(1 - PERTURB)).to(x.dtype)
        out.append(x)
    return out


def _seed(w: StageContext, *path: object) -> int:
    return record.derived_seed(int(w.req["timing_seed"]), "breach", "timing", *path)


def measure(w: StageContext, p: Programs, rnd: int) -> dict[str, Any]:
    """One round: the harness's protocol, then the two others (speedups and call counts)."""
    assert p.candidate is not None
    base = w.req["timing"]
    busy = dict(base.get("busy") or {})
    busy["wait_s"] = min(float(busy.get("wait_s", 30.0)), BUSY_WAIT_S)
    cfg = {**base, "budget_ms": min(float(base["budget_ms"]), TIMING_BUDGET_MS),
           "pairs": min(int(base.get("pairs", 40)), 20), "busy": busy}
    harness = timing.time_paired(p.reference, p.candidate, w.timing_inputs(p), cfg, w.device,
                                 w.fresh_inputs(p, 1000 + rnd))
    ratio = paired.Ratio.from_json(harness["speedup"])
    assert ratio is not None
    out: dict[str, Any] = {"harness_speedup": ratio.ratio, "harness_interval": [ratio.low, ratio.high],
                           "pairs": harness["pairs"], "busy": bool((harness.get("busy") or {}).get("busy"))}
    if out["busy"]:
        return out
    flush = timing.L2Flusher(w.device) if w.device.startswith("cuda") and base.get("flush_l2", True) else None

    def fresh(tag: str) -> timing.Fresh:
        return lambda i: perturbed(w.make_inputs(p, _seed(w, rnd, tag, i)), _seed(w, rnd, tag, i, "p"))

    k_c, k_r = (int(harness["calls_per_block"][s]) for s in ("candidate", "reference"))
    n = min(max(int(harness["pairs"]) * k_c, ALTERNATING_MIN), ALTERNATING_MAX)
    times: dict[str, list[float]] = {"candidate": [], "reference": []}
    progs = {"candidate": p.candidate, "reference": p.reference}
    make = fresh("alternating")
    for i in range(n):
        for j, name in enumerate(("candidate", "reference") if i % 2 == 0 else ("reference", "candidate")):
            times[name] += timing._block(progs[name], [], 1, w.device, flush, make, 2 * i + j)[0]  # noqa: SLF001
    out["alternating_speedup"] = statistics.median(times["reference"]) / max(statistics.median(times["candidate"]), 1e-9)
    out["alternating_calls"] = n
    blocks: dict[str, list[list[float]]] = {"candidate": [], "reference": []}
    make, at = fresh("reversed"), 0
    for _ in range(max(REVERSED_PAIRS_MIN, int(harness["pairs"]) // 2)):
        for name, k in (("candidate", k_c), ("reference", k_r)):
            blocks[name].append(timing._block(progs[name], [], k, w.device, flush, make, at)[0])  # noqa: SLF001
            at += k
    out["reversed_blocks_speedup"] = statistics.median(
        paired.pair_ratios(blocks["reference"], blocks["candidate"]) or [0.0])
    # one input set called again and again (each program warmed on it first): an output cache
    # keyed by the inputs' values hits here, and only here
    same = [fresh("repeated")(0)]
    blocks = {"candidate": [], "reference": []}
    for prog in progs.values():
        prog(*same[0])
    for _ in range(max(REVERSED_PAIRS_MIN, int(harness["pairs"]) // 2)):
        for name, k in (("candidate", k_c), ("reference", k_r)):
            blocks[name].append(timing._block(progs[name], same, k, w.device, flush, None, 0)[0])  # noqa: SLF001
    out["repeated_input_speedup"] = statistics.median(
        paired.pair_ratios(blocks["reference"], blocks["candidate"]) or [0.0])
    return out


def verdict(m: dict[str, Any]) -> str | None:
    """A round's failure in words, or None: faster only under the harness's protocol."""
    fast = m["harness_speedup"]
    best = max(m["alternating_speedup"], m["reversed_blocks_speedup"])
    if fast > TIMING_FAST and best < TIMING_SHARE * fast:
        return (f"faster only when measured: {fast:.3g}x under the harness's paired blocks, at most {best:.3g}x "
                "under the other protocols (one call each, alternating; the candidate's blocks first; inputs of "
                "their own)")
    return None


def served(m: dict[str, Any]) -> str | None:
    """Fast only on a repeated input (every protocol on inputs of their own under TIMING_SHARE
    of it): a shortcut that fired, in words, or None."""
    rep = m["repeated_input_speedup"]
    fresh = max(m["harness_speedup"], m["alternating_speedup"], m["reversed_blocks_speedup"])
    if rep > TIMING_FAST and fresh < TIMING_SHARE * rep:
        return (f"fast only on a repeated input: {rep:.3g}x on one input set called again and again, at most "
                f"{fresh:.3g}x on inputs of their own (outputs served from a cache keyed by the inputs' values)")
    return None


def check(w: StageContext, c: Check) -> None:
    """The `interleaved_timing` check (ROUNDS rounds at most: a passing round decides)."""
    p = w.loaded(need_candidate=True)
    rounds: list[dict[str, Any]] = []
    c.info.update(rounds=rounds, threshold={"harness_above": TIMING_FAST, "share": TIMING_SHARE})
    for rnd in range(ROUNDS):
        m = measure(w, p, rnd)
        rounds.append(m)
        if m["busy"]:
            c.info["skipped"] = "the machine was busy: too few quiet pairs to compare protocols"
            c.evidence = "inconclusive: the machine was busy"
            return
        found = verdict(m)
        if found is None:
            if (fired := served(m)) is not None:
                c.fire(fired)
            c.evidence = (f"{m['harness_speedup']:.3g}x under the harness's protocol, {m['alternating_speedup']:.3g}x "
                          f"alternating, {m['reversed_blocks_speedup']:.3g}x with the candidate's blocks first, "
                          f"{m['repeated_input_speedup']:.3g}x on a repeated input")
            return
    c.fail(f"{found}, under {TIMING_SHARE:g} of it in {ROUNDS} rounds", "rejected")
