"""Benchmark (issue 42): verdicts that follow the reference's precision, on KernelBench's
convolutional problems at their shipped sizes.

For each problem: the precision the reference ran at (worker/precision.py), its max error
against the float64 anchor, and for each design (exact fp32, torch.compile recipes,
channels_last, a deliberately lower-precision fp16 autocast, TF32 everywhere) the verdict of
the default `reference` rule and which rule decided, beside KernelBench's (fp32 1e-4) and
PIKE's (1e-2) rules. It calls the worker's own comparison code (compare.py, anchor.py), not
the whole harness (no sandbox, judge or timing), so a problem costs its calls and compiles.

Each problem runs in a subprocess of its own with a time cap (`--cap-s`); a failure is a row.

Usage: python benchmarks/precision_verdicts.py --kernelbench .kb --sample level2:6 [--device cuda]
       [--problems level2/6_Conv3d_Softmax_MaxPool_MaxPool,...] [--designs exact-fp32,compile,...]
       [--cap-s 80] [--out OUT_DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DESIGNS = ("exact-fp32", "compile", "compile-max-autotune-no-cudagraphs", "channels_last", "autocast-fp16", "tf32-all")
RULE = {"mode": "reference", "factor": 1.5, "atol_floor": 0.0, "ulp_floor": 2.0}
TOL = {"float32": {"atol": 1e-4, "rtol": 1e-4}, "float16": {"atol": 1e-2, "rtol": 1e-2},
       "bfloat16": {"atol": 1e-2, "rtol": 1e-2}, "float64": {"atol": 1e-7, "rtol": 1e-7}}


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
    if name == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        return lambda x: model(*[t.to(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4
                                 else t for t in x])
    if name == "autocast-fp16":
        def half(x: list[Any]) -> Any:
            with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu",
                                dtype=torch.float16 if device.startswith("cuda") else torch.bfloat16):
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

    t0 = time.monotonic()
    mod = runtime.load_module("kb_problem", path.read_text(), Path("/tmp"), "reference.py")
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
        d: dict[str, Any] = {}
        try:
            fn = _design(name, ref, device)
            with torch.no_grad():
                out = fn(runtime.clone_inputs(inputs))
                runtime.synchronize(device)
            fixed = compare.compare_outputs(ref_out, out, TOL)
            cmp = fixed
            if not fixed.ok and fixed.kind != "malformed" and anchor is not None:
                cmp = compare.reference_compare(anchor, ref_out, out, RULE, TOL, fixed)
            d.update(ok=cmp.ok, decided_by=cmp.decided_by, fixed_ok=fixed.ok, max_abs_err=fixed.max_abs_err,
                     **compare.benchmark_verdicts(ref_out, out, TOL if fixed.ok else None))
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


def _fmt(row: dict[str, Any], designs: list[str]) -> str:
    if "error" in row:
        return f"{row['problem']}: {row['error']}"
    head = (f"{row['problem']}\n  reference ran in {row['precision']}; its max error vs float64 "
            f"{row.get('reference_err', float('nan')):.3g} (|float64| up to {row.get('magnitude', float('nan')):.3g})"
            + (f"; anchor: {row['anchor']}" if "anchor" in row else ""))
    lines = [head, f"  {'design':38} {'verdict':8} {'rule':10} {'err/ref':>8} {'KernelBench':>11} {'PIKE':>5}"]
    for name in designs:
        d = row["designs"].get(name, {})
        if "error" in d:
            lines.append(f"  {name:38} error: {d['error'][:90]}")
            continue
        ratio = f"{d['ratio']:.3g}x" if d.get("ratio") is not None else "-"
        lines.append(f"  {name:38} {'PASS' if d['ok'] else 'FAIL':8} {d['decided_by']:10} {ratio:>8} "
                     f"{'pass' if d['kernelbench'] else 'FAIL':>11} {'pass' if d['pike'] else 'FAIL':>5}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", default=str(ROOT / ".kb"), help="the folder holding level1/, level2/, ...")
    ap.add_argument("--sample", default="level2:6", help="LEVEL:N[,LEVEL:N]: the first N conv problems of each")
    ap.add_argument("--problems", default=None, help="LEVEL/NAME,... instead of --sample")
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cap-s", type=float, default=80.0, help="each problem's time cap (its subprocess)")
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
    rows = []
    for name in names:
        path = kb / f"{name}.py"
        try:
            p = subprocess.run([sys.executable, __file__, "--one", str(path), "--device", args.device,
                                "--designs", args.designs], capture_output=True, text=True, timeout=args.cap_s)
            tail = p.stdout.strip().splitlines()
            row = json.loads(tail[-1]) if p.returncode == 0 and tail else {
                "problem": name, "error": f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"}
        except subprocess.TimeoutExpired:
            row = {"problem": name, "error": f"over the {args.cap_s:g} s cap"}
        except Exception as e:  # noqa: BLE001 - every problem gets a row
            row = {"problem": name, "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(_fmt(row, designs), flush=True)
        (out / "precision_verdicts.json").write_text(json.dumps(rows, indent=1))
    print("\nrules: verdict = the default `reference` rule (fixed 1e-4 against eager, else max error against float64 within "
          "1.5x the reference's own); KernelBench = allclose 1e-4 against eager; PIKE = 1e-2")


if __name__ == "__main__":
    main()
