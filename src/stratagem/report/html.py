"""Owns `stratagem report`: one self-contained HTML file of a run (no external resources; the
figures are PNGs embedded as data URIs), and the page `stratagem serve` shows live.

Sections: the run summary (problem, policy and configuration, models, budget used, money, wall
time, device and environment), the best-so-far curves, every design's score by strategy with
failures marked, the strategy decisions, failure reasons and integrity rejections, the best
design (code, diff against its parent and the reference, per-kernel breakdown, fraction of
speed-of-light), the lineage tree, and the alignment and clustering analyses
(report/alignment.py).
"""

from __future__ import annotations

import base64
import difflib
import html
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, fields
from pathlib import Path
from typing import Any

from stratagem.core.search import ranked
from stratagem.core.text import clip
from stratagem.report import alignment as al
from stratagem.report import cases, figures
from stratagem.report.leaderboard import failure
from stratagem.search.api import RunSummary, read_run
from stratagem.search.headline import ratios_of
from stratagem.search.numbers import (
    board_marks,
    counts,
    did_not_pass,
    not_ranked_because,
    passed,
    rank_marks,
)
from stratagem.search.policies.redteam import views as redteam
from stratagem.store.records import AgentCallRecord, EvaluationRecord
from stratagem.store.sqlite import RunStore

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f4f4f4}pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:.8em;max-height:40em}
img{max-width:100%}.muted{color:#777}.bad{color:#b00}.ok{color:#070}code{font-size:.9em}
"""

LIVE_JS = """
<script>
(function(){var seen=null;function poll(){fetch('version',{cache:'no-store'}).then(function(r){return r.text()})
.then(function(v){if(seen===null){seen=v}else if(v!==seen){location.reload()}}).catch(function(){})
.finally(function(){setTimeout(poll,%d)})}poll()})();
</script>
"""


@dataclass(frozen=True)
class RunData(RunSummary):
    """Everything a report reads from a run directory (read once): `show`'s record of the run
    (`search/api.read_run`) and what only the report shows beside it."""

    _: KW_ONLY
    problem_source: str
    """The reference as a design's text, what the best design is diffed against."""
    calls: list[AgentCallRecord]
    """The agents' calls, oldest first."""
    evaluations: list[EvaluationRecord]
    created: dict[str, float]
    """When each design was stored (design id -> time)."""


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory, writing nothing into it (`RunStore.read`; works while the run
    goes on)."""
    d = Path(run_dir)
    with RunStore.read(d) as store:
        designs = store.designs()
        evaluations = store.evaluations()
        summary = read_run(store, d, designs, evaluations)
        problems = store.problems()
        source = _reference_text(problems[0], store.get_artifact(problems[0].source_hash)) if problems else ""
        return RunData(**{f.name: getattr(summary, f.name) for f in fields(summary)}, problem_source=source,
                       calls=sorted(store.agent_calls(), key=lambda c: c.created_at), evaluations=evaluations,
                       created={r.id: r.created_at for r in designs})


def _reference_text(rec: Any, source: str) -> str:
    """The reference as a design's text, what the best design is diffed against: the problem's
    source itself (PyTorch), or for a domain whose problem is more than the reference (a command
    problem: `Domain.written_reference`) the reference's editable files as written, as one text."""
    from stratagem.core.design import files_text
    from stratagem.domains import get_domain
    from stratagem.errors import StratagemError

    domain = get_domain(rec.domain)
    if domain.written_reference is None:
        return source
    try:
        return files_text(domain.written_reference(domain.parse_problem(source, name=rec.name, path=rec.path)))
    except (StratagemError, OSError, ValueError):
        return source  # a stored problem this version cannot read: diffed as stored


def version(run_dir: str | Path) -> str:
    """A cheap fingerprint of a run's progress (the live page reloads when it changes)."""
    d = Path(run_dir)
    with RunStore.read(d) as store:
        run = store.run()
        return f"{len(store.designs())}:{len(store.evaluations())}:{len(store.iterations())}:" \
               f"{run.status if run else '-'}:{run.updated_at if run else 0}"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _redteam(attempts: Sequence[Mapping[str, Any]]) -> str:
    """The attempts by class (`search/policies/redteam/views.py`) and every attempt's outcome in full."""
    rows = [(name, r["attempts"], *(r[k] for k in redteam.COLUMNS), ", ".join(r["checks"]))
            for name, r in redteam.by_class(attempts).items()]
    table = _table(["class", "attempts", *redteam.COLUMNS.values(), "caught by / breached at"], rows)
    lines = redteam.attempt_lines(attempts)
    return table + ("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>" if lines else "")


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _diff(a: str, b: str, a_name: str, b_name: str) -> str:
    d = "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True), a_name, b_name))
    return d or "(identical)"


def queries_at(data: RunData) -> dict[str, int]:
    """Design id -> LLM queries spent when it was stored."""
    out: dict[str, int] = {}
    for v in data.views:
        t = data.created.get(v.id, 0.0)
        out[v.id] = sum(c.requests for c in data.calls if c.created_at <= t)
    return out


def _summary(data: RunData) -> str:
    run = data.run
    cfg = run.config if run else {}
    spend = data.spend
    tools = f" and {spend.probes} tool runs (check, profile)" if spend.probes else ""
    env = next((e.environment for e in reversed(data.evaluations) if e.environment), {})
    wall = (run.updated_at - run.created_at) if run else 0.0
    rows = [
        ("problem", data.problem), ("policy", run.policy if run else "-"),
        ("status", f"{run.status} ({run.stop_reason})" if run and run.stop_reason else (run.status if run else "-")),
        ("models", (cfg.get("agents") or {}).get("model") or "- (no LLM)"),
        ("LLM queries (requests)", f"{spend.queries} in {spend.calls} agent calls"),
        ("tokens", spend.tokens_text().removeprefix("tokens ")),
        ("money", f"${spend.usd:.4f}" + (f" ({spend.unpriced_calls} calls unpriced)" if spend.unpriced_calls else "")),
        ("evaluations", f"{spend.evaluations}{tools} ({spend.gpu_seconds:.0f} s of worker time)"),
        ("iterations", str(len(data.iterations))), ("designs", counts(data.views).text()),
        ("wall time", f"{wall / 60:.1f} min"),
        ("device", str(env.get("device_name") or env.get("device") or "-")),
        ("environment", ", ".join(f"{k} {v}" for k, v in env.items() if k in ("torch", "cuda", "triton", "python",
                                                                                 "capability", "threads"))),
    ]
    rows.insert(3, ("result", "; ".join(data.headline.lines())))
    conf = _pre(json.dumps(cfg, indent=2))
    return _table(["run", ""], rows) + f"<details><summary>configuration</summary>{conf}</details>"


def _strategies(data: RunData) -> str:
    plans = Counter((it.plan or {}).get("strategy") or "-" for it in data.iterations)
    total = sum(plans.values()) or 1
    rows = [(s, n, f"{100 * n / total:.0f}%") for s, n in plans.most_common()]
    made = Counter(v.strategy or "-" for v in data.views)
    ok = Counter(v.strategy or "-" for v in data.views if passed(v))
    rows2 = [(s, n, ok[s]) for s, n in made.most_common()]
    return ("<p>Iterations by the strategy their plan chose:</p>" + _table(["strategy", "iterations", "share"], rows)
            + "<p>Designs by strategy (or role):</p>" + _table(["strategy", "designs", "valid"], rows2))


def _failures(data: RunData) -> str:
    bad = [v for v in data.views if did_not_pass(v)]
    unranked = [v for v in data.views if not_ranked_because(v)]
    held = ("<p>Valid but not ranked: " + "; ".join(
        html.escape(f"{v.id[:12]} {v.speedup_text()} ({clip(not_ranked_because(v), 200)})") for v in unranked)
        + "</p>") if unranked else ""
    if not bad:
        return "<p>No design failed.</p>" + held
    where = Counter(failure(v)[0] for v in bad)
    integrity = [v for v in bad if failure(v)[0] in ("integrity", "static_checks", "shapes", "provenance", "judge")
                 or "harness_tampering" in v.report or "rejected" in v.report.lower()]
    rows = [(v.id[:12], v.iteration, v.author, *failure(v)) for v in sorted(bad, key=lambda v: v.created_at)]
    return (held + _table(["failed at", "designs"], where.most_common())
            + f"<p>{len(integrity)} integrity or static-check rejections.</p>"
            + _table(["design", "iter", "author", "failed at", "reason"], [(*r[:4], clip(str(r[4]), 300)) for r in rows]))


def _confirmation(data: RunData) -> str:
    """The confirmation round: the contenders re-timed together, their confirmed ratios first and
    the search-time figures beside them (the table `stratagem confirm` prints)."""
    body = data.confirmation or {}
    n = data.names
    second = [f"vs {n.compared_text}"] if n.compared else []
    rows = []
    designs = list(body.get("designs") or ())
    for mark, d in zip(rank_marks([d.get("rank") for d in designs]), designs, strict=True):
        v = next((x for x in data.views if x.id == d.get("design_id")), None)
        x = ratios_of(v, n) if v is not None else None
        rows.append((mark, str(d.get("design_id"))[:12], x.reference.number() if x else "-",
                     *([x.compared.number() if x and x.compared else "-"] if second else []),
                     x.search.number() if x else "-"))
    return (f"<p>{body.get('blocks')} independent blocks, interleaved: each ratio's interval holds the spread "
            "between them. The run's headline is this round's.</p>"
            + _table(["#", "design", f"confirmed vs {n.reference}", *second, "search time"], rows))


def _best(data: RunData) -> str:
    best = data.best
    if best is None:
        return "<p>No ranked design yet (a valid design whose timing settled).</p>"
    views = {v.id: v for v in data.views}
    parent = next((views[p] for p in best.parents if p in views), None)
    r = ratios_of(best, data.names)
    said = [f"{r.reference.number()} vs {data.names.reference}"
            + (f", confirmed (search time: {r.search.number()})" if r.reference.confirmed else ""),
            *([r.compared.sentence()] if r.compared is not None else [])]
    parts = [f"<p><b>{html.escape(best.id[:12])}</b>: {html.escape('; '.join(said))}; "
             f"by {html.escape(str(best.author))}, "
             f"strategy {html.escape(str(best.strategy))}, iteration {best.iteration}.</p>"]
    lines = best.measures.lines(data.names.reference)
    if lines:
        parts.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")
    timing = _timing(data, best.id)
    if timing and timing.get("cases"):
        parts.append("<h3>Per case</h3>" + cases.html_table(timing))
        lines = cases.series(timing)
        if cases.figure_lines(lines):
            parts.append(_img(figures.cases(lines, f"{best.id[:12]} per case"), "per case"))
    else:
        sol = _sol(data, best.id)
        parts.append(f"<p>Fraction of speed-of-light (roofline): {html.escape(sol)}</p>")
    parts.append("<h3>Code</h3>" + _pre(best.source))
    if parent is not None:
        parts.append("<h3>Diff against its parent</h3>" + _pre(_diff(parent.source, best.source, parent.id[:12],
                                                                          best.id[:12])))
    parts.append("<h3>Diff against the reference</h3>" + _pre(_diff(data.problem_source, best.source, "reference",
                                                                        best.id[:12])))
    if best.measures.kernels:
        parts.append("<h3>Per-kernel time</h3>" + _img(figures.kernels(best.measures.kernels), "kernels"))
    else:
        parts.append("<p class=muted>No per-kernel profile (profiles are taken on GPUs).</p>")
    return "".join(parts)


def _timing(data: RunData, design_id: str) -> dict[str, Any] | None:
    """The latest passed timing stage's details of `design_id`."""
    return cases.latest_timing([ev for ev in data.evaluations if ev.design_id == design_id])


def _tuning(data: RunData) -> str | None:
    """The tune study's section: the points tried, the objective against each parameter, the
    best point, and, in a run where agents wrote designs too, where the best came from."""
    from stratagem.search.policies.tune import tuning

    t = tuning(data.views)
    if t is None:
        return None
    names = list(dict.fromkeys(n for p in t.points for n in p.point))
    best_id = t.best.design_id if t.best is not None else None
    rows = [(i, p.design_id[:12], *(p.point.get(n, "-") for n in names), p.status,
             f"{p.speedup:.3g}x" + (" (best)" if p.design_id == best_id else "") if p.speedup is not None else "-")
            for i, p in enumerate(t.points, start=1)]
    parts = [_table(["#", "design", *names, "status", "speedup"], rows),
             _img(figures.tuning(t.points, names), "objective against each parameter")]
    tuned = {p.design_id for p in t.points}
    others = [v for v in data.views if v.id not in tuned and v.speedup is not None and passed(v)]
    best = data.best
    if others and best is not None:
        top_agent = max(others, key=lambda v: v.speedup or 0.0)
        src = "the tuner" if best.id in tuned else f"{best.author} (not the tuner)"
        tuned_best = f"{t.best.speedup:.3g}x" if t.best is not None and t.best.speedup is not None else "none ranked"
        parts.append(f"<p>The run's best ({html.escape(best.id[:12])}, {html.escape(best.speedup_text())}) came from "
                     f"{html.escape(src)}. Best tuned point: {tuned_best}; best design written otherwise: "
                     f"{html.escape(top_agent.id[:12])}, {html.escape(top_agent.speedup_text())}.</p>")
    return "".join(parts)


def _sol(data: RunData, design_id: str) -> str:
    for ev in reversed(data.evaluations):
        if ev.design_id != design_id:
            continue
        roof = next((v for v in ev.validators if v.get("name") == "roofline"), None)
        d = (roof or {}).get("details") or {}
        if isinstance(d.get("sol_fraction"), int | float):
            basis = f"; {d['basis']}" if d.get("basis") else ""
            return (f"{100 * float(d['sol_fraction']):.1f}% ({d.get('bound', '?')}-bound floor "
                    f"{d.get('floor_ms', 0):.4g} ms{basis})")
        return "not computed (" + str(d.get("note") or d.get("reason") or "no roofline") + ")"
    return "-"


def _analyses(data: RunData, xis: Sequence[float]) -> str:
    views = [v for v in data.views if v.source.strip()]
    parts = []
    plans = {it.n: (it.plan or {}).get("strategy") for it in data.iterations}
    try:
        emb = al.embed(views) if len(views) >= 3 else None
        a = al.align(views, plans, xis, emb)
        parts.append("<h3>Alignment with Bayesian optimization</h3>")
        if a.note:
            parts.append(f"<p class=muted>{html.escape(a.note)}</p>")
        parts.append(_table(["xi", "iterations judged", "Strategist matches BO", "Implementors carry out the plan",
                             "exploratory designs", "designs labelled"], al.efficiency_rows(a)))
        c = al.cluster(views, emb=emb)
        parts.append("<h3>Code clusters</h3>")
        if c.note:
            parts.append(f"<p class=muted>{html.escape(c.note)}</p>")
        else:
            sp = {v.id: v.speedup for v in views}
            parts.append(_img(figures.cluster_map(c.ids, c.map2d, c.assignment, sp), "t-SNE"))
            text = {v.id: v.speedup_text() for v in views}
            parts.append(_table(["cluster", "designs", "best", f"best vs {data.names.reference} [95% CI]",
                                 "distinctive tokens"],
                                [(k.label, len(k.ids), (k.best_id or "-")[:12],
                                  text.get(k.best_id or "", "-") if k.best_speedup else "-", " ".join(k.tokens))
                                 for k in c.clusters]))
    except Exception as e:  # noqa: BLE001 - an analysis that fails does not take the report with it
        parts.append(f"<p class=bad>analysis failed: {html.escape(type(e).__name__)}: {html.escape(str(e))}</p>")
    return "".join(parts)


def build_report(run_dir: str | Path, *, live_ms: int | None = None, xis: Sequence[float] = al.DEFAULT_XI,
                 analyses: bool = True) -> str:
    """The report of one run as one self-contained HTML page; `live_ms`: the page polls the
    server that serves it and reloads when the run has moved on."""
    data = load_run(run_dir)
    views = data.views
    best = data.best
    sections = [
        ("Summary", _summary(data)),
        ("Best so far", _img(figures.best_so_far(views, queries_at(data), len(data.iterations), data.names.reference),
                             "best so far")),
        ("Every design", _img(figures.scores(views, data.names.reference), "scores") if views else "<p>No design yet.</p>"),
        ("Strategies", _strategies(data)),
        ("Failures and integrity rejections", _failures(data)),
        ("The best design", _best(data)),
        *([("Tuning", tuned)] if (tuned := _tuning(data)) is not None else []),
        ("Lineage", _img(figures.lineage(views, best.id if best else None), "lineage") if views else "-"),
    ]
    if analyses:
        sections.append(("Analyses", _analyses(data, xis)))
    r, c = data.names.reference, data.names.compared
    second = [f"vs {c} [95% CI]"] if c else []  # a domain without a second baseline: no column
    rows = []
    board = ranked(views)[:20]
    for mark, v in zip(board_marks(board), board, strict=True):  # each row's ratios are the ones it is ranked by
        x = ratios_of(v, data.names)
        rows.append((mark, v.id[:12], x.reference.cell(), *([x.compared.cell() if x.compared else "-"] if c else []),
                     x.search.number() if x.reference.confirmed else "-", v.iteration, v.author, v.strategy))
    leader = _table(["#", "design", f"vs {r} [95% CI]", *second, "search time", "iter", "author", "strategy"], rows)
    note = ("<p class=muted>c: confirmed (the confirmation round's ratio; its designs rank first, by it); "
            f"vs {c} otherwise chained via {r} at search time; itself: the design is that baseline's own "
            "recipe; search time: the figure the search measured, beside the confirmed one.</p>") if c else ""
    sections.insert(1, ("Leaderboard", leader + note))
    if data.confirmation is not None:
        sections.insert(1, ("Confirmation round", _confirmation(data)))
    if data.redteam:
        sections.insert(1, ("Red-team attempts", _redteam(data.redteam)))
    body = "".join(f'<h2 id="{t.lower().replace(" ", "-")}">{html.escape(t)}</h2>{s}' for t, s in sections)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    live = (LIVE_JS % live_ms) if live_ms else ""
    title = f"stratagem · {data.problem} · {data.run.policy if data.run else ''}"
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f'<p class=muted id="stamp">{html.escape(counts(views).text())} · generated {stamp}</p>'
            f"{body}{live}</body></html>")


def write_report(run_dir: str | Path, out: Path | None = None, **kw: Any) -> Path:
    path = out or Path(run_dir) / "report.html"
    path.write_text(build_report(run_dir, **kw), encoding="utf-8")
    return path
