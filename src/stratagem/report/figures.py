"""Owns the report's figures: matplotlib drawings of a run (best-so-far curves, every design's
score by strategy with failures marked, the lineage tree, the t-SNE map of the code clusters,
the best design's kernel breakdown), each returned as PNG bytes for embedding (the run's
figures also as matplotlib figures, `*_figure`, for tests to read their axes).

Every design is drawn at the ratio every other view reports for it, with its interval; axes
that count (iterations, queries, designs) have whole-number ticks and limits that suit a run of
one design as well as of hundreds.

matplotlib is imported on first use (the Agg backend: no display); no file is written.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from stratagem.core.search import DesignView, ranked
from stratagem.core.text import is_number
from stratagem.search.numbers import is_ranked, not_ranked_because, passed

FAILED_MARK = {"invalid": "x", "error": "X", "flagged": "P", "needs_gpu": "s", "unstable": "v", "unreviewed": "d"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    _plt().close(fig)
    return buf.getvalue()


def count_axis(ax: Any, values: Sequence[float], axis: str = "x") -> None:
    """An axis that counts (iterations, queries, designs): integer ticks only, and limits that
    hold every value with room at both ends, however few there are (one value: a window of
    one unit around it, not matplotlib's +-0.04 around zero)."""
    from matplotlib.ticker import MaxNLocator

    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = max(0.5, 0.04 * (hi - lo))
    (ax.set_xlim if axis == "x" else ax.set_ylim)(lo - pad, hi + pad)
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def ratio_axis(ax: Any, lows: Sequence[float], highs: Sequence[float]) -> None:
    """A speedup axis holding every interval and the 1.00x line, with a margin."""
    lo = min([1.0, *lows])
    hi = max([1.0, *highs])
    widen = max(0.0, 0.5 - (hi - lo)) / 2  # at least half a unit: no axis of 0.996..1.004
    lo, hi = lo - widen, hi + widen
    span = hi - lo
    ax.set_ylim(max(0.0, lo - 0.08 * span), hi + 0.08 * span)


def best_so_far_figure(views: Sequence[DesignView], queries_at: dict[str, int], iterations: int | None = None,
                       reference: str = "the reference") -> Any:
    """The best paired speedup (ranked designs: valid, stably timed) after each iteration and
    against the LLM queries spent, each new best drawn with its interval; `iterations`: the
    run's count, so the curve runs to its end. A run without LLM queries says so on that axis.
    `reference`: what the speedups are over, as the run's domain names it."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    valid = sorted(ranked(views), key=lambda v: v.created_at)
    lows, highs, drawn = [1.0], [1.0], []
    for ax, key, label in ((axes[0], "iteration", "iteration"), (axes[1], "queries", "LLM queries")):
        def x_of(v: DesignView, key: str = key) -> float:
            return float(v.iteration or 0) if key == "iteration" else float(queries_at.get(v.id, 0))

        end = float(iterations or 0) if key == "iteration" else float(max(queries_at.values(), default=0))
        if key == "queries" and end == 0:
            ax.text(0.5, 0.5, "no LLM queries in this run\n(its policy asks no model)", ha="center", va="center",
                    transform=ax.transAxes, color="grey")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlabel(label)
            continue
        xs, ys, best = [0.0], [1.0], 1.0
        for v in valid:
            sp = float(v.speedup or 0.0)
            if sp > best:
                best = sp
                lo, hi = v.speedup_low if v.speedup_low is not None else sp, v.speedup_high or sp
                ax.errorbar([x_of(v)], [sp], yerr=[[sp - lo], [hi - sp]], fmt="o", color="tab:blue", ms=4,
                            capsize=3)
                lows.append(lo)
                highs.append(hi)
            xs.append(x_of(v))
            ys.append(best)
        xs.append(max(end, xs[-1]))
        ys.append(best)
        ax.step(xs, ys, where="post", color="tab:blue")
        if not valid:
            ax.text(0.5, 0.7, "no ranked design yet", ha="center", transform=ax.transAxes, color="grey")
        drawn.append(ax)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        count_axis(ax, xs)
        ax.set_xlabel(label)
        ax.set_ylabel(f"best speedup vs {reference}")
        ax.grid(alpha=0.3)
    for ax in drawn:
        ratio_axis(ax, lows, highs)
    fig.suptitle("best so far, with its 95% interval (1.00x until the first ranked design)")
    return fig


def best_so_far(views: Sequence[DesignView], queries_at: dict[str, int], iterations: int | None = None,
                reference: str = "the reference") -> bytes:
    """`best_so_far_figure` as PNG bytes."""
    return _png(best_so_far_figure(views, queries_at, iterations, reference))


def scores_figure(views: Sequence[DesignView], reference: str = "the reference") -> Any:
    """Every design by creation order (1, 2, ...), each valid one at its own paired speedup with
    its interval: ranked ones filled and colored by strategy, valid ones that are not ranked
    (timing unstable, review pending) hollow; designs that did not pass in a strip under the
    lowest interval, marked by their failure category (the validator that failed them)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.6))
    order = sorted(views, key=lambda v: v.created_at)
    strategies = sorted({v.strategy or "-" for v in order})
    colors = {s: plt.cm.tab10(i % 10) for i, s in enumerate(strategies)}
    measured = [(i, v) for i, v in enumerate(order, 1) if passed(v) and v.speedup is not None]
    lows = [v.speedup_low if v.speedup_low is not None else float(v.speedup or 0) for _, v in measured]
    highs = [v.speedup_high if v.speedup_high is not None else float(v.speedup or 0) for _, v in measured]
    for s in strategies:
        for hollow in (False, True):
            pts = [(i, v) for i, v in measured if (v.strategy or "-") == s and bool(not_ranked_because(v)) == hollow]
            if not pts:
                continue
            xs = [i for i, _ in pts]
            ys = [float(v.speedup or 0) for _, v in pts]
            err = [[y - (v.speedup_low if v.speedup_low is not None else y) for y, (_, v) in zip(ys, pts, strict=True)],
                   [(v.speedup_high if v.speedup_high is not None else y) - y for y, (_, v) in zip(ys, pts, strict=True)]]
            ax.errorbar(xs, ys, yerr=err, fmt="none", ecolor=colors[s], elinewidth=0.8, capsize=2)
            ax.scatter(xs, ys, s=26, label=f"{s}, valid, not ranked (timing unstable or unreviewed)" if hollow else s,
                       facecolors="none" if hollow else colors[s], edgecolors=colors[s])
    low = min([1.0, *lows])
    floor = low - 0.12 * max(max([1.0, *highs]) - low, 0.05)
    failed = [(i, v) for i, v in enumerate(order, 1) if not (passed(v) and v.speedup is not None)]
    from stratagem.report.leaderboard import failure

    categories = sorted({failure(v)[0] or v.status for _, v in failed})
    marks = list(FAILED_MARK.values())
    for k, cat in enumerate(categories):  # one marker per failure category (the failing validator)
        xs = [i for i, v in failed if (failure(v)[0] or v.status) == cat]
        ax.scatter(xs, [floor] * len(xs), marker=marks[k % len(marks)], color="tab:red", s=28,
                   label=f"did not pass: {cat}")
    if failed:
        ax.axhline(floor + 0.5 * (low - floor), color="lightgrey", linewidth=0.8)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    count_axis(ax, [float(i) for i in range(1, len(order) + 1)] or [1.0])
    lo_y = floor - 0.5 * (low - floor) if failed else None
    ratio_axis(ax, lows + ([lo_y] if lo_y is not None else []), highs)
    ax.set_xlabel("design (creation order)")
    ax.set_ylabel(f"speedup vs {reference} (paired, 95% interval)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    return fig


def scores(views: Sequence[DesignView], reference: str = "the reference") -> bytes:
    """`scores_figure` as PNG bytes."""
    return _png(scores_figure(views, reference))


def lineage_figure(views: Sequence[DesignView], best_id: str | None) -> Any:
    """The lineage tree: designs by iteration (x, whole numbers) with an edge to each parent;
    ranked in green, valid but not ranked in orange, did not pass in red, the best in gold."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.8))
    by_iter: dict[int, list[DesignView]] = {}
    for v in sorted(views, key=lambda v: v.created_at):
        by_iter.setdefault(int(v.iteration or 0), []).append(v)
    pos = {}
    for it, vs in by_iter.items():
        for k, v in enumerate(vs):
            pos[v.id] = (it, k - (len(vs) - 1) / 2)
    for v in views:
        for p in v.parents:
            if p in pos and v.id in pos:
                (x0, y0), (x1, y1) = pos[p], pos[v.id]
                ax.plot([x0, x1], [y0, y1], color="lightgrey", linewidth=0.8, zorder=1)
    for v in views:
        if v.id not in pos:
            continue
        x, y = pos[v.id]
        color = ("gold" if v.id == best_id else "tab:green" if is_ranked(v) else
                 "tab:orange" if passed(v) else "tab:red")
        ax.scatter([x], [y], color=color, s=40 if v.id == best_id else 16, zorder=2, edgecolors="black",
                   linewidths=0.3)
    count_axis(ax, [float(x) for x, _ in pos.values()])
    half = max([abs(y) for _, y in pos.values()] or [0.0]) + 0.5
    ax.set_ylim(-half, half)
    ax.set_xlabel("iteration")
    ax.set_yticks([])
    ax.set_title("lineage (green: ranked, orange: valid, not ranked, red: did not pass, gold: the best)")
    return fig


def lineage(views: Sequence[DesignView], best_id: str | None) -> bytes:
    """`lineage_figure` as PNG bytes."""
    return _png(lineage_figure(views, best_id))


def cluster_map(ids: Sequence[str], coords: Any, assignment: dict[str, str], speedups: dict[str, float | None]) -> bytes:
    """The t-SNE map, one color per consensus cluster, the size by speedup."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    labels = sorted(set(assignment.values()))
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(labels)}
    for i, d in enumerate(ids):
        c = assignment.get(d, "?")
        sp = speedups.get(d) or 0.5
        ax.scatter(coords[i, 0], coords[i, 1], color=colors.get(c, "grey"), s=12 + 18 * min(float(sp), 5.0),
                   edgecolors="black", linewidths=0.3)
    for c in labels:
        pts = [coords[i] for i, d in enumerate(ids) if assignment.get(d) == c]
        if pts:
            cx = sum(p[0] for p in pts) / len(pts)
            cy = sum(p[1] for p in pts) / len(pts)
            ax.annotate(c, (cx, cy), fontsize=12, weight="bold")
    ax.set_title("t-SNE of the code (color: consensus cluster, size: speedup)")
    ax.set_xticks([])
    ax.set_yticks([])
    return _png(fig)


def kernels(breakdown: Sequence[tuple[str, float]]) -> bytes:
    """The best design's kernels by device time (one profiled call)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.35 * len(breakdown)))
    names = [n[:60] for n, _ in breakdown][::-1]
    ax.barh(names, [t for _, t in breakdown][::-1], color="tab:purple")
    ax.set_xlabel("device time per call (us)")
    return _png(fig)


def cases_figure(lines: Mapping[str, Sequence[tuple[str, float, float, float]]], title: str) -> Any:
    """A per-size objective's ratios per case (the speedup over the reference, the fraction of
    each harness baseline's speed), each with its interval; numeric cases on a log axis."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [c for c, *_ in next(iter(lines.values()), [])]
    numeric = all(is_number(c) for v in lines.values() for c, *_ in v)
    for label, pts in lines.items():
        xs = [float(c) if numeric else names.index(c) for c, *_ in pts]
        ys = [r for _, r, _, _ in pts]
        err = [[max(0.0, r - lo) for _, r, lo, _ in pts], [max(0.0, hi - r) for _, r, _, hi in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    if numeric:
        ax.set_xscale("log")
        ax.set_xlabel("case (size)")
    else:
        ax.set_xticks(range(len(names)), names)
        ax.set_xlabel("case")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ratio_axis(ax, [lo for v in lines.values() for _, _, lo, _ in v], [hi for v in lines.values() for *_, hi in v])
    ax.set_ylabel("ratio (higher is better for the design)")
    ax.set_title(title)
    ax.legend()
    return fig


def cases(lines: Mapping[str, Sequence[tuple[str, float, float, float]]], title: str) -> bytes:
    return _png(cases_figure(lines, title))


def tuning_figure(points: Sequence[Any], names: Sequence[str]) -> Any:
    """A tune study's objective against each parameter: one panel per parameter, every point
    at its value (categorical values in the order first seen), measured points at their speedup,
    points that did not pass as red crosses on the axis floor."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False)
    measured = [p.speedup for p in points if p.speedup is not None]
    floor = min([1.0, *measured]) * 0.9
    for ax, name in zip(axes[0], names, strict=True):
        values = list(dict.fromkeys(str(p.point.get(name)) for p in points))
        numeric = all(is_number(v) for v in values)
        order = sorted(values, key=float) if numeric else values
        pos = {v: i for i, v in enumerate(order)}
        for p in points:
            x = pos[str(p.point.get(name))]
            if p.speedup is not None:
                ax.scatter([x], [p.speedup], color="tab:blue", s=22)
            else:
                ax.scatter([x], [floor], color="tab:red", marker="x", s=22)
        ax.set_xticks(range(len(order)), order, rotation=45 if len(order) > 6 else 0, fontsize=8)
        ax.set_xlabel(name)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[0][0].set_ylabel("speedup over the reference")
    fig.suptitle(f"tuning: {len(points)} points (red: did not pass)")
    return fig


def tuning(points: Sequence[Any], names: Sequence[str]) -> bytes:
    return _png(tuning_figure(points, names))
