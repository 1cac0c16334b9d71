"""Owns the writers' tools as the harness runs them (`check`, `profile`; docs/agents.md): a
design, or the reference as the domain restates it, through the evaluator with the graph the
problem's domain offers for the tool (`Domain.graphs`), in the sandbox like every
evaluation, and what the model is told of it. Neither is a verdict nor a stored design: the
Session (`search/session.py`) counts each run in the spend (`Spend.probes`, its worker seconds
in `gpu_seconds`) and refuses one once a budget is used up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stratagem.core.design import Design, text_files
from stratagem.core.graph import ValidatorGraph, ValidatorSpec
from stratagem.core.jsonish import mapping
from stratagem.core.problem import Problem
from stratagem.core.search import PROBE_MODES, DesignView, ProbeMode
from stratagem.core.verdict import Verdict
from stratagem.domains import get_domain
from stratagem.search.state import ERROR_TAIL_CHARS

__all__ = ["PROBE_MODES", "ProbeMode", "graph_of", "offered", "probe_text", "target"]


def _graphs(problem: Problem) -> Mapping[str, Sequence[ValidatorSpec]]:
    return get_domain(problem.domain).graphs


def offered(problem: Problem) -> tuple[ProbeMode, ...]:
    """The tools `problem`'s domain offers (none: its writers get no tool)."""
    graphs = _graphs(problem)
    return tuple(m for m in PROBE_MODES if graphs.get(m))


def graph_of(problem: Problem, name: str) -> ValidatorGraph | None:
    """The graph `name` (a tool's, or `breach`) of `problem`'s domain, None when it has none."""
    specs = _graphs(problem).get(name)
    return ValidatorGraph.of(tuple(specs)) if specs else None


def target(problem: Problem, what: str, designs: Sequence[DesignView]) -> tuple[Design, str]:
    """The design a tool runs and how the model is told it: `reference` (the reference
    restated as a design, `Prompts.offline_design`), a design of the run by its id or a unique
    prefix of at least 6 characters, or else a design's whole text (the domain's main file, or
    several files in the `text_files` form)."""
    domain = get_domain(problem.domain)
    ref = what.strip().strip("`")
    if ref.lower() in ("reference", "the reference"):
        text, of = domain.prompts.offline_design(problem), "the reference"
    else:
        named = [v for v in designs if len(ref) >= 6 and "\n" not in ref and v.id.startswith(ref)]
        text, of = (named[0].source, f"design `{named[0].id[:12]}`") if len(named) == 1 else (what, "this code")
    return (Design(files=text_files(text, domain.main_file(problem)),
                   provenance={"author": "tool", "strategy": "probe"}), of)


def probe_text(mode: ProbeMode, verdict: Verdict, of: str, floor_ms: float | None = None,
               floor_basis: str | None = None) -> str:
    """What the model is told of one tool run on `of` (`the reference`, `this code`, ...);
    `floor_ms` and `floor_basis`: the problem's roofline floor and what bounds it, when known."""
    if verdict.status != "valid":
        first = verdict.failures[0] if verdict.failures else None
        d = mapping(first.details) if first is not None else {}
        tail = str(d.get("traceback") or mapping(d.get("sandbox")).get("stderr_tail") or d.get("stderr_tail") or "")
        tail = f"\n{tail[-ERROR_TAIL_CHARS:]}" if tail.strip() else ""
        return f"{mode} of {of} failed (not an evaluation: nothing was recorded):\n{verdict.report()}{tail}"
    if mode == "check":
        stages = ", ".join(r.name for r in verdict.results)
        return (f"check of {of} passed ({stages}): it builds and its outputs match the reference's on the hidden "
                "inputs. Not a verdict: the evaluation of your answer also runs every other check and times it.")
    table = verdict.result("kernels")
    return profile_lines(mapping(table.details) if table is not None else {}, of, floor_ms, floor_basis)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) else None


def _time(us: float) -> str:
    return f"{us:.4g} us" if us < 1e3 else f"{us / 1e3:.4g} ms"


def _row_line(r: Mapping[str, Any]) -> str:
    """One row of a profile: its time and share, then what it achieved against the peaks."""
    share = _num(r.get("share"))
    parts = [_time(_num(r.get("us")) or 0.0) + (f" ({share:.0%})" if share is not None else "")
             + f", {r.get('calls')} calls"]
    gbps, flops = _num(r.get("gbps")), _num(r.get("tflops"))
    if gbps is not None:
        frac = _num(r.get("bandwidth_fraction"))
        parts.append(f">= {gbps:.4g} GB/s" + (f" ({frac:.0%} of peak)" if frac is not None else ""))
    if flops is not None:
        frac = _num(r.get("flop_fraction"))
        rate = f"{flops:.4g} TFLOP/s" if flops >= 1 else f"{flops * 1e3:.4g} GFLOP/s"
        parts.append(rate + (f" ({frac:.0%} of the {r.get('rate_mode')} matmul peak)" if frac is not None else ""))
    if (floor := _num(r.get("floor_us"))) is not None:
        parts.append(f"its floor {_time(floor)}")
    if gbps is None and flops is None:
        parts.append("no work recorded")
    return f"- {str(r.get('name'))[:90]}: " + "; ".join(parts)


PROFILE_ROWS = 12
"""Rows a profile's answer shows at most, the heaviest first; the rest are one line."""


def profile_lines(d: Mapping[str, Any], of: str, floor_ms: float | None, floor_basis: str | None = None) -> str:
    """The `profile` tool's answer: the heaviest `PROFILE_ROWS` rows of the `kernels` stage
    (`kernel_roofline.py`), largest first, each with what it achieved against the device's
    calibrated peaks and its own floor; the rest as "N more kernels, T"; the profiler that
    measured it; the total beside the roofline floor and what bounds it. At most
    `PROFILE_ROWS` + 5 lines, whatever the program."""
    cuda = d.get("device") == "cuda"
    rows = sorted((mapping(r) for r in d.get("rows") or ()), key=lambda r: -(_num(r.get("us")) or 0.0))
    kept, over = rows[:PROFILE_ROWS], rows[PROFILE_ROWS:]
    what = "kernels" if cuda else "operators"
    total_us = _num(d.get("total_us"))
    by = f", measured by {d['source']}" if d.get("source") else ""
    lines = [f"profile of one warm call of {of}{by}: the heaviest {what} by "
             + ("device time" if cuda else "their own CPU time")
             + " (under the profiler: compare shares, not absolute times; bandwidth counts the bytes of each "
             "launching operator's inputs only, so it is a lower bound; FLOPs only where the profiler "
             "estimates them)"]
    lines += [_row_line(r) for r in kept]
    rest = mapping(d.get("rest"))
    more = int(_num(rest.get("count")) or 0) + len(over)
    if more:
        more_us = (_num(rest.get("us")) or 0.0) + sum(_num(r.get("us")) or 0.0 for r in over)
        share = f" ({more_us / total_us:.0%})" if total_us else ""
        lines.append(f"- {more} more {what}, {_time(more_us)}{share}")
    if not rows:
        lines.append(f"- no profile: {d.get('note') or 'nothing was recorded'}")
    peaks = mapping(d.get("peaks"))
    if peaks:
        rates = ", ".join(f"{m} {v:.4g}" for m, v in mapping(peaks.get("matmul_tflops")).items()
                          if isinstance(v, int | float))
        lines.append(f"the device's calibrated peaks: {_num(peaks.get('bandwidth_gbps')) or 0.0:.4g} GB/s; "
                     f"matmul TFLOP/s {rates or 'unknown'} (a row's FLOP rate is set against its dtype's rate)")
    if total_us is not None and total_us > 0:
        lines.append(f"total: {total_us / 1e3:.4g} ms")
        if floor_ms:
            basis = f"; {floor_basis}" if floor_basis else ""
            lines.append(f"the roofline estimate of the whole problem (its work at the device's calibrated peaks, an "
                         f"estimate of the least time{basis}): {floor_ms:.4g} ms, "
                         f"{floor_ms / (total_us / 1e3):.1%} of this total")
    return "\n".join(lines)
