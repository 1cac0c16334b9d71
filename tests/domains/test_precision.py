"""Issue 57: precision judged by what ran. The design's watched call says what it computed in
(torch's operators, autocast, Triton kernels, its own native code); a design below the
reference's precision is a downgrade whatever its error; one seen at the reference's precision
may be as far from float64 as that precision predicts; one unseen is held to the strict factor."""

from __future__ import annotations

import torch

from stratagem.domains.pytorch.worker import compare, precision
from stratagem.domains.pytorch.worker.judge import Judging


def _watch(fn, *args, design: bool = False) -> precision.RanPrecision:
    with torch.no_grad(), precision.watching("cpu", design=design) as seen:
        fn(*args)
    return seen


def _lin() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def test_an_fp32_design_at_the_references_precision_is_seen_and_no_downgrade() -> None:
    m, x = _lin(), torch.randn(16, 64)
    ref, design = _watch(m, x), _watch(m, x.double().float(), design=True)
    assert ref.lowest == {"other": "float32", "matmul": "float32"} and ref.ops["matmul"] == 2
    ev = precision.evidence(ref, design)
    assert ev.seen and ev.downgrade is None, ev
    assert precision.evidence(ref, _watch(m.double(), x.double(), design=True)).seen  # higher precision


def test_autocast_and_explicit_casts_are_downgrades_named_with_what_showed_them() -> None:
    m, x = _lin(), torch.randn(16, 64)
    ref = _watch(m, x)

    def autocast(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x)

    ev = precision.evidence(ref, _watch(autocast, x, design=True))
    assert not ev.seen and ev.downgrade is not None
    assert "matmuls computed in bfloat16 where the reference computed in float32" in ev.downgrade
    assert "autocast" in ev.downgrade
    half = precision.evidence(ref, _watch(lambda x: (m(x).half() * 2).float(), x, design=True))
    assert half.downgrade is not None and "other operators computed in float16" in half.downgrade


def test_each_family_is_held_to_the_references_own_precision_for_it() -> None:
    """A reference whose matmul rounds to bf16 (as TF32 rounds on a GPU) admits a design at
    bf16 there, and nothing lower (float8)."""
    w = torch.randn(64, 32)

    def ref_fn(x):
        return x.bfloat16().float() @ w.bfloat16().float()

    ref = _watch(ref_fn, torch.randn(8, 64))
    assert ref.overall() == "bfloat16"
    assert precision.evidence(ref, _watch(ref_fn, torch.randn(8, 64), design=True)).seen
    f8 = torch.float8_e4m3fn
    low = precision.evidence(ref, _watch(lambda x: x.to(f8).float() @ w.to(f8).float(), torch.randn(8, 64), design=True))
    assert low.downgrade is not None and "float8" in low.downgrade


def test_a_compiled_design_is_watched_eagerly_without_compiling_again() -> None:
    from torch._dynamo.utils import counters

    m, x = _lin(), torch.randn(16, 64)
    fn = torch.compile(m, backend="eager")
    with torch.no_grad():
        fn(x)  # compiled once
    frames = counters["stats"]["unique_graphs"]
    seen = _watch(fn, x, design=True)
    assert seen.ops.get("matmul") == 2, seen.to_json()  # its own operators, seen
    with torch.no_grad():
        fn(x)
    assert counters["stats"]["unique_graphs"] == frames  # no recompile for the watch, nor after it


def test_own_native_code_or_unseen_heavy_work_leaves_the_precision_unseen() -> None:
    m, x = _lin(), torch.randn(16, 64)
    ref = _watch(m, x)
    design = _watch(m, x, design=True)
    design.opaque = ["my_ext"]
    ev = precision.evidence(ref, design)
    assert not ev.seen and ev.downgrade is None and "my_ext" in ev.words
    scripted = torch.jit.script(m)
    ev = precision.evidence(ref, _watch(scripted, x, design=True))
    assert not ev.seen and "matmuls was seen" in ev.words, ev
    assert not precision.evidence(ref, None).seen


def test_triton_kernels_precision_from_their_inputs_and_source() -> None:
    dot = "def k(a, b, c):\n    acc = tl.dot(tl.load(a), tl.load(b))\n"
    assert precision.triton_precision(dot, [torch.float32])[0] == "tf32"
    assert precision.triton_precision(dot.replace("))\n", "), input_precision='ieee')\n"), [torch.float32])[0] == "float32"
    assert precision.triton_precision("x = tl.load(p).to(tl.float16)", [torch.float32])[0] == "float16"
    assert precision.triton_precision("y = x * 2", [torch.float16, torch.float32])[0] == "float16"
    assert precision.triton_precision("y = x * 2", [torch.float32])[0] == "float32"
    # held to the lowest precision the reference ran anywhere: TF32 admits a TF32 kernel
    ref = precision.RanPrecision("cuda", lowest={"conv": "tf32", "other": "float32"}, ops={"conv": 3})
    kernel = precision.RanPrecision("cuda", lowest={"kernel": "tf32", "other": "float32"}, ops={"kernel": 1})
    assert precision.evidence(ref, kernel).seen
    exact = precision.RanPrecision("cuda", lowest={"matmul": "float32", "other": "float32"}, ops={"matmul": 1})
    assert precision.downgrade(exact, kernel) is not None


def test_the_second_look_admits_what_the_references_precision_predicts_only_when_seen() -> None:
    torch.manual_seed(3)
    a = torch.randn(4096, dtype=torch.float64)
    eager = (a + torch.randn(4096, dtype=torch.float64) * 1e-3).float()  # a reference 1e-3 off
    other = (a + torch.randn(4096, dtype=torch.float64) * 2e-3).float()  # another algorithm, 2x its error
    tol = {"float32": {"atol": 1e-4, "rtol": 1e-4}}
    rule = {"mode": "reference", "factor": 1.5, "same_precision_factor": 3.0, "atol_floor": 0.0, "ulp_floor": 2.0}
    fixed = compare.compare_outputs(eager, other, tol)
    strict = compare.reference_compare(a, eager, other, rule, tol, fixed)
    assert not strict.ok and "1.5x" in (strict.reason or "")
    wide = compare.reference_compare(a, eager, other, rule, tol, fixed, seen=True)
    assert wide.ok and wide.allowance and wide.to_json()["allowance"] is True
    bug = (a + torch.randn(4096, dtype=torch.float64) * 5e-2).float()  # a wrong design, seen or not
    assert not compare.reference_compare(a, eager, bug, rule, tol, compare.compare_outputs(eager, bug, tol), seen=True).ok
    # eager's own error across trials: a larger one on an earlier trial widens this trial's limit
    assert compare.reference_compare(a, eager, other, rule, tol, fixed, ref_errors=[1.0]).ok


def test_the_judge_settles_its_provisional_passes_by_the_workers_evidence() -> None:
    j = Judging.__new__(Judging)
    j.findings, j.provisional = [], []
    j.provisional.append(object())  # a call that passed only within the wider limit
    j.settle({"precision_evidence": {"seen": True}})
    assert j.findings == []
    j.settle({"precision_evidence": {"seen": False, "words": "its own native code"}})
    assert len(j.findings) == 1
    j.findings = []
    j.settle({})  # a worker that says nothing of the design's precision: strict
    assert len(j.findings) == 1
