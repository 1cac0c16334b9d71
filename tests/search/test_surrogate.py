"""The surrogate machinery the tune policy and the BO alignment analysis share
(search/policies/surrogate.py): one view of a template's space, one Gaussian process, one EI."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stratagem.core.search import DesignView
from stratagem.core.template import parse_template
from stratagem.report import alignment as al
from stratagem.search.policies import surrogate
from stratagem.search.policies.tune import TAG_PARAMS, TAG_TEMPLATE

TEMPLATE = parse_template({"k.c": "// stratagem: param BLOCK = pow2(1, 64)\n"
                                  "// stratagem: param STEP = int(2, 10, step=2)\n"
                                  "// stratagem: param ACC = choice(\"long\", \"int\")\n"
                                  "#define B {{BLOCK}}\n#define S {{STEP}}\ntypedef {{ACC}} acc;\n"})


def test_optuna_and_the_gp_see_a_power_of_two_by_its_exponent() -> None:
    point = {"BLOCK": 16, "STEP": 6, "ACC": "int"}
    params = surrogate.encode(TEMPLATE, point)
    assert params == {"BLOCK": 4, "STEP": 6, "ACC": "int"}
    assert surrogate.decode(TEMPLATE, params) == point
    d = surrogate.distributions(TEMPLATE)
    assert (d["BLOCK"].low, d["BLOCK"].high) == (0, 6) and d["STEP"].step == 2
    x = surrogate.point_features([{"BLOCK": 1, "STEP": 2, "ACC": "int"}, {"BLOCK": 4, "STEP": 4, "ACC": "long"},
                                  {"BLOCK": 64, "STEP": 10, "ACC": "int"}])
    assert x.shape == (3, 4)  # ACC one-hot (two columns), BLOCK, STEP
    block = x[:, 2]  # sorted names: ACC (two one-hot columns), BLOCK, STEP
    exps = np.array([0.0, 2.0, 6.0])
    assert np.allclose(block, (exps - exps.mean()) / exps.std())  # by exponent, standardized
    with pytest.raises(ValueError):
        surrogate.point_features([{"BLOCK": 1}, {"STEP": 2}])


def test_expected_improvement_is_the_one_alignment_uses() -> None:
    assert al.expected_improvement_terms is surrogate.expected_improvement_terms
    gp = surrogate.fit_gp(np.array([[0.0], [1.0], [2.0]]), np.array([0.0, 1.0, 0.0]))
    mu, sd = gp.predict(np.array([[1.0], [10.0]]), return_std=True)
    assert mu[0] > mu[1] and sd[1] > sd[0]  # near the data: confident; far away: uncertain


def tuned(i: int, block: int, speedup: float, iteration: int, template_id: str = "t1") -> DesignView:
    return DesignView(f"{i:064d}", f"static const int block = {block};\n", "valid", iteration, strategy="tune", author="tune",
                      speedup=speedup, created_at=float(i),
                      tags={TAG_PARAMS: {"BLOCK": block}, TAG_TEMPLATE: template_id})


def test_alignment_of_a_tune_study_fits_the_gp_over_the_parameters() -> None:
    # speedup peaks at BLOCK = 32: a tune study of 8 points, one per iteration
    blocks = [1, 64, 8, 16, 2, 32, 4, 128]
    views = [tuned(i, b, 4.0 - abs(math.log2(b) - 5) * 0.5, i + 1) for i, b in enumerate(blocks)]
    a = al.align(views, {}, xis=(0.01,))
    assert a.basis == "params" and a.per_iteration and not a.note
    mixed = [*views, DesignView("f" * 64, "int main() { return 0; }\n", "valid", 9, strategy="refine",
                                author="implementor-1", speedup=1.5, created_at=99.0)]
    assert al.align(mixed, {9: "refine"}, xis=(0.01,)).basis == "code"  # an agent's design: the code embedding
    two = [*views[:4], *(tuned(10 + i, b, 1.0, 5 + i, "t2") for i, b in enumerate((2, 4)))]
    assert al.align(two, {}, xis=(0.01,)).basis == "code"  # two templates: no one space
