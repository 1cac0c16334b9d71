"""Owns the report's figures: matplotlib drawings of a run (best-so-far curves, every design's
score by strategy with failures marked, the lineage tree, the t-SNE map of the code clusters,
the best design's kernel breakdown), each returned as PNG bytes for embedding.

matplotlib is imported on first use (the Agg backend: no display); no file is written.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from stratagem.core.search import DesignView, ranked

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


def best_so_far(views: Sequence[DesignView], queries_at: dict[str, int]) -> bytes:
    """The best paired speedup after each iteration and against the LLM queries spent."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    valid = sorted(ranked(views), key=lambda v: v.created_at)
    for ax, key, label in ((axes[0], "iteration", "iteration"), (axes[1], "queries", "LLM queries")):
        xs, ys, best = [0.0], [1.0], 1.0
        for v in valid:
            x = float(v.iteration or 0) if key == "iteration" else float(queries_at.get(v.id, 0))
            best = max(best, float(v.speedup or 0.0))
            xs.append(x)
            ys.append(best)
        ax.step(xs, ys, where="post", color="tab:blue")
        ax.set_xlabel(label)
        ax.set_ylabel("best speedup vs eager")
        ax.grid(alpha=0.3)
    fig.suptitle("best so far (1.00x until the first valid design)")
    return _png(fig)


def scores(views: Sequence[DesignView]) -> bytes:
    """Every design by creation order: its paired speedup, colored by strategy; designs without a
    ranked speedup are drawn at the bottom, marked by their failure category (the validator
    that failed them, or their status)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.6))
    order = sorted(views, key=lambda v: v.created_at)
    strategies = sorted({v.strategy or "-" for v in order})
    colors = {s: plt.cm.tab10(i % 10) for i, s in enumerate(strategies)}
    floor = min([v.speedup for v in order if v.speedup] or [1.0]) * 0.8
    for s in strategies:
        pts = [(i, v.speedup) for i, v in enumerate(order) if (v.strategy or "-") == s and v.status == "valid"
               and v.speedup]
        if pts:
            ax.scatter(*zip(*pts, strict=True), color=colors[s], label=s, s=22)
    from stratagem.report.leaderboard import failure

    failed = [(i, v) for i, v in enumerate(order) if v.status != "valid" or not v.speedup]
    categories = sorted({failure(v)[0] or v.status for _, v in failed})
    marks = list(FAILED_MARK.values())
    for k, cat in enumerate(categories):  # one marker per failure category (the failing validator)
        pts = [(i, floor) for i, v in failed if (failure(v)[0] or v.status) == cat]
        ax.scatter(*zip(*pts, strict=True), marker=marks[k % len(marks)], color="tab:red" if cat != "timing" else "grey",
                   label=f"failed: {cat}", s=28)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("design (creation order)")
    ax.set_ylabel("speedup vs eager (paired)")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    return _png(fig)


def lineage(views: Sequence[DesignView], best_id: str | None) -> bytes:
    """The lineage tree: designs by iteration (x) with an edge to each parent; the best in gold."""
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
        color = "gold" if v.id == best_id else ("tab:green" if v.status == "valid" else "tab:red")
        ax.scatter([x], [y], color=color, s=40 if v.id == best_id else 16, zorder=2, edgecolors="black",
                   linewidths=0.3)
    ax.set_xlabel("iteration")
    ax.set_yticks([])
    ax.set_title("lineage (green: valid, red: not, gold: the best)")
    return _png(fig)


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
