"""Owns how one design is shown to the agents: its headline ratio over the reference and where
it stands (the one rule, `core.search.standing`), the chained ratio over the domain's second
baseline, the confirmed numbers, what the harness timed, its lineage, and the `design` block
every prompt shows it in (`design.md`'s sections, in the domain's words).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from stratagem.context.curate import compress_report
from stratagem.context.templates import fill, has, reference_word, short_id
from stratagem.core.search import DesignView, ratio_text, standing


def standing_words(where: str, domain: str) -> str:
    """How a design's standing against the reference it is timed beside (`core.search.standing`:
    the one rule) is written."""
    ref = reference_word(domain)
    return {"faster": f"faster than {ref}", "within noise": f"within noise of {ref} (its interval holds 1.00x)",
            "slower": f"slower than {ref}"}[where]


def _performance(view: DesignView, domain: str) -> str:
    """The design's headline number: its paired ratio over the reference with its 95% interval,
    and where that stands against 1.00x (the one rule: within noise when the interval holds it)."""
    if view.speedup is None:
        return ""
    ci = "" if view.speedup_low is not None else " (no interval)"
    where = standing(view.speedup_low, view.speedup_high)
    return (f", {view.speedup_text()} vs {reference_word(domain)}{ci}"
            + (f": {standing_words(where, domain)}" if where else ""))


def second_baseline_line(view: DesignView, domain: str) -> str:
    """The ratio against the domain's second baseline (`design.md`'s `vs_second`), marked as
    chained through the reference (it is not paired); '' when the design has none."""
    if view.speedup_compared is None or not has("design", "vs_second", domain):
        return ""
    low, high = view.compared_low, view.compared_high
    num = (f"{ratio_text(view.speedup_compared)}x [{ratio_text(low)}, {ratio_text(high)}]"
           if low is not None and high is not None else f"{ratio_text(view.speedup_compared)}x (no interval)")
    if view.compared_fails:
        verdict = fill("design", "second_fails", domain=domain, why=view.compared_fails)
    elif view.compared_unstable:
        verdict = fill("design", "second_unstable", domain=domain, why=view.compared_unstable)
    else:
        where = standing(low, high)
        verdict = {"faster": ": faster", "slower": ": slower", "within noise": ": on par (its interval holds 1.00x)",
                   None: ""}[where]
    return fill("design", "vs_second", domain=domain, num=num, verdict=verdict)


def timing_lines(view: DesignView, domain: str) -> list[str]:
    """What the harness timed of a design, one fact a line: its own time beside the reference's
    time of its own evaluation, the chained ratio against the second baseline, the confirmed
    numbers, unstable timing and the timing notes (`DesignView.timing_notes`)."""
    out = []
    m = view.measures
    ref = reference_word(domain)
    if view.runtime_ms is not None:
        beside = f", {ref} {m.reference_ms:.4g} ms timed beside it" if m.reference_ms is not None else ""
        spread = []
        if m.runtime_q1_ms is not None and m.runtime_q3_ms is not None:
            spread.append(f"quartiles {m.runtime_q1_ms:.4g}-{m.runtime_q3_ms:.4g} ms")
        if m.pairs:
            spread.append(f"{m.pairs} block pairs")
        more = f"; {', '.join(spread)}" if spread else ""
        out.append(f"its own evaluation: design {view.runtime_ms:.4g} ms{beside} (medians{more})")
    if line := second_baseline_line(view, domain):
        out.append(line)
    c = view.confirmed
    if c is not None and c.vs_reference is not None:
        v = c.vs_reference
        comp = ""
        if c.vs_compared is not None and has("design", "confirmed_second", domain):
            comp = fill("design", "confirmed_second", domain=domain,
                        num=f"{ratio_text(c.vs_compared.ratio)}x [{ratio_text(c.vs_compared.low)}, "
                            f"{ratio_text(c.vs_compared.high)}]")
        out.append(f"confirmed: {ratio_text(v.ratio)}x [{ratio_text(v.low)}, {ratio_text(v.high)}] vs {ref}"
                   f": {standing_words(standing(v.low, v.high) or 'within noise', domain)}{comp} (re-timed with the "
                   "other contenders in fresh processes; the design is ranked on this)")
    if view.status == "unstable":
        out.append("timing unstable" + (f": {view.stability}" if view.stability else "")
                   + " (not ranked until a stable re-timing)")
    if view.status == "busy":
        out.append((view.stability or "not measured: the machine was busy")
                   + " (no ratio; it is timed again at a later iteration)")
    if view.timing_notes:
        out.append("timing notes: " + "; ".join(view.timing_notes))
    return out


def design_summary(view: DesignView, domain: str) -> str:
    """A design on one line: status, paired ratio and standing, its time beside the reference's."""
    m = view.measures
    beside = ""
    if view.runtime_ms is not None:
        ref = f" beside {reference_word(domain)} {m.reference_ms:.4g} ms" if m.reference_ms is not None else ""
        beside = f"; design {view.runtime_ms:.4g} ms{ref}"
    if m.floor_fraction is not None and m.floor_ms is not None:
        beside += f"; {m.floor_fraction:.0%} of the roofline estimate's speed ({m.floor_ms:.4g} ms, an estimate)"
    return f"{view.status}{_performance(view, domain)}{beside}"


def lineage(view: DesignView) -> str:
    bits = []
    if view.iteration is not None:
        bits.append(f"iteration {view.iteration}")
    if view.strategy:
        bits.append(f"strategy {view.strategy}")
    if view.author:
        bits.append(f"by {view.author}")
    if view.parents:
        bits.append("from " + ", ".join(f"`{short_id(p)}`" for p in view.parents))
    return "(" + "; ".join(bits) + ")" if bits else ""


def tuned_lines(view: DesignView) -> list[str]:
    """A point of a template (the `tune` policy's, or an agent's template the loop tuned): its
    parameters (the `params` tag), for an agent's whose template it was (the `handoff` tag,
    `search/policies/handoff.py`) and, on a hand-off's best point, every point of the template
    with its verdict as a compact table (the `tuned_points` tag); empty for any other design."""
    params = view.tags.get("params")
    if not isinstance(params, dict) or not params:
        return []
    values = ", ".join(f"{k}={v}" for k, v in params.items())
    handoff = view.tags.get("handoff")
    whose = ""
    if isinstance(handoff, dict):
        whose = (f" (the template {handoff.get('author') or 'an agent'} wrote; point {handoff.get('point')} of "
                 f"{handoff.get('of')})")
    return [f"tuned from a template: {values}{whose}", *_points_table(view.tags.get("tuned_points"))]


def _points_table(points: object) -> list[str]:
    """Every tuned point of a template, one row each: parameters | verdict | ratio | design."""
    if not isinstance(points, list) or not points:
        return []
    rows = []
    for p in points:
        if not isinstance(p, dict):
            continue
        params = p.get("params")
        params = params if isinstance(params, dict) else {}
        speed = p.get("speedup")
        ratio = f"{ratio_text(float(speed))}x" if isinstance(speed, int | float) else "-"
        rows.append(f"  | {', '.join(f'{k}={v}' for k, v in params.items())} | {p.get('status')} | {ratio} | "
                    f"`{short_id(str(p.get('design') or '-'))}` |")
    return [f"every tuned point of its template ({len(rows)}):\n  | parameters | verdict | ratio | design |\n"
            + "\n".join(rows)] if rows else []


def render_design(view: DesignView, *, report_chars: int | None = None, domain: str) -> str:
    """One design as every prompt shows it: id, verdict, lineage, source, failure report."""
    report = view.report.strip()
    if report_chars is not None:
        report = compress_report(report, report_chars)
    if view.status in ("valid", "unreviewed", "unstable", "busy"):
        report_block = ""
    else:
        report_block = "Failure report:\n```\n" + report + "\n```" if report else ""
    others = replace(view.measures, runtime_q1_ms=None, runtime_q3_ms=None).lines()  # timing: timing_lines
    lines = (*tuned_lines(view), *timing_lines(view, domain), *others)
    return fill(
        "design",
        "design",
        domain=domain,
        short_id=short_id(view.id),
        status=view.status,
        performance=_performance(view, domain),
        lineage="\n".join([lineage(view), *(f"- {line}" for line in lines)]).strip("\n"),
        source=view.source.strip(),
        report=report_block,
    )


def render_designs(views: Sequence[DesignView], *, report_chars: int | None = None, domain: str) -> str:
    if not views:
        return fill("design", "empty", domain=domain)
    return "\n\n".join(render_design(v, report_chars=report_chars, domain=domain) for v in views)
