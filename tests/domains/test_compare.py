"""Output comparison in the worker: structure first, then values, chunked."""

from __future__ import annotations

import pytest
import torch

from stratagem.domains.pytorch.worker import compare

TOL = {"float32": {"atol": 1e-4, "rtol": 1e-4}, "float16": {"atol": 1e-2, "rtol": 1e-2}}


@pytest.fixture(params=[1 << 26, 7], ids=["one-chunk", "many-chunks"])
def chunk(request, monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", request.param)
    return request.param


def test_equal_and_within_tolerance_pass(chunk):
    r = torch.randn(5, 9)
    c = compare.compare_outputs(r, r + 5e-5, TOL)
    assert c.ok and c.checked == 45 and 0 < c.max_abs_err <= 5.1e-5


def test_one_bad_element_is_found_with_its_position(chunk):
    r = torch.randn(5, 9)
    n = r.clone()
    n[3, 4] += 1.0
    c = compare.compare_outputs(r, n, TOL)
    assert not c.ok and c.mismatched == 1
    assert "first at [3, 4]" in c.reason and c.max_abs_err == pytest.approx(1.0, rel=1e-5)


def test_nan_and_inf_positions_must_match(chunk):
    r = torch.tensor([1.0, float("nan"), float("inf"), 4.0])
    assert compare.compare_outputs(r, r.clone(), TOL).ok
    c = compare.compare_outputs(r, torch.tensor([1.0, 2.0, float("inf"), 4.0]), TOL)
    assert not c.ok and "NaN positions differ" in c.reason
    c = compare.compare_outputs(r, torch.tensor([1.0, float("nan"), -float("inf"), 4.0]), TOL)
    assert not c.ok and "infinities differ" in c.reason


def test_structure_is_checked_before_values():
    r = torch.zeros(4)
    assert compare.compare_outputs(r, r.double(), TOL).kind == "malformed"
    assert "shape" in compare.compare_outputs(r, torch.zeros(2, 2), TOL).reason

    class Sneaky(torch.Tensor):
        pass

    fake = torch.zeros(4).as_subclass(Sneaky)
    c = compare.compare_outputs(r, fake, TOL)
    assert not c.ok and "plain torch.Tensor" in c.reason
    assert not compare.compare_outputs((r, r), (r,), TOL).ok
    assert compare.compare_outputs((r, [r]), (r.clone(), [r.clone()]), TOL).ok


def test_half_outputs_use_their_own_tolerance():
    r = torch.ones(8, dtype=torch.float16)
    assert compare.compare_outputs(r, r + 0.005, TOL).ok
    assert not compare.compare_outputs(r, r + 0.05, TOL).ok


def test_inputs_unchanged_is_bitwise_and_nan_safe():
    a = torch.tensor([1.0, float("nan")])
    assert compare.inputs_unchanged([a, 3], [a.clone(), 3]) is None
    b = a.clone()
    b[0] = 1.0000001
    assert "modified in place" in compare.inputs_unchanged([a], [b])


def test_quick_check_in_cache_sized_chunks_still_sees_every_element() -> None:
    """The CPU's quick pass works in small chunks: a single bad element in the last, partial
    chunk, or a NaN in a middle one, still fails the comparison, and the maxima span chunks."""
    n = 3 * compare.CPU_QUICK_CHUNK + 5
    ref = torch.linspace(-1, 1, n)
    tol = {"float32": {"atol": 1e-4, "rtol": 1e-4}}
    ok = ref.clone()
    ok[compare.CPU_QUICK_CHUNK + 1] += 5e-5
    c = compare.compare_outputs(ref, ok, tol)
    assert c.ok and c.max_abs_err == pytest.approx(5e-5, rel=1e-2)
    bad = ref.clone()
    bad[-1] += 1.0
    c = compare.compare_outputs(ref, bad, tol)
    assert not c.ok and c.mismatched == 1
    nan = ref.clone()
    nan[2 * compare.CPU_QUICK_CHUNK + 7] = float("nan")
    assert not compare.compare_outputs(ref, nan, tol).ok


def test_relative_errors_are_reported_at_the_outputs_scale_never_as_1e35(chunk, monkeypatch) -> None:
    """An expected value near zero made `max rel err 1.75e+35` in a verdict: relative errors
    are taken against max(|expected|, REL_FLOOR x the output's largest magnitude, over every
    chunk), in the passing path and the failing one alike; the tolerance test is unchanged."""
    monkeypatch.setattr(compare, "CPU_QUICK_CHUNK", 2)  # the scale comes from another chunk
    ref = torch.tensor([1e-38, 1.0, 2.0, -3.0] * 3)
    close = ref.clone()
    close[0] += 1e-5
    ok = compare.compare_outputs(ref, close, TOL)
    assert ok.ok and ok.max_rel_err == pytest.approx(1e-5 / (compare.REL_FLOOR * 3.0), rel=1e-3)
    far = ref.clone()
    far[0] += 0.5
    bad = compare.compare_outputs(ref, far, TOL)
    assert not bad.ok and bad.mismatched == 1
    assert bad.max_rel_err == pytest.approx(0.5 / (compare.REL_FLOOR * 3.0), rel=1e-3)
    assert "max rel err 167" in (bad.reason or "")
