"""The AUTO paper's analyses on synthetic runs with known answers: BO's choice where it is
clear, the exploratory/exploitative labels, the efficiencies, and two clearly separated code
families found as two clusters."""

from __future__ import annotations

import numpy as np
import pytest

from stratagem.core.search import DesignView
from stratagem.report import alignment as al

FAMILY_A = """import torch
def tiled_{i}(a, b):
    acc = torch.zeros(a.shape[0], b.shape[1])
    for tile in range({i} + 4):
        acc += a[:, tile::8] @ b[tile::8, :]
    return acc
"""
FAMILY_B = """import triton
@triton.jit
def softmax_kernel_{i}(ptr, out, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    vals = tl.load(ptr + row * stride + tl.arange(0, BLOCK))
    tl.store(out + row * stride, tl.exp(vals - tl.max(vals)) / tl.sum(tl.exp(vals - tl.max(vals))))
"""


def view(i, src, speedup, iteration, strategy=None, status="valid"):
    return DesignView(f"{i:064d}", src, status, iteration, strategy=strategy, speedup=speedup,
                      created_at=float(i))


def two_families(n=8):
    out = []
    for i in range(n):
        out.append(view(2 * i, FAMILY_A.format(i=i), 1.0 + 0.1 * i, 1 + i // 2))
        out.append(view(2 * i + 1, FAMILY_B.format(i=i), 2.0 + 0.1 * i, 1 + i // 2))
    return out


def test_expected_improvement_terms_are_exact():
    a, b = al.expected_improvement_terms(np.array([1.0]), np.array([1e-9]), 0.5, 0.1)
    assert a[0] == pytest.approx(0.4) and b[0] == pytest.approx(0.0, abs=1e-6)  # certain gain: all exploitation
    a, b = al.expected_improvement_terms(np.array([0.0]), np.array([2.0]), 0.0, 0.0)
    assert a[0] == pytest.approx(0.0) and b[0] == pytest.approx(2.0 / np.sqrt(2 * np.pi))  # all uncertainty


def test_two_separated_code_families_are_two_clusters():
    designs = two_families()
    c = al.cluster(designs)
    assert len(c.clusters) == 2
    groups = sorted({c.assignment[d.id] for d in designs[0::2]} | set())
    assert len(groups) == 1 and {c.assignment[d.id] for d in designs[1::2]} != set(groups)
    b = next(k for k in c.clusters if designs[1].id in k.ids)
    assert b.best_speedup == pytest.approx(2.7) and any("tl" in t or "triton" in t for t in b.tokens)
    assert c.cooccurrence.shape == (16, 16) and np.allclose(np.diag(c.cooccurrence), 1.0)
    assert c.map2d.shape == (16, 2)


def test_the_labels_follow_the_surrogate():
    # Known region: family A at ~1x; a design far from everything known is uncertain (explore);
    # one that restates the best known design is predicted good and certain (exploit), at small xi.
    designs = [view(i, FAMILY_A.format(i=i % 3), 1.0 + 0.01 * i, 1) for i in range(6)]
    known_best = designs[5]
    near = view(100, known_best.source + "\n", 1.05, 2, strategy="refine")
    far = view(101, FAMILY_B.format(i=0), 3.0, 2, strategy="innovate")
    a = al.align([*designs, near, far], {2: "refine"}, xis=(0.0,))
    labels = {lab.design_id: lab.kind for r in a.per_iteration for lab in r.labels}
    assert labels[far.id] == "explore"
    assert labels[near.id] == "exploit"
    e = a.efficiency[0]
    assert e.iterations == 1 and e.labelled == 2 and e.explore_share == 0.5
    assert e.implementor == 0.5  # the refine plan's designs: one exploits (as planned), one explores


def test_policies_without_strategies_get_the_split_alone():
    designs = two_families(5)
    for d in designs:
        object.__setattr__(d, "strategy", "optimize")
    a = al.align(designs, {})
    assert all(e.strategist is None and e.implementor is None for e in a.efficiency)
    assert all(e.explore_share is not None for e in a.efficiency)


def test_strategy_kinds():
    assert [al.strategy_kind(s) for s in ("innovate", "reattempt_failure", "refine", "combine", "optimize", None)] == [
        "explore", "explore", "exploit", "exploit", None, None]


def test_too_few_designs_say_so():
    assert "too few" in al.align([view(1, "x = 1", 1.0, 1)], {}).note
    assert "too few" in al.cluster([view(1, "x = 1", 1.0, 1)]).note
