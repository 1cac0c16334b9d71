"""Owns the views of one evaluation, a baseline and a problem audit: their `--json` records
and their terminal tables (the `eval`, `baseline` and `audit` commands print these)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stratagem.core.problem import Problem
from stratagem.core.verdict import Verdict
from stratagem.domains import get_domain, names_of
from stratagem.evaluation.results import Baseline
from stratagem.report.cases import print_cases


def baseline_json(prob: Problem, base: Baseline) -> dict[str, Any]:
    """The `baseline --json` record."""
    ok = bool(base.modes)
    failures = [{"validator": r.name, "kind": r.kind, "reason": r.reason} for r in base.verdict.failures]
    return {
        "status": "valid" if ok else "error",
        "problem": prob.name,
        "problem_id": prob.id,
        "domain": prob.domain,
        "reference_ms": {m: base.median_ms(m) for m in base.modes},
        f"vs_{base.reference}": {m: r.to_json() for m in base.modes if (r := base.vs_reference(m)) is not None},
        "unstable": {m: list(r) for m, r in base.unstable().items()},
        "fails_correctness": base.failing(),
        "baselines": {m: dict(v) for m, v in base.modes.items()},
        "cached": base.cached,
        "environment": dict(base.environment),
        "failures": failures,
    }


def print_baseline(console: Console, name: str, base: Baseline, out: dict[str, Any]) -> None:
    """The baseline's table: each mode's median, spread, paired ratio and state."""
    t = Table(title=f"baseline: {name} on {base.environment.get('device_name', '?')}")
    ref = names_of(out.get("domain")).reference
    for col in ("mode", "median ms", "IQR ms", "n", f"speedup over {ref} (paired)", "stability"):
        t.add_column(col)
    unstable = base.unstable()
    for mode, stats in base.modes.items():
        if "median_ms" in stats:
            r = base.vs_reference(mode)
            vs = "-" if r is None or mode == base.reference else f"{r.ratio:.3g}x [{r.low:.3g}, {r.high:.3g}]"
            flag = "[yellow]unstable[/]" if mode in unstable else "stable"
            if base.fails(mode):
                flag += " · [red]fails correctness[/]"
            t.add_row(mode, f"{stats['median_ms']:.4f}", f"{stats['iqr_ms']:.4f}", str(stats["n"]), vs, flag)
        else:
            t.add_row(mode, f"[red]{stats.get('error', 'failed')}[/]", "", "", "", "")
    console.print(t)
    for mode, reasons in unstable.items():
        console.print(f"[yellow]{mode} timing unstable[/]: " + "; ".join(reasons), markup=True, highlight=False)
    for f in out["failures"]:
        console.print(f"[red]{f['validator']}[/] {f['kind']}: {f['reason']}")
    if base.cached:
        console.print("[dim](cached; --refresh to measure again)[/]")


def audit_json(prob: Problem, verdict: Verdict, env: dict[str, Any]) -> dict[str, Any]:
    """The `audit --json` record."""
    r = verdict.result("audit")
    ok = r is not None and r.outcome == "passed"
    d = dict(r.details) if ok and r is not None else {}
    return {
        "status": "valid" if ok else "error",
        "problem": prob.name,
        "problem_id": prob.id,
        "cheatable": bool(d.get("passing_nulls")) or not d.get("seed_dependent", True),
        "passing_nulls": d.get("passing_nulls", []),
        "seed_dependent": d.get("seed_dependent"),
        "nulls": d.get("nulls", {}),
        "output": d.get("output", {}),
        "environment": env,
        "failures": [{"validator": f.name, "kind": f.kind, "reason": f.reason} for f in verdict.failures],
    }


def print_audit(console: Console, name: str, env: dict[str, Any], out: dict[str, Any]) -> None:
    """The audit's table of null models, or its failures."""
    if out["status"] == "valid":
        t = Table(title=f"audit: {name} on {env.get('device_name', '?')}")
        t.add_column("null model")
        t.add_column("passes correctness?")
        t.add_column("max abs err")
        for null, rows in out["nulls"].items():
            passes = all(x["passes"] for x in rows)
            errs = [x.get("max_abs_err") for x in rows if x.get("max_abs_err") is not None]
            t.add_row(null, "[red]YES[/]" if passes else "[green]no[/]", f"{max(errs):.3g}" if errs else "-")
        console.print(t)
        console.print(f"output depends on the seed: {'yes' if out['seed_dependent'] else '[red]NO[/]'}")
        verdict_line = "[red]can be cheated by construction[/]" if out["cheatable"] else "[green]no null model passes[/]"
        console.print(f"{name}: {verdict_line}")
    else:
        for f in out["failures"]:
            console.print(f"[red]{f['validator']}[/] {f['kind']}: {f['reason']}")


COLORS = {"passed": "green", "failed": "red", "skipped": "yellow"}


def print_eval(console: Console, s: dict[str, Any]) -> None:
    """The evaluation's table (every validator with its detail), its verdict and speedups."""
    color = {"valid": "green", "invalid": "red", "error": "magenta", "needs_gpu": "yellow"}[s["status"]]
    t = Table(title=f"{s['problem']} · design {s['design_id'][:12]} · {s['device']}")
    t.add_column("validator")
    t.add_column("result")
    t.add_column("detail", overflow="fold")
    describe = get_domain(s["domain"]).describe
    for name, v in s["validators"].items():
        detail = v["reason"] or ""
        if v["status"] == "passed":  # in the domain's words: the view reads none of its keys
            detail = describe(name, v["details"]) or detail
        t.add_row(name, f"[{COLORS[v['status']]}]{v['status']}[/]", escape(detail))
    console.print(t)
    timing = s["validators"].get("timing") or {}
    if timing.get("status") == "passed":
        print_cases(console, timing.get("details") or {}, "per case (paired, each against the reference beside it)")
    for v in s["validators"].values():
        tail = (v.get("details") or {}).get("stderr_tail") or (v.get("details") or {}).get("traceback")
        if v["status"] == "failed" and v["kind"] in ("harness_error", "crash", "problem_error", "compile_error") and tail:
            console.print("\n".join(str(tail).rstrip().splitlines()[-12:]), style="dim", markup=False)
    console.print(f"status: [bold {color}]{s['status']}[/]")
    if s["runtime_ms"] is not None:
        label = s.get("reference_label", "the reference")
        own = "" if label == "the reference" else f"{label} "  # "reference 0.85 ms", or the label first
        key = names_of(s["domain"]).key
        refs = ", ".join(f"{own if k == key else k + ' '}{v:.4f} ms"
                         for k, v in s["reference_ms"].items() if v is not None)
        console.print(f"candidate {s['runtime_ms']:.4f} ms · reference {refs}")
    print_speedups(console, s)


def print_speedups(console: Console, s: dict[str, Any]) -> None:
    """The paired speedup, its interval and stability, and the baseline's state (the words of
    the evaluation's domain: `s["domain"]`)."""
    n = names_of(s.get("domain"))
    r, c = n.reference, n.compared
    if s["speedup"] is not None:
        lo, hi = s["speedup_ci"] or (s["speedup"], s["speedup"])
        line = (f"speedup vs {s.get('reference_label', 'the reference')} (paired): [bold]{s['speedup']:.3g}x[/] "
                f"[95% CI {lo:.3g}-{hi:.3g}]")
        second = (s.get("speedups") or {}).get(c) if c else None
        if second:
            lo_c, hi_c = second.get("low"), second.get("high")
            line += (f" · vs {n.compared_text} {second['ratio']:.3g}x [95% CI {lo_c:.3g}-{hi_c:.3g}, chained via {r}]"
                     if isinstance(lo_c, int | float) and isinstance(hi_c, int | float)
                     else f" · vs {n.compared_text} {second['ratio']:.3g}x (chained via {r}, no interval)")
            if second.get("baseline_fails"):
                line += f" [yellow]({c} fails correctness)[/]"
            elif second.get("baseline_unstable"):
                line += f" [yellow]({c} baseline unstable)[/]"
        console.print(line, highlight=False)
    stab = s.get("stability") or {}
    if stab.get("verdict") == "unstable":
        console.print("[yellow]timing unstable[/] (after re-timing): " + "; ".join(stab.get("reasons", [])),
                      highlight=False)
    base = s.get("baseline") or {}
    if base.get("cached") and c:
        console.print(f"[dim]({n.compared_text} ratio from the cached baseline; `stratagem baseline --refresh` measures "
                      "it again)[/]")
    for mode, reasons in (base.get("unstable") or {}).items():
        console.print(f"[yellow]baseline {mode} unstable[/]: " + "; ".join(reasons), highlight=False)
    for mode, why in (base.get("fails_correctness") or {}).items():
        console.print(f"[yellow]baseline {mode} fails the correctness check[/]: {why}", highlight=False, markup=True)
