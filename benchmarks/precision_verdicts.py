"""Benchmark (issues 42, 57): verdicts that follow the precision each program ran at, on
KernelBench's convolutional problems at their shipped sizes.

For each problem: the precision the reference ran at (worker/precision.py), its max error
against the float64 anchor, and for each design the precision it was seen computing at (its
own watched call, as the harness watches it: compiled code run eagerly), the evidence, the
verdict of the product's default rule (`reference`, its parameters from the settings' own
defaults) and which part decided (`precision`: a downgrade; `fixed`; `reference`: within
the strict factor; `allowance`: within the error the reference's precision predicts), beside
KernelBench's (fp32 1e-4) and PIKE's (1e-2) rules. Designs: honest (exact fp32, torch.compile
in its modes, channels_last, cuDNN's benchmark-chosen algorithms) and downgrades (fp16 and
bf16 autocast). It calls the worker's own code (precision.py, compare.py, anchor.py), not the
whole harness (no sandbox, judge or timing), so a problem costs its calls and compiles.

Each problem runs in a subprocess of its own with a time cap (`--cap-s`); a failure is a row.
The summary: honest designs valid, downgrades rejected, and each class's errors against
float64 (x the reference's own).

Usage: python benchmarks/precision_verdicts.py --kernelbench .kb --sample level2:12,level3:6 [--device cuda]
       [--problems level2/6_Conv3d_Softmax_MaxPool_MaxPool,...] [--designs exact-fp32,compile,...]
       [--jobs 2] [--cap-s 120] [--out OUT_DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

HONEST = ("exact-fp32", "compile", "compile-reduce-overhead", "compile-max-autotune-no-cudagraphs", "channels_last",
          "cudnn-benchmark")
DOWNGRADES = ("autocast-fp16", "autocast-bf16")
DESIGNS = HONEST + DOWNGRADES


def product_rule() -> tuple[dict[str, Any], dict[str, Any]]:
    """The default rule and tolerances, as the product's settings make them."""
    from stratagem.domains.pytorch.settings import DEFAULT_FACTOR, PyTorchSettings

    s = PyTorchSettings()
    rule = s.correctness.model_dump()
    rule["factor"] = rule["factor"] or DEFAULT_FACTOR[rule["mode"]]
    return rule, {k: v.model_dump() for k, v in s.tolerances.items()}


def conv_problems(kb: Path, level: str, count: int) -> list[str]:
    files = sorted((kb / level).glob("*.py"), key=lambda p: int(p.name.split("_")[0]) if p.name[0].isdigit() else 0)
    return [f"{level}/{p.stem}" for p in files if "nn.Conv" in p.read_text()][:count]


@contextlib.contextmanager
def _flags(cudnn_tf32: bool | None = None, matmul_tf32: bool | None = None) -> Iterator[None]:
    import torch

    old = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    try:
        if cudnn_tf32 is not None:
            torch.backends.cudnn.allow_tf32 = cudnn_tf32
        if matmul_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def _design(name: str, ref: Any, device: str) -> Callable[[list[Any]], Any]:
    import torch

    model = copy.deepcopy(ref)
    if name == "exact-fp32":
        def exact(x: list[Any]) -> Any:
            with _flags(False, False):
                return model(*x)
        return exact
    if name.startswith("compile"):
        mode = name.removeprefix("compile-") if name != "compile" else None
        fn = torch.compile(model, mode=mode)
        return lambda x: fn(*x)
    if name == "channels_last":  # channels_last_3d for 5-d tensors (Conv3d)
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() in fmt:
                    p.data = p.data.contiguous(memory_format=fmt[p.dim()])
        return lambda x: model(*[t.contiguous(memory_format=fmt[t.dim()]) if isinstance(t, torch.Tensor) and t.dim() in fmt
                                 else t for t in x])
    if name == "cudnn-benchmark":
        def bench(x: list[Any]) -> Any:
            with torch.backends.cudnn.flags(enabled=True, benchmark=True):
                return model(*x)
        return bench
    if name.startswith("autocast-"):
        low = torch.float16 if name == "autocast-fp16" else torch.bfloat16
        def half(x: list[Any]) -> Any:
            with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=low):
                out = model(*x)
            return out.float() if isinstance(out, torch.Tensor) else out
        return half
    if name == "tf32-all":
        def tf32(x: list[Any]) -> Any:
            with _flags(True, True):
                return model(*x)
        return tf32
    raise ValueError(name)


def one(path: Path, device: str, designs: list[str]) -> dict[str, Any]:
    """One problem's row (in the child process)."""
    import torch

    from stratagem.domains.pytorch.worker import compare, precision, runtime
    from stratagem.domains.pytorch.worker.anchor import Anchor

    rule, tol = product_rule()
    t0 = time.monotonic()
    mod = runtime.load_module("kb_problem", path.read_text(), Path(tempfile.mkdtemp()), "reference.py")  # one per process
    init = runtime.init_inputs(mod, 1, device)
    ref = runtime.instantiate(mod.Model, init, 1, device)
    inputs = runtime.make_inputs(mod, 42, device)
    with torch.no_grad():
        with precision.watching(device) as seen:
            ref_out = ref(*runtime.clone_inputs(inputs))
        runtime.synchronize(device)
        anchor = Anchor(ref, device)(runtime.clone_inputs(inputs))
    row: dict[str, Any] = {"problem": path.stem, "precision": seen.summary(), "reduced": seen.reduced, "designs": {}}
    if anchor is None:
        row["anchor"] = Anchor(ref, device).unavailable or "no anchor"
    else:
        e_ref, mag = compare.anchor_errors(anchor, ref_out)
        row.update(reference_err=e_ref, magnitude=mag)
    for name in designs:
        d: dict[str, Any] = {"class": "downgrade" if name in DOWNGRADES else "honest"}
        try:
            fn = _design(name, ref, device)
            with torch.no_grad():
                with precision.watching(device, design=True) as ran:  # as the harness: before the first call
                    fn(runtime.clone_inputs(inputs))
                runtime.synchronize(device)
                out = fn(runtime.clone_inputs(inputs))
                runtime.synchronize(device)
            ev = precision.evidence(seen, ran)
            fixed = compare.compare_outputs(ref_out, out, tol)
            cmp = fixed
            if ev.downgrade is not None:
                cmp = compare.Comparison(False, f"precision downgrade: {ev.downgrade}", decided_by="precision")
            elif not fixed.ok and fixed.kind != "malformed" and anchor is not None:
                cmp = compare.reference_compare(anchor, ref_out, out, rule, tol, fixed, seen=ev.seen)
            d.update(ok=cmp.ok, decided_by="allowance" if cmp.allowance else cmp.decided_by, fixed_ok=fixed.ok,
                     max_abs_err=fixed.max_abs_err, ran=ran.summary(), evidence=ev.words,
                     **compare.benchmark_verdicts(ref_out, out, tol if fixed.ok else None))
            if anchor is not None:
                d["err"], _ = compare.anchor_errors(anchor, out)
                d["ratio"] = d["err"] / row["reference_err"] if row.get("reference_err") else None
            if not cmp.ok:
                d["reason"] = (cmp.reason or "")[:300]
            del out
        except Exception as e:  # noqa: BLE001 - a design that breaks is a row
            d["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        row["designs"][name] = d
        runtime.free_memory()
    row["s"] = time.monotonic() - t0
    return row


def summary(rows: list[dict[str, Any]]) -> str:
    """Honest designs valid and downgrades rejected, with each class's errors against float64."""
    lines = [f"\n{'class':10} {'verdicts':>10} {'share':>7} {'err/ref min':>12} {'median':>8} {'max':>8}  (designs that ran)"]
    for cls, want in (("honest", True), ("downgrade", False)):
        ds = [d for r in rows for d in r.get("designs", {}).values() if d.get("class") == cls and "ok" in d]
        good = sum(1 for d in ds if d["ok"] is want)
        ratios = sorted(d["ratio"] for d in ds if d.get("ratio") is not None)
        mid = ratios[len(ratios) // 2] if ratios else float("nan")
        lines.append(f"{cls:10} {good:>4} of {len(ds):<3} {100 * good / max(1, len(ds)):>6.1f}% "
                     f"{(ratios or [float('nan')])[0]:>12.3g} {mid:>8.3g} {(ratios or [float('nan')])[-1]:>8.3g}")
    broken = [f"{r['problem']}/{n}" for r in rows for n, d in r.get("designs", {}).items() if "error" in d]
    broken += [r["problem"] for r in rows if "error" in r]
    if broken:
        lines.append(f"did not run: {', '.join(broken)}")
    return "\n".join(lines)


def _fmt(row: dict[str, Any], designs: list[str]) -> str:
    if "error" in row:
        return f"{row['problem']}: {row['error']}"
    head = (f"{row['problem']}\n  reference ran in {row['precision']}; its max error vs float64 "
            f"{row.get('reference_err', float('nan')):.3g} (|float64| up to {row.get('magnitude', float('nan')):.3g})"
            + (f"; anchor: {row['anchor']}" if "anchor" in row else ""))
    lines = [head, f"  {'design':36} {'verdict':8} {'decided':10} {'err/ref':>8} {'KernelBench':>11} {'PIKE':>5}"]
    for name in designs:
        d = row["designs"].get(name, {})
        if "error" in d:
            lines.append(f"  {name:36} error: {d['error'][:90]}")
            continue
        ratio = f"{d['ratio']:.3g}x" if d.get("ratio") is not None else "-"
        lines.append(f"  {name:36} {'PASS' if d['ok'] else 'FAIL':8} {d['decided_by']:10} {ratio:>8} "
                     f"{'pass' if d['kernelbench'] else 'FAIL':>11} {'pass' if d['pike'] else 'FAIL':>5}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", default=str(ROOT / ".kb"), help="the folder holding level1/, level2/, ...")
    ap.add_argument("--sample", default="level2:12,level3:6",
                    help="LEVEL:N[,LEVEL:N]: the first N conv problems of each")
    ap.add_argument("--problems", default=None, help="LEVEL/NAME,... instead of --sample")
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cap-s", type=float, default=120.0, help="each problem's time cap (its subprocess)")
    ap.add_argument("--jobs", type=int, default=1, help="problems at once (verdicts do not depend on timing)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    designs = args.designs.split(",")
    if args.one:  # the child: one problem, its row as JSON on the last line
        print(json.dumps(one(Path(args.one), args.device, designs)))
        return
    kb = Path(args.kernelbench)
    names = args.problems.split(",") if args.problems else [
        n for part in args.sample.split(",") for n in conv_problems(kb, part.split(":")[0], int(part.split(":")[1]))]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    def run(name: str) -> dict[str, Any]:
        path = kb / f"{name}.py"
        try:
            p = subprocess.run([sys.executable, __file__, "--one", str(path), "--device", args.device,
                                "--designs", args.designs], capture_output=True, text=True, timeout=args.cap_s)
            tail = p.stdout.strip().splitlines()
            return json.loads(tail[-1]) if p.returncode == 0 and tail else {
                "problem": name, "error": f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"}
        except subprocess.TimeoutExpired:
            return {"problem": name, "error": f"over the {args.cap_s:g} s cap"}
        except Exception as e:  # noqa: BLE001 - every problem gets a row
            return {"problem": name, "error": f"{type(e).__name__}: {e}"}

    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for row in pool.map(run, names):
            rows.append(row)
            print(_fmt(row, designs), flush=True)
            (out / "precision_verdicts.json").write_text(json.dumps(rows, indent=1))
    rule, _ = product_rule()
    print(summary(rows))
    print(f"\nrules: verdict = the product's default rule ({rule['mode']}: a precision downgrade fails; else fixed 1e-4 "
          f"against eager, else max error against float64 within {rule['factor']:g}x the reference's own, "
          f"{rule['same_precision_factor']:g}x where the design was seen at its precision); KernelBench = allclose "
          "1e-4 against eager; PIKE = 1e-2")


if __name__ == "__main__":
    main()
