"""Paired against unpaired timing under load: known-ratio candidates through the real harness.

Two candidates with known ratios against a matmul+tanh reference:
- `same`: the reference itself (truth 1.00x);
- `twice`: the reference's work done twice (truth about 0.50x: measured on an idle machine,
  the first rows of the table).

Each is evaluated by the real harness (a fresh sandboxed worker: paired timing of the eager
reference and the candidate in alternating blocks) under each load level: 0, 1 and 2 CPU hogs
(busy loops, one per process), and on a GPU also a concurrent compile job (a process compiling
with torch.compile max-autotune in a loop, which benchmarks kernels on the same GPU). Beside the
paired ratio, the table gives the unpaired ratio the harness reported before paired timing: the
eager median from a separate baseline worker (timed right after, under the same load) over the
candidate's median. Cost: the timing stage's wall time (paired, re-timings included) against the
baseline worker's single-program timing of eager.

    python benchmarks/timing_noise.py --device cpu
    python benchmarks/timing_noise.py --device cuda --compile-job --size 4096

Prints a markdown table (and writes JSON with `--out`). Target: paired ratios within 5% of the
truth under load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import environment, load_config  # noqa: E402
from stratagem.domains.pytorch.domain import candidate_design  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.evaluation.executors import LocalExecutor  # noqa: E402
from stratagem.evaluation.service import Evaluator  # noqa: E402

PAIRED = ROOT / "tests" / "fixtures" / "paired"
HOG = "import time\nt = time.time() + {s}\nwhile time.time() < t: pass\n"
COMPILE_JOB = """
import time, torch
t = time.time() + {s}
x = torch.randn(2048, 2048, device="cuda")
while time.time() < t:
    torch._dynamo.reset()
    f = torch.compile(lambda a: torch.relu(a @ a.t()) * 2 + a.sum(), mode="max-autotune")
    f(x); torch.cuda.synchronize()
"""


@contextlib.contextmanager
def load(hogs: int, compile_job: bool, seconds: float) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", HOG.format(s=seconds)]) for _ in range(hogs)]
    if compile_job:
        procs.append(subprocess.Popen([sys.executable, "-c", COMPILE_JOB.format(s=seconds)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        time.sleep(2.0 if compile_job else 0.3)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def problem_file(size: int, directory: Path) -> Path:
    src = (PAIRED / "problem.py").read_text().replace("batch_size = 384", f"batch_size = {size}")
    src = src.replace("dim = 384", f"dim = {size}")
    path = directory / f"matmul_tanh_{size}.py"
    path.write_text(src)
    return path


async def one(evaluator: Evaluator, problem: Any, name: str) -> dict[str, Any]:
    design = candidate_design((PAIRED / f"{name}.py").read_text())
    ev = await evaluator.evaluate(problem, design, with_baseline=False)
    timing = ev.verdict.result("timing")
    if ev.verdict.status != "valid" or ev.paired is None or timing is None:
        return {"candidate": name, "status": ev.verdict.status, "report": ev.verdict.report()}
    base = await evaluator.baseline(problem, refresh=True)
    eager = base.median_ms("eager")
    bstage = base.verdict.result("baseline")
    d = timing.details
    return {
        "candidate": name, "status": "valid",
        "paired": ev.paired.ratio, "low": ev.paired.low, "high": ev.paired.high,
        "stability": (ev.stability.to_json() if ev.stability else {}),
        "attempts": len(d.get("attempts") or []),
        "candidate_ms": ev.runtime_ms, "eager_paired_ms": (d.get("reference") or {}).get("median_ms"),
        "eager_alone_ms": eager,
        "unpaired": (eager / ev.runtime_ms) if eager and ev.runtime_ms else None,
        "timing_s": timing.duration_s, "single_timing_s": bstage.duration_s if bstage else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", type=int, default=None, help="matmul size (default 384 on the CPU, 4096 on a GPU)")
    ap.add_argument("--hogs", default="0,1,2", help="CPU hog counts to run under")
    ap.add_argument("--compile-job", action="store_true", help="also run under a concurrent max-autotune compile job")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    gpu = args.device.startswith("cuda")
    size = args.size or (4096 if gpu else 384)
    cfg = load_config(None, {"evaluation": {"device": args.device, "baselines": ["eager"],
                                            "correctness_trials": 2}}).evaluation
    tmp = Path(tempfile.mkdtemp(prefix="timing-noise-"))
    problem = load_problem(problem_file(size, tmp))
    devices = [args.device if args.device != "cuda" else "cuda:0"]
    evaluator = Evaluator(cfg, LocalExecutor.for_devices(devices, cfg, environment()), devices[0])
    levels: list[tuple[int, bool]] = [(int(h), False) for h in args.hogs.split(",") if h != ""]
    if args.compile_job:
        levels.append((0, True))
    rows: list[dict[str, Any]] = []
    for hogs, job in levels:
        with load(hogs, job, seconds=600):
            for _ in range(args.repeats):
                for name in ("same", "twice"):
                    r = asyncio.run(one(evaluator, problem, name))
                    r.update(hogs=hogs, compile_job=job)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    truth = {"same": 1.0}
    idle = [r["paired"] for r in rows if r["candidate"] == "twice" and r["hogs"] == 0 and not r["compile_job"]
            and r.get("paired")]
    truth["twice"] = sorted(idle)[len(idle) // 2] if idle else 0.5
    print(f"\nproblem: tanh(x @ W), {size}x{size}, device {devices[0]}; truth: same 1.00x, "
          f"twice {truth['twice']:.3f}x (median idle paired measurement)\n")
    print("| load | candidate | paired [95% CI] | err | stability | unpaired | err | eager beside / alone ms "
          "| timing s paired / single |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        label = ("compile job" if r["compile_job"] else f"{r['hogs']} hog" + ("s" if r["hogs"] != 1 else ""))
        if r["status"] != "valid":
            print(f"| {label} | {r['candidate']} | {r['status']} | | | | | | |")
            continue
        t = truth[r["candidate"]]
        st = r["stability"].get("verdict", "?") + (f" ({r['attempts']} timings)" if r["attempts"] > 1 else "")
        up = r["unpaired"]
        print(f"| {label} | {r['candidate']} | {r['paired']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
              f"| {abs(r['paired'] / t - 1):.1%} | {st} | {up:.3f} | {abs(up / t - 1):.1%} "
              f"| {r['eager_paired_ms']:.4f} / {r['eager_alone_ms']:.4f} "
              f"| {r['timing_s']:.1f} / {r['single_timing_s']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps({"size": size, "device": devices[0], "truth": truth, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
