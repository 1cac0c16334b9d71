"""Owns the confirmation round of a run: the reference, the baseline the domain sets beside it
(`BaselineNames.compared`, when the domain measures it) and the top designs re-timed together
in several fresh workers, combined into ratios whose intervals hold the variance between
independent timings, stored in the run database, and the run's headline from then on.

Why: a design's search-time ratio is paired with the reference of its own evaluation only. An
independent re-timing of a real run found every estimate outside the reported interval, two
designs "clearly apart" tied, and the reference's own time moving 22% between evaluations
(issue 23).
Here every program of the round is timed in the same processes, and the interval covers the
spread between processes (`core/confirmed.py`); a design that is the compared baseline's own
recipe (`BaselineNames.compared_authors`) is that program, timed once. The blocks run at once,
each in a slot of the device (the executor queues what does not fit): their loading and
compiling overlap, their timing never does (it holds the device's lock exclusively), but
their memory is shared: a block that ran out of it is run again alone once the others ended.

The round is sized like a timing (`core.paired.looks`, docs/timing.md "Stopping early"): it
runs two blocks, then doubles, up to `blocks`, and stops at a look once every design's
confirmed interval is within the timing's `target_halfwidth` of its ratio (`settled`).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stratagem.core.confirmed import (
    ConfirmedDesign,
    between_blocks,
    per_block,
    ranked,
)
from stratagem.core.paired import Ratio, busy_reason, looks
from stratagem.core.problem import Problem
from stratagem.core.search import DesignView
from stratagem.core.search import ranked as ranked_views
from stratagem.domains import get_domain, names_of
from stratagem.errors import HarnessError
from stratagem.evaluation.service import Evaluator
from stratagem.search.state import stored_views
from stratagem.store.sqlite import RunStore


def chosen(views: Sequence[DesignView], top: int) -> list[DesignView]:
    """The designs a round re-times: the `top` valid ones by search-time ratio, plus any other
    whose interval overlaps the best's (it could be the best). Designs whose search-time
    timing stayed unstable are contenders too: a round is the re-timing they lacked (on a
    loaded machine it may be the only way any design gets ranked), and so are designs the machine
    was too busy to time, in the slots left."""
    order = ranked_views(views)
    unstable = [v for v in views if v.status == "unstable" and v.speedup is not None]
    pool = sorted([*order, *unstable], key=lambda v: (-(v.speedup or 0.0), v.created_at, v.id))
    if top <= 0:
        return []
    if not pool:
        return sorted((v for v in views if v.status == "busy"), key=lambda v: -v.created_at)[:top]
    best = order[0] if order else pool[0]
    low = best.speedup_low if best.speedup_low is not None else best.speedup or 0.0
    out = list(pool[:top])
    out += [v for v in pool[top:] if (v.speedup_high if v.speedup_high is not None else v.speedup or 0.0) >= low]
    # designs the machine was too busy to time at search time fill the slots left (newest first)
    busy = sorted((v for v in views if v.status == "busy"), key=lambda v: -v.created_at)
    return out + busy[:max(0, top - len(out))]


def rotated(names: Sequence[str], block: int) -> list[str]:
    """The order of block `block`: rotated by one per block, reversed every other block, so
    each program is timed early and late, before and after every other."""
    n = len(names)
    k = block % n if n else 0
    out = list(names[k:]) + list(names[:k])
    return out[::-1] if block % 2 else out


async def confirm_run(store: RunStore, problem: Problem, evaluator: Evaluator, *, top: int = 5, blocks: int = 3,
                      on_progress: Callable[[str], None] | None = None,
                      designs: Sequence[DesignView] | None = None) -> dict[str, Any] | None:
    """Run a confirmation round on the run in `store` (on `designs`, default `chosen`) and
    keep it there; its body, or None when there is nothing to confirm.

    Raises:
        HarnessError: a block did not finish (nothing is kept).
    """
    say = on_progress or (lambda _t: None)
    picked = list(designs) if designs is not None else chosen(stored_views(store), top)
    if not picked:
        return None
    words = names_of(problem.domain)
    second = compared_program(problem, evaluator)
    # a design that is the compared baseline's own recipe is that program: the round times it once
    itself = {v.id: second for v in picked if v.author in words.compared_authors} if second else {}
    sources = {v.id: v.source for v in picked if v.id not in itself}
    names = [*sources, *([second] if second else [])]
    reference_ms = next((v.measures.reference_ms for v in picked if v.measures.reference_ms), None)
    t0 = time.monotonic()
    same = "".join(f"; {k[:10]} is the {words.compared_text} baseline's own recipe, timed as it" for k in itself)
    plan = [*looks(2, blocks, least=2), blocks]
    say(f"confirming: up to {blocks} blocks, {plan[0]} at once first where the device has slots for them "
        f"({len(sources)} designs, {words.reference}{f', {words.compared_text}' if second else ''}{same})")

    async def block(b: int) -> tuple[dict[str, Any], dict[str, Any]]:
        tb = time.monotonic()
        result = await evaluator.confirm_block(problem, sources, rotated(names, b), reference_ms,
                                               on_stage=lambda stage: say(f"block {b + 1}: {stage}"))
        say(f"block {b + 1}: done in {time.monotonic() - tb:.0f} s")
        return result, block_cost(result, time.monotonic() - tb)

    results: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
    stop = "planned"
    for n in plan:
        # Each block is its own worker process; most of a block is loading and compiling its
        # programs (two thirds, measured on the H200), which overlaps another block's timing, and
        # the timing itself holds the device exclusively, so blocks never time over each other.
        first = len(results)
        done = await asyncio.gather(*(block(b) for b in range(first, n)), return_exceptions=True)
        failed = next((d for d in done if isinstance(d, BaseException)), None)
        if failed is not None:
            raise failed
        results += [d[0] for d in done if not isinstance(d, BaseException)]
        costs += [d[1] for d in done if not isinstance(d, BaseException)]
        # a block that ran out of memory beside the others (KernelBench's largest inputs on an 80 GB
        # GPU) is run again once, alone: the memory was theirs, not its programs' need
        for b in [b for b in range(first, n) if n - first > 1 and _out_of_memory(results[b])]:
            say(f"block {b + 1} ran out of memory beside the others: running it again alone")
            try:
                results[b], costs[b] = await block(b)
            except HarnessError as e:  # the block as it first ran stands
                say(f"block {b + 1} failed again ({e}): its first run stands")
        if n < blocks and settled(combine(results, picked, second, itself), results, itself):
            stop = "settled"
            say(f"confirmed after {n} of up to {blocks} blocks: every interval within the timing's target")
            break
    confirmed = combine(results, picked, second, itself)
    body = {"blocks": len(results), "planned_blocks": blocks, "stop": stop, "top": top, "order": names,
            "designs": [d.to_json(words.key, words.compared) for d in confirmed],
            **({words.compared: _compared_json(results, second, words.key)} if words.compared else {}),
            f"{words.key}_ms": _reference_ms(results),
            "wall_s": round(time.monotonic() - t0, 3), "block_costs": costs,
            "environment": results[-1].get("environment", {}) if results else {}}
    store.add_confirmation(body)
    return body


def settled(confirmed: Sequence[ConfirmedDesign], results: Sequence[dict[str, Any]],
            itself: Mapping[str, str] | None = None) -> bool:
    """The stop rule of a round (`core.paired.settled`'s, applied across blocks): every design
    that agrees with the reference has a confirmed ratio whose interval's half-width is at most
    the timing's `target_halfwidth` (the blocks say which) of the ratio. A target of 0 never
    stops early; a design some block could not time (busy) waits for more blocks, one that
    failed in a block (it no longer agrees, it tampered) does not: more blocks change nothing."""
    target = min((float(r.get("target_halfwidth") or 0.0) for r in results), default=0.0)
    if target <= 0:
        return False
    for d in confirmed:
        if d.vs_reference is None:
            name = (itself or {}).get(d.design_id, d.design_id)
            if any(((r.get("programs") or {}).get(name) or {}).get("error") for r in results):
                continue
            return False
        if d.vs_reference.rel_halfwidth > target:
            return False
    return True


def block_cost(result: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Where one block's time went: its whole wall (a fresh worker's start included), the
    worker's part after loading the reference, its timing inputs, and each program's seconds
    (`load_and_check`, `first_calls`, `fresh`, `warm`), as the worker reported them."""
    programs = result.get("programs") or {}
    return {"wall_s": round(wall_s, 3), "worker_s": result.get("wall_s"), "inputs_s": result.get("inputs_s"),
            "programs_s": {k: v.get("seconds") for k, v in programs.items() if isinstance(v, dict) and v.get("seconds")}}


def _out_of_memory(result: dict[str, Any]) -> bool:
    """Whether a block lost a program to memory (failure kind `oom`)."""
    return any(isinstance(e, dict) and e.get("kind") == "oom" for e in (result.get("programs") or {}).values())


def compared_program(problem: Problem, evaluator: Evaluator) -> str | None:
    """The compared baseline's name in a block's order (`BaselineNames.compared`: the domain's
    confirmation worker times it under that name), when the domain measures it here; None
    otherwise."""
    second = names_of(problem.domain).compared
    b = get_domain(problem.domain).baselines
    return second if second and b is not None and second in b.modes(evaluator.cfg, evaluator.on_gpu) else None


def _ratios(results: Sequence[dict[str, Any]], name: str, condition: str) -> list[list[float]]:
    """`name`'s pair ratios under `condition` in each block; none from a block in which the
    machine was too busy to time it (`busy`: void, like a busy window in any timing)."""
    out = []
    for r in results:
        entry = ((r.get("programs") or {}).get(name) or {}).get(condition) or {}
        xs = [] if busy_reason(entry.get("busy")) else entry.get("pair_ratios") or []
        out.append([float(x) for x in xs if isinstance(x, int | float) and x > 0])
    return out


def _busy(results: Sequence[dict[str, Any]], name: str) -> str:
    """What the busy guard saw in the blocks that could not time `name` ('' when none)."""
    for r in results:
        why = busy_reason((((r.get("programs") or {}).get(name) or {}).get("fresh") or {}).get("busy"))
        if why:
            return why
    return ""


def _medians(blocks: Sequence[Sequence[float]]) -> list[float]:
    return [statistics.median(b) for b in blocks if b]


def combine(results: Sequence[dict[str, Any]], picked: Sequence[DesignView],
            second: str | None = None, itself: Mapping[str, str] | None = None) -> list[ConfirmedDesign]:
    """Every picked design's confirmed numbers from the blocks' results, ranked (`second`: the
    compared baseline's program, `compared_program`; None: none timed; `itself`: design id ->
    the program timed for it, for a design that is a baseline's own recipe)."""
    comp = _medians(_ratios(results, second, "fresh")) if second else []
    out = []
    for v in picked:
        name = (itself or {}).get(v.id, v.id)
        fresh = _ratios(results, name, "fresh")
        errors = [str(((r.get("programs") or {}).get(name) or {}).get("error") or "") for r in results]
        meds = _medians(fresh)
        vs_compared = None
        if comp and name != second and len(comp) == len(meds) and all(fresh):
            vs_compared = per_block([m / c for m, c in zip(meds, comp, strict=True) if c > 0])
        search = (Ratio(v.speedup, v.speedup_low, v.speedup_high) if v.speedup is not None
                  and v.speedup_low is not None and v.speedup_high is not None else None)
        quiet = sum(1 for b in fresh if b)
        # an interval between processes needs two of them: one quiet block of several is not a
        # confirmation (its interval would hold only that process's own noise)
        need = min(2, len(results))
        missing = ""
        if quiet < need:
            missing = (f"timed in {quiet} of {len(results)} blocks, {need} needed: " if quiet else "") + (
                _busy(results, name) or "no block timed it")
        out.append(ConfirmedDesign(
            design_id=v.id, vs_reference=between_blocks(fresh) if quiet >= need else None,
            warm=between_blocks(_ratios(results, name, "warm")), vs_compared=vs_compared,
            block_medians=tuple(round(m, 6) for m in meds), search=search,
            error=next((e for e in errors if e), missing), blocks=quiet,
        ))
    return ranked(out)


def _reference_ms(results: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """The reference's median time in each block under each condition (the median over the pairings
    of that block): what the two conditions cost the reference itself."""
    out: dict[str, list[float]] = {"fresh": [], "warm": []}
    for r in results:
        for cond in out:
            xs = [float(e[cond]["reference_ms"]) for e in (r.get("programs") or {}).values()
                  if isinstance(e, dict) and isinstance((e.get(cond) or {}).get("reference_ms"), int | float)]
            if xs:
                out[cond].append(round(statistics.median(xs), 6))
    return out


def _compared_json(results: Sequence[dict[str, Any]], second: str | None, reference: str) -> dict[str, Any] | None:
    """The compared baseline's own ratio over the reference across blocks (under
    `vs_<reference>`, the reference's key)."""
    r = between_blocks(_ratios(results, second, "fresh")) if second else None
    return {f"vs_{reference}": r.to_json()} if r is not None else None
