"""Owns the command domain's `timing` stage: the programs (reference, design, the harness's
baselines) run in block pairs of one run each, in rotated order under the exclusive device
lock, until the interval is tight and stable (`core.paired.settled`) or the budget is spent; per case of a
per-size objective and over all of them (the geometric mean per run), the paired ratio and
stability verdict of `core/paired.py`; every reported time checked against the wall time the
harness measured around its run, against the reference's time outside it, and against the
declared speed-of-light floor. Standard library only."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from stratagem.core import paired
from stratagem.core.paired import bootstrap_median, pair_ratios, paired_ratio, paired_stability
from stratagem.core.verdict import FailureKind
from stratagem.domains.command import formula, outputs
from stratagem.domains.command.context import BASELINE, CLOCK_TOLERANCE_MS, Context
from stratagem.domains.command.spec import CASE_VARIABLE, RETIMES
from stratagem.worker_api.stages import StageFailure


def _stats(samples: list[float], keep: bool = True) -> dict[str, Any]:
    if len(samples) >= 2:
        q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = med = q3 = samples[0]
    out = {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "iqr_ms": q3 - q1, "n": len(samples),
           "min_ms": min(samples)}
    return {**out, "samples_ms": samples} if keep else out


Times = dict[str, float]
"""One run's reported times, per case (the key `""` when the objective has no cases), in ms."""
SUMMARY = ""
"""The key of a run's single time, and of the geometric mean over cases."""


def reported(ctx: Context, who: str, stdout: str) -> Times:
    """The times a run reported, per case; a program that reported none (or not every case) fails."""
    objective = ctx.spec.objective
    kind: FailureKind = "malformed" if who == "design" else "problem_error"
    if not objective.cases:
        reported = outputs.reported_ms(stdout, objective)
        if reported is None:
            where = f"a JSON line's {objective.key!r}" if objective.source == "json" else f"the regex {objective.regex!r}"
            raise StageFailure(kind, f"the {ctx.label(who)}'s timed run reported no time ({where} on stdout)")
        return {SUMMARY: reported}
    got = outputs.reported_cases_ms(stdout, objective)
    if isinstance(got, str):
        raise StageFailure(kind, f"the {ctx.label(who)}'s timed run: {got}")
    return got


def _timed(ctx: Context, who: str, values: Mapping[str, Any], expected: list[float] | None) -> tuple[Times, float]:
    """(reported ms per case, wall ms) of one timed run, its reported times checked against its
    wall time, and a design's output against the reference's (`expected`)."""
    ran = ctx.run_once(who, values)
    if ctx.spec.objective.source == "clock":
        got = {SUMMARY: ran.wall_ms}
    else:
        got = reported(ctx, who, ran.stdout)
        total = sum(got.values())
        if total > ran.wall_ms + CLOCK_TOLERANCE_MS:
            raise StageFailure("rejected" if who == "design" else "problem_error",
                               f"the {ctx.label(who)} reported {total:.4g} ms, but the harness measured "
                               f"{ran.wall_ms:.4g} ms around the whole run: the time line is not what happened")
    if who == "reference":
        ctx.discard_output()
    elif who == "design" and expected is not None:
        numbers = ctx.capture(who, ran)
        if numbers is not None:
            a = outputs.agree(expected, numbers, ctx.spec.compare)
            if not a.ok:
                raise StageFailure("wrong_output", f"a timed run's output differs from the reference's: {a.reason}")
    return got, ran.wall_ms


def _order(programs: tuple[str, ...], pair: int) -> list[str]:
    """The programs' order in block pair `pair`: rotated each pair (reference and design alone:
    AB, BA, AB, ...), so no program always follows another."""
    k = pair % len(programs)
    return list(programs[k:] + programs[:k])


def _pairs(ctx: Context, values: Mapping[str, Any], expected: list[float] | None,
           expect_ms: float | None) -> dict[str, Any]:
    """One paired timing, sequential: block pairs of one run of each program (reference, design,
    baselines) in rotated order, under the exclusive lock, until the pairs so far meet the stop
    rule (`core.paired.settled` on the run's summary times, looked at after `MIN_JUDGED` pairs
    and at each doubling) or the budget of `pairs` x `runs` runs of each is spent. Every design
    run's output is checked. `blocks[who]` holds one list of per-run times per pair; `stop` says
    why it ended."""
    spec = ctx.spec
    most = spec.timing.pairs * spec.timing.runs
    looks = paired.looks(paired.MIN_JUDGED, most)
    out: dict[str, Any] = {k: {w: [] for w in ctx.programs} for k in ("blocks", "walls", "outside")}
    out["stop"] = "planned"
    with ctx.use.hold("exclusive"):
        for p in range(most):
            for who in _order(ctx.programs, p):
                got, wall = _timed(ctx, who, values, expected)
                out["walls"][who].append(wall)
                out["blocks"][who].append([got])
                out["outside"][who].append([wall - sum(got.values())])
                if who == "design" and spec.compare.mode == "check":
                    a = ctx.agree(None, None, values)  # the run's output, by the problem's check
                    if not a.ok:
                        raise StageFailure("wrong_output", f"a timed run's output fails the check: {a.reason}")
            if looks and p + 1 == looks[0]:
                looks.pop(0)
                ref, des = _series(out["blocks"]["reference"], SUMMARY), _series(out["blocks"]["design"], SUMMARY)
                if paired.settled(pair_ratios(ref, des), _flat(ref), _flat(des), paired.StabilityRules(),
                                  spec.timing.target_halfwidth, expect_ms) is not None:
                    out["stop"] = "settled"
                    break
    return out


def _series(blocks: list[list[Times]], case: str) -> list[list[float]]:
    """Blocks of one case's times; `SUMMARY` with cases: each run's geometric mean over its cases."""
    if case != SUMMARY or all(set(run) == {SUMMARY} for b in blocks for run in b):
        return [[run[case] for run in b] for b in blocks]
    return [[math.exp(statistics.fmean(math.log(max(t, 1e-12)) for t in run.values())) for run in b] for b in blocks]


def _clock_check(ctx: Context, t: Mapping[str, Mapping[str, list[Any]]]) -> dict[str, float]:
    """The time the design's runs spent outside their reported time, against the reference's,
    paired: per block pair, the design block's least outside time less the reference block's
    (load only adds time, and what both saw cancels). Work a design hides from its reported
    time shows in every pair; a design is rejected when the median excess is above the
    allowance with 95% confidence (the bootstrap interval's low end), so the noise of a loaded
    machine does not reject an honest design."""
    if ctx.spec.objective.source == "clock":
        return {}
    o = ctx.spec.objective
    excess = [min(d) - min(r) for d, r in zip(t["outside"]["design"], t["outside"]["reference"], strict=True)]
    est = bootstrap_median(excess, seed=len(excess))
    allowed = o.clock_slack * statistics.median(t["walls"]["reference"]) + o.clock_slack_ms
    clock = {"design_excess_outside_ms": est.ratio, "excess_low_ms": est.low, "excess_high_ms": est.high,
             "allowed_excess_ms": allowed,
             "reference_outside_ms": statistics.median(x for b in t["outside"]["reference"] for x in b),
             "design_outside_ms": statistics.median(x for b in t["outside"]["design"] for x in b)}
    if est.low > allowed:
        raise StageFailure("rejected", f"the design's runs took {est.ratio:.4g} ms more than the reference's beyond "
                           f"the time they reported (paired median, 95% interval from {est.low:.4g} ms; allowed: "
                           f"{allowed:.4g} ms): its time line leaves out work the harness's clock saw", clock=clock)
    return clock


def floor_ms(ctx: Context, values: Mapping[str, Any], case: str = SUMMARY) -> dict[str, float] | None:
    """The speed-of-light floor of one run (of one case's part of it) on `values` from the
    declared work and ceilings (None: none declared)."""
    w = ctx.spec.work
    if not w.declared:
        return None
    sizes = {k: float(v) for k, v in values.items() if k != "seed"}
    if case != SUMMARY:
        sizes[CASE_VARIABLE] = float(case)
    out: dict[str, float] = {}
    try:
        if w.flops is not None and w.peak_gflops is not None:
            out["flops"] = formula.evaluate(w.flops, sizes)
            out["compute_ms"] = out["flops"] / (w.peak_gflops * 1e6)
        if w.bytes is not None and w.peak_gbps is not None:
            out["bytes"] = formula.evaluate(w.bytes, sizes)
            out["memory_ms"] = out["bytes"] / (w.peak_gbps * 1e6)
    except ValueError as e:
        raise StageFailure("problem_error", f"the declared work cannot be computed: {e}") from None
    out["floor_ms"] = max(out.get("compute_ms", 0.0), out.get("memory_ms", 0.0))
    return out


def _check_floor(floor: Mapping[str, float] | None, ref_ms: float, des_ms: float, case: str = SUMMARY) -> None:
    if floor is None:
        return
    f = floor["floor_ms"]
    at = f" (case {case})" if case != SUMMARY else ""
    if ref_ms < f:
        raise StageFailure("problem_error", f"the reference ran in {ref_ms:.4g} ms{at}, under the floor of {f:.4g} ms "
                           "its declared work and ceilings give: [work] is wrong", floor=dict(floor))
    if des_ms < f:
        raise StageFailure("rejected", f"the design reported {des_ms:.4g} ms{at}, under the speed-of-light floor of "
                           f"{f:.4g} ms (the declared work at the declared peak rates): impossible", floor=dict(floor))


def _flat(blocks: list[list[float]]) -> list[float]:
    return [x for b in blocks for x in b]


def _per_case(ctx: Context, t: Mapping[str, Mapping[str, list[Any]]], values: Mapping[str, Any],
              seed: int) -> dict[str, dict[str, Any]]:
    """Each case's paired figures: the design against the reference, and every baseline's time
    over the design's (its fraction of the baseline's speed, higher is better for the design)."""
    blocks = t["blocks"]
    out: dict[str, dict[str, Any]] = {}
    for case in ctx.spec.objective.cases:
        ref, des = _series(blocks["reference"], case), _series(blocks["design"], case)
        ratio = paired_ratio(ref, des, seed=seed)
        stab = paired_stability(ratio, pair_ratios(ref, des), _flat(ref), _flat(des))
        floor = floor_ms(ctx, values, case)
        _check_floor(floor, statistics.median(_flat(ref)), statistics.median(_flat(des)), case)
        row: dict[str, Any] = {"runtime": _stats(_flat(des), keep=False), "reference": _stats(_flat(ref), keep=False),
                               "speedup": ratio.to_json(), "stability": stab.to_json(), "floor": floor}
        base = {}
        for b in ctx.spec.baselines:
            bl = _series(blocks[BASELINE + b.name], case)
            base[b.name] = {"median_ms": statistics.median(_flat(bl)),
                            "fraction": paired_ratio(bl, des, seed=seed).to_json()}
        if base:
            row["baselines"] = base
        out[case] = row
    return out


def _baselines(ctx: Context, t: Mapping[str, Mapping[str, list[Any]]], seed: int) -> dict[str, Any]:
    """Every baseline over the whole run (the geometric mean over cases): its time, and the
    design's fraction of its speed (baseline time / design time, paired)."""
    out = {}
    des = _series(t["blocks"]["design"], SUMMARY)
    for b in ctx.spec.baselines:
        bl = _series(t["blocks"][BASELINE + b.name], SUMMARY)
        out[b.name] = {"label": b.label, "runtime": _stats(_flat(bl), keep=False),
                       "fraction": paired_ratio(bl, des, seed=seed).to_json()}
    return out


def timing(ctx: Context) -> dict[str, Any]:
    ctx.needs_gpu()
    spec = ctx.spec
    values = ctx.inputs(ctx.payload["timing_input"])
    # the outputs every timed run of the design must match
    expected = ctx.capture("reference", ctx.run_once("reference", values))
    for k in range(spec.timing.warmup):
        for who in ctx.programs:
            if who == "reference" and k == 0:
                continue  # the run just above was its first untimed run
            ran = ctx.run_once(who, values)
            if who != "design":
                ctx.discard_output()
            else:
                ctx.capture(who, ran)
    expect = ctx.payload.get("reference_expect_ms")
    expect_ms = float(expect) if expect else None
    attempts = []
    for attempt in range(1 + RETIMES):
        t = _pairs(ctx, values, expected, expect_ms)
        ctx.verify_fixed("design", "timed runs")
        clock = _clock_check(ctx, t)
        ref_blocks, des_blocks = _series(t["blocks"]["reference"], SUMMARY), _series(t["blocks"]["design"], SUMMARY)
        ref_flat, des_flat = _flat(ref_blocks), _flat(des_blocks)
        try:
            ratio = paired_ratio(ref_blocks, des_blocks, seed=attempt)
            cases = _per_case(ctx, t, values, attempt)
            baselines = _baselines(ctx, t, attempt)
        except ValueError as e:
            raise StageFailure("malformed", f"no usable timing: {e}") from None
        stability = paired_stability(ratio, pair_ratios(ref_blocks, des_blocks), ref_flat, des_flat,
                                     reference_expect_ms=expect_ms)
        floor = floor_ms(ctx, values) if not spec.objective.cases else None
        _check_floor(floor, statistics.median(ref_flat), statistics.median(des_flat))
        attempts.append({"speedup": ratio.to_json(), "stability": stability.to_json(), "pairs": len(des_flat),
                         "stop": t["stop"]})
        if stability.stable:
            break
    sizes = {k: v for k, v in values.items() if k != "seed"}
    out = {"runtime": _stats(des_flat), "reference": _stats(ref_flat), "speedup": ratio.to_json(),
           "stability": stability.to_json(), "attempts": attempts, "pairs": len(des_flat),
           "planned_pairs": spec.timing.pairs * spec.timing.runs, "stop": t["stop"],
           "target_halfwidth": spec.timing.target_halfwidth, "runs_per_block": 1, "objective_source": spec.objective.source, "sizes": sizes,
           "clock": clock, "floor": floor,
           "wall": {"reference": _stats(t["walls"]["reference"]), "design": _stats(t["walls"]["design"])}}
    if cases:
        out["cases"] = cases
        out["summary"] = f"geometric mean over {len(cases)} cases ({', '.join(cases)})"
    if baselines:
        out["baselines"] = baselines
    return out
