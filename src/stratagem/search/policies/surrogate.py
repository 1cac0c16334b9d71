"""Owns the surrogate machinery the `tune` policy and the BO alignment analysis share: a template's
parameter space as a surrogate sees it, a Gaussian process fitted to scored points, and
expected improvement split into what the predicted mean earns and what the uncertainty earns.

- **The space.** A point of a template (`core/template.py`) is shown to a model by its order:
  an `int` by its value, a `pow2` by its exponent (64 -> 6), a `choice` by category. optuna
  sees it through `distributions`/`encode`/`decode` (the tune policy's TPE); a Gaussian process
  sees it through `point_features` (the alignment analysis of a tuned run), which reads the
  same order from the points themselves: numbers that are all positive powers of two by their
  exponent, other numbers by value, strings one-hot; columns standardized.
- **The Gaussian process.** Matern 5/2 times a constant, plus white noise, targets normalized,
  fitted with scikit-learn (`fit_gp`), seeded.
- **Expected improvement** for maximization, as its two terms (`expected_improvement_terms`).

optuna, scikit-learn and scipy are imported when a function needs them, never at import.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stratagem.core.template import Point, Template, Value

# -- the space as optuna sees it ----------------------------------------------------------------


def distributions(template: Template) -> dict[str, Any]:
    """Each parameter's optuna distribution: `int` an IntDistribution (its step), `pow2` an
    IntDistribution over the exponent (so TPE sees the order), `choice` a categorical one."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    out: dict[str, Any] = {}
    for p in template.params:
        lo, hi = p.low, p.high
        if p.kind == "choice" or lo is None or hi is None:
            out[p.name] = CategoricalDistribution(list(p.values))
        elif p.kind == "pow2":
            out[p.name] = IntDistribution(lo.bit_length() - 1, hi.bit_length() - 1)
        else:
            step = int(p.values[1]) - int(p.values[0]) if len(p.values) > 1 else 1
            out[p.name] = IntDistribution(lo, hi, step=step)
    return out


def encode(template: Template, point: Mapping[str, Value]) -> dict[str, Any]:
    """A point as optuna's parameters (a power of two as its exponent)."""
    return {p.name: (int(point[p.name]).bit_length() - 1 if p.kind == "pow2" else point[p.name])
            for p in template.params}


def decode(template: Template, params: Mapping[str, Any]) -> Point:
    """Optuna's parameters as a point."""
    out: Point = {}
    for p in template.params:
        v = params[p.name]
        out[p.name] = 1 << int(v) if p.kind == "pow2" else (int(v) if p.kind == "int" else v)
    return out


# -- the space as a Gaussian process sees it ------------------------------------------------------


def _is_pow2(v: Value) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and v & (v - 1) == 0


def point_features(points: Sequence[Mapping[str, Value]]) -> np.ndarray:
    """(n, d) standardized features of points of one space (parameter names in sorted order):
    a parameter whose values are all positive powers of two by its exponent, other numbers by
    value, anything else one-hot per distinct value. A constant column stays 0.

    Raises:
        ValueError: no points, or points that do not name the same parameters.
    """
    if not points:
        raise ValueError("no points")
    names = sorted(points[0])
    if any(sorted(p) != names for p in points):
        raise ValueError("the points do not name the same parameters")
    cols: list[np.ndarray] = []
    for name in names:
        vals = [p[name] for p in points]
        if all(_is_pow2(v) for v in vals):
            cols.append(np.array([math.log2(int(v)) for v in vals], dtype=float))
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
            cols.append(np.array([float(v) for v in vals], dtype=float))
        else:
            for level in sorted({str(v) for v in vals}):
                cols.append(np.array([1.0 if str(v) == level else 0.0 for v in vals]))
    x = np.column_stack(cols) if cols else np.zeros((len(points), 1))
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


# -- the Gaussian process and expected improvement ----------------------------------------------


def fit_gp(x: np.ndarray, y: np.ndarray, *, seed: int = 0) -> Any:
    """A Gaussian process (Matern 5/2 x constant + white noise, targets normalized, 2 restarts)
    fitted to (x, y); `.predict(x, return_std=True)` gives the mean and its uncertainty."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(length_scale=np.ones(x.shape[1]) * 3.0,  # pyright: ignore[reportArgumentType]
                                                      length_scale_bounds=(1e-2, 1e3), nu=2.5) \
        + WhiteKernel(1e-2, (1e-6, 1.0))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2, random_state=seed)
    with warnings.catch_warnings():  # a hyperparameter at its bound is a fit, not an error
        warnings.simplefilter("ignore", ConvergenceWarning)
        return gp.fit(x, y)


def expected_improvement_terms(mu: np.ndarray, sigma: np.ndarray, best: float,
                               xi: float) -> tuple[np.ndarray, np.ndarray]:
    """(exploitation, exploration) terms of EI for maximization: (mu - best - xi) Phi(Z) and
    sigma phi(Z), with Z = (mu - best - xi) / sigma; their sum is the expected improvement."""
    from scipy.stats import norm

    sigma = np.maximum(sigma, 1e-12)
    imp = mu - best - xi
    z = imp / sigma
    return imp * norm.cdf(z), sigma * norm.pdf(z)
