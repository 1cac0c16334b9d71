"""Diagnostic: why can a `recipes` design that is only `torch.compile` of the reference time
slower than the harness's own `compile` baseline? Run on a GPU machine.

Per problem, through the harness (fresh worker per evaluation, the baseline stage's numbers
alongside) and in one process with `triton.testing.do_bench` (fixed inputs):
  - `recipe:compile`: the rendered recipe (`torch.compile` of a bound method of the wrapper);
  - `module-compile`: the same wrapper compiling the reference module itself;
  - in-process: eager, `torch.compile(model)`, and the recipe wrapper.

Usage: python benchmarks/compile_gap.py [--only 02_reduction,03_softmax] [--device cuda]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from stratagem.config import load_config  # noqa: E402
from stratagem.domains.pytorch.domain import candidate_design  # noqa: E402
from stratagem.domains.pytorch.problem import load_problem  # noqa: E402
from stratagem.domains.pytorch.recipes.catalog import CATALOG, render  # noqa: E402
from stratagem.evaluation.api import make_evaluator  # noqa: E402

RECIPE_LINE = "self.compiled = torch.compile(self._run)"
MODULE_LINE = "self.compiled = torch.compile(self.model)"


def sources(problem_source: str) -> dict[str, str]:
    recipe = render(problem_source, [r for r in CATALOG if r.name == "compile"])
    assert RECIPE_LINE in recipe, "the compile recipe no longer renders as this diagnostic expects"
    return {"recipe:compile": recipe, "module-compile": recipe.replace(RECIPE_LINE, MODULE_LINE)}


def in_process(problem_path: Path, srcs: dict[str, str]) -> dict[str, float]:
    import torch
    import triton.testing

    prob = types.ModuleType("gap_problem")
    sys.modules[prob.__name__] = prob
    exec(compile(problem_path.read_text(), str(problem_path), "exec"), prob.__dict__)  # noqa: S102
    out: dict[str, float] = {}
    with torch.device("cuda"):
        init = prob.get_init_inputs()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
        ref = prob.Model(*init).cuda()
        cands = {"eager": ref, "compile(model)": torch.compile(ref)}
        for name, src in srcs.items():
            mod = types.ModuleType(f"gap_{len(cands)}")
            sys.modules[mod.__name__] = mod  # dynamo resolves the module's globals by name
            exec(compile(src, name, "exec"), mod.__dict__)  # noqa: S102
            cands[name] = mod.ModelNew(*init).cuda()
    with torch.no_grad():
        for name, fn in cands.items():
            out[name] = float(triton.testing.do_bench(lambda f=fn: f(*inputs), warmup=100, rep=500,
                                                      return_mode="median"))
            torch._dynamo.reset()
    return out


async def main_async(args: argparse.Namespace) -> None:
    cfg = load_config(None, {"evaluation": {"device": args.device, "workers_per_gpu": 1}}).evaluation
    evaluator = make_evaluator(cfg)
    dirs = [ROOT / "examples" / n for n in args.only.split(",")]
    for d in dirs:
        problem = load_problem(d / "problem.py")
        srcs = sources(problem.source)
        for name, src in [*srcs.items(), ("recipe:compile (again)", srcs["recipe:compile"])]:
            t0 = time.monotonic()
            ev = await evaluator.evaluate(problem, candidate_design(src), with_baseline=True, timeout_s=600)
            ref = ev.reference_ms
            print(f"{d.name} harness {name}: {ev.verdict.status} {ev.runtime_ms} ms · baseline eager "
                  f"{ref.get('eager')} compile {ref.get('compile')} · {time.monotonic() - t0:.0f}s", flush=True)
        if args.device.startswith("cuda"):
            for name, ms in in_process(d / "problem.py", srcs).items():
                print(f"{d.name} do_bench {name}: {ms:.4f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="02_reduction,03_softmax")
    ap.add_argument("--device", default="cuda")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
