"""Owns the views of a per-size objective (a timing stage's `cases`, docs/command.md): a table
per case (the reference's time, the design's, the paired speedup with its interval and
stability, and each harness baseline's time with the design's fraction of its speed) for `eval`
and `show` in the terminal and for the report, and the report's figure of the same."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def _ratio(r: Any) -> str:
    if not isinstance(r, Mapping) or not isinstance(r.get("ratio"), int | float):
        return "-"
    lo, hi = r.get("low"), r.get("high")
    if isinstance(lo, int | float) and isinstance(hi, int | float):
        return f"{r['ratio']:.3g}x [{lo:.3g}, {hi:.3g}]"
    return f"{r['ratio']:.3g}x"


def _ms(stats: Any) -> str:
    v = stats.get("median_ms") if isinstance(stats, Mapping) else None
    return f"{v:.4g}" if isinstance(v, int | float) else "-"


def labels(details: Mapping[str, Any]) -> dict[str, str]:
    """Each harness baseline's name -> its label (`cublas` -> `cuBLAS`)."""
    base = details.get("baselines")
    if not isinstance(base, Mapping):
        return {}
    return {str(k): str((v or {}).get("label") or k) for k, v in base.items()}


def rows(details: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The per-case table of a timing stage's details (no rows when it has no cases)."""
    cases = details.get("cases")
    if not isinstance(cases, Mapping) or not cases:
        return [], []
    names = labels(details)
    header = ["case", "reference ms", "design ms", "speedup [95% CI]", "stability"]
    for label in names.values():
        header += [f"{label} ms", f"fraction of {label} [95% CI]"]
    out = []
    for case, row in cases.items():
        stab = (row.get("stability") or {}).get("verdict", "-")
        line = [str(case), _ms(row.get("reference")), _ms(row.get("runtime")), _ratio(row.get("speedup")), str(stab)]
        base = row.get("baselines") or {}
        for name in names:
            b = base.get(name) or {}
            line += [_ms(b), _ratio(b.get("fraction"))]
        out.append(line)
    total = ["all (geometric mean)", _ms(details.get("reference")), _ms(details.get("runtime")),
             _ratio(details.get("speedup")), str((details.get("stability") or {}).get("verdict", "-"))]
    for name in names:
        b = (details.get("baselines") or {}).get(name) or {}
        total += [_ms(b.get("runtime")), _ratio(b.get("fraction"))]
    out.append(total)
    return header, out


def latest_timing(evaluations: Sequence[Any]) -> dict[str, Any] | None:
    """The details of the latest passed timing stage among evaluation records (their
    `validators`, as stored), or None."""
    for ev in reversed(list(evaluations)):
        t = next((v for v in ev.validators if v.get("name") == "timing" and v.get("outcome") == "passed"), None)
        if t is not None:
            return dict(t.get("details") or {})
    return None


def print_cases(console: Console, details: Mapping[str, Any], title: str = "per case") -> None:
    """The per-case table in the terminal (nothing when the objective has no cases)."""
    header, body = rows(details)
    if not body:
        return
    t = Table(title=title)
    for h in header:
        t.add_column(h, overflow="fold")
    for r in body:
        t.add_row(*r)
    console.print(t)


def html_table(details: Mapping[str, Any]) -> str:
    header, body = rows(details)
    if not body:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
    return f"<table><tr>{head}</tr>{trs}</table>"


def series(details: Mapping[str, Any]) -> dict[str, list[tuple[str, float, float, float]]]:
    """The figure's lines: `speedup` (over the reference) and `fraction of LABEL` per baseline,
    each a list of (case, ratio, low, high)."""
    cases = details.get("cases")
    out: dict[str, list[tuple[str, float, float, float]]] = {}
    if not isinstance(cases, Mapping):
        return out
    names = labels(details)

    def add(key: str, case: str, r: Any) -> None:
        if isinstance(r, Mapping) and isinstance(r.get("ratio"), int | float):
            x = float(r["ratio"])
            out.setdefault(key, []).append((case, x, float(r.get("low", x)), float(r.get("high", x))))

    for case, row in cases.items():
        add("speedup over the reference", str(case), row.get("speedup"))
        for name, label in names.items():
            add(f"fraction of {label}", str(case), ((row.get("baselines") or {}).get(name) or {}).get("fraction"))
    return out


def figure_lines(lines: Mapping[str, Sequence[tuple[str, float, float, float]]]) -> bool:
    """Whether there is anything to plot."""
    return any(len(v) >= 1 for v in lines.values())
