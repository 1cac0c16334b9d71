"""examples/dgemm (issue 26): the FP64 matrix-multiplication showcase, tested without a GPU.

What runs here: problem.toml against the command domain's loader and against the harness's own
files; the static checks on every bundled design; the builds (nvcc, when installed: CI's machine
has it, nothing runs on a GPU); main.cu's generator against check.py's; the tiled design's own
block schedule run on the CPU; check.py on synthetic outputs (a correct C passes; a perturbed
entry, float32 accuracy, an off-by-one k loop, NaN, failed on-device checks and hidden GPU work
fail).
"""

from __future__ import annotations

import math
import re
import shutil
import struct
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from stratagem.domains.command import forbid
from stratagem.domains.command.spec import Forbidden
from stratagem.errors import ProblemError

ROOT = Path(__file__).resolve().parents[2] / "examples" / "dgemm"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (the builds need CUDA's compiler)")

sys.path.insert(0, str(ROOT))
import check  # noqa: E402  (examples/dgemm/check.py, the problem's fixed checker)

sys.path.remove(str(ROOT))


def toml() -> dict:
    return tomllib.loads((ROOT / "problem.toml").read_text())


def forbidden() -> Forbidden:
    fb = toml()["forbid"]
    return Forbidden(tuple(fb["libraries"]), tuple(fb["symbols"]), tuple(fb["sources"]), fb["allow_dlopen"])


def plans() -> list[tuple[int, int, int]]:
    """main.cu's (n, warmup, reps) table."""
    text = (ROOT / "main.cu").read_text()
    body = re.search(r"PLANS\[\] = \{(.*?)\};", text, re.S)
    assert body, "main.cu has no PLANS table"
    return [tuple(map(int, t)) for t in re.findall(r"\{(\d+), (\d+), (\d+)\}", body.group(1))]


# --- the problem's declaration ------------------------------------------------------------------


def test_problem_loads_through_the_command_domain():
    from stratagem.domains.command.problem import load_problem

    try:
        problem = load_problem(ROOT)
    except ProblemError as e:
        new_keys = ("requires", "baselines", "cases", "{python}", "case")
        if any(k in str(e) for k in new_keys):
            pytest.xfail(f"the command domain does not know issue 26's keys yet: {e}")
        raise
    assert problem.name == "dgemm" and problem.domain == "command"
    from stratagem.domains.command.problem import bundle_of

    bundle = bundle_of(problem.source)
    assert "docs/background.md" in bundle.files and "build.sh" in bundle.files
    spec = bundle.spec
    assert getattr(spec, "requires_gpu", True) is True
    assert getattr(spec.objective, "cases", tuple(toml()["objective"]["cases"])) == tuple(
        toml()["objective"]["cases"])
    baselines = getattr(spec, "baselines", None)
    if baselines is not None:
        assert [(b.name, b.label) for b in baselines] == [("cublas", "cuBLAS")]


def test_declaration_matches_the_harness():
    t = toml()
    cases = t["objective"]["cases"]
    sizes = [int(c) for c in cases]
    assert sizes == [n for n, _, _ in plans()], "objective.cases must be main.cu's sizes, in order"
    assert any(n & (n - 1) for n in sizes), "at least one size that is not a power of two"
    assert {128, 256, 512, 1024, 2048, 4096} <= set(sizes)
    assert t["requires"]["gpu"] is True
    assert t["compare"]["mode"] == "check" and "{python} check.py" in t["check"]["command"]
    assert t["timing"]["pairs"] >= 6
    assert t["work"]["flops"] == "2 * case**3" and t["work"]["peak_gflops"] > 67000
    for f in t["files"]["fixed"]:
        assert (ROOT / f).is_file(), f
    editable = set(t["files"]["editable"])
    assert {p.name for p in (ROOT / "reference").iterdir()} == editable
    assert t["baselines"]["cublas"]["label"] == "cuBLAS"
    for folder in [ROOT / t["baselines"]["cublas"]["files"], *sorted((ROOT / "designs").iterdir())]:
        names = {p.name for p in folder.iterdir() if not p.name.startswith(".")}
        assert names and names <= editable, f"{folder}: {names} are not all editable files"


def test_main_cu_writes_what_check_py_reads():
    text = (ROOT / "main.cu").read_text()
    magic = re.search(r"MAGIC = (0x[0-9A-F]+)ULL", text)
    assert magic and int(magic.group(1), 16) == check.MAGIC
    assert re.search(r"uint64_t header\[8\]", text) and check.HEADER_WORDS == 8
    assert 'fopen("c.bin", "wb")' in text


def test_the_naive_reference_fits_the_run_limit():
    """At 0.5 TFLOP/s (a slow naive FP64 kernel), every timed and warm-up call of every size."""
    seconds = sum(2 * n**3 * (w + r) / 0.5e12 for n, w, r in plans())
    assert seconds < 5.0 and seconds * 4 < toml()["run"]["timeout_s"]


def test_the_declared_ceiling_is_above_the_h200():
    """The floor 2 n^3 / peak must sit below what cuBLAS can do (FP64 tensor cores: ~67 TFLOP/s)."""
    peak = toml()["work"]["peak_gflops"] * 1e9
    for n, _, _ in plans():
        assert 2 * n**3 / peak < 2 * n**3 / 67e12


# --- static checks ------------------------------------------------------------------------------


def files_of(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("design", ["reference", "designs/tiled", "designs/dmma", "designs/wrong",
                                    "designs/float32"])
def test_honest_sources_pass_the_static_checks(design):
    assert forbid.source_findings(files_of(ROOT / design), forbidden()) == []
    assert forbid.link_findings(toml()["build"]["command"], forbidden(), "build") == []


def test_cublas_designs_are_rejected_on_their_sources():
    linked = forbid.source_findings(files_of(ROOT / "designs/cublas"), forbidden())
    assert any("forbidden source pattern" in f for f in linked)
    assert any("'-lcublas'" in f and f.startswith("flags.txt") for f in linked)
    loaded = forbid.source_findings(files_of(ROOT / "designs/cublas_dlopen"), forbidden())
    assert any("calls dlopen" in f for f in loaded)


# --- builds (nvcc, no GPU) ----------------------------------------------------------------------


def build(design: str, tmp: Path) -> Path:
    """The harness's build: the reference's editable files, the design's over them, the fixed files."""
    d = tmp / design.replace("/", "_")
    d.mkdir()
    for folder in ("reference", design):
        for p in (ROOT / folder).iterdir():
            shutil.copy(p, d / p.name)
    for f in toml()["files"]["fixed"]:
        shutil.copy(ROOT / f, d / f)
    r = subprocess.run(toml()["build"]["command"], shell=True, cwd=d, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{design} did not build:\n{r.stdout}\n{r.stderr}"
    return d / "prog"


@needs_nvcc
def test_every_design_builds_and_only_the_cheats_trip_the_binary_checks(tmp_path):
    designs = ["reference", "designs/tiled", "designs/dmma", "designs/wrong", "baselines/cublas",
               "designs/cublas_dlopen"]
    with ThreadPoolExecutor(4) as pool:
        progs = dict(zip(designs, pool.map(lambda d: build(d, tmp_path), designs), strict=True))
    for design in designs[:4]:
        assert forbid.binary_findings(progs[design], forbidden(), design) == [], design
    findings = forbid.binary_findings(progs["designs/cublas_dlopen"], forbidden(), "cheat")
    assert any("imports dlopen" in f for f in findings)
    # No GPU here: the program must fail cleanly (exit 3, a CUDA error), not crash.
    r = subprocess.run([str(progs["reference"]), "7"], cwd=progs["reference"].parent, capture_output=True,
                       text=True, timeout=60)
    if r.returncode == 0:
        pytest.skip("a GPU is present: the no-GPU exit is not tested here")
    assert r.returncode == 3 and "CUDA error" in r.stderr


@needs_nvcc
def test_the_generator_is_the_same_in_main_cu_and_check_py(tmp_path):
    exe = tmp_path / "gen_values"
    subprocess.run([NVCC, "-O2", "-arch=sm_90", "-o", str(exe), "tools/gen_values.cu"], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    assert len(lines) > 400
    for line in lines:
        f = line.split()
        if f[0] == "KEY":
            seed, n, call, which, key = map(int, f[1:])
            assert check.stream_key(seed, n, call, which) == key
        else:
            assert check.gen_values(int(f[1]), int(f[2]), 1)[0] == float(f[3]), line


@needs_nvcc
@pytest.mark.parametrize("design", ["tiled", "dmma"])
def test_the_kernel_schedule_computes_every_term_once(tmp_path, design):
    """tools/emulate_DESIGN.cu runs the design's own block schedule and phase functions on the
    CPU (dmma: the m8n8k4 f64 fragments emulated), every tile shape, sizes with ragged edges;
    bit-identical to a k-ordered fma loop, no guard zone touched."""
    exe = tmp_path / "emulate"
    subprocess.run([NVCC, "-O2", "-arch=sm_90", "-o", str(exe), f"tools/emulate_{design}.cu"], cwd=ROOT,
                   check=True, capture_output=True, timeout=300)
    r = subprocess.run([str(exe), "1", "7", "33", "128", "130"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "emulation: all OK" in r.stdout, r.stdout + r.stderr


# --- check.py on synthetic outputs ----------------------------------------------------------------

SEED = 424242


def write_output(path: Path, sizes: list[int], *, mutate=None, failures=0, event_ms=1.0, wall_ms=1.02,
                 float32=False, seed=SEED) -> None:
    """A c.bin as main.cu writes it, C computed by numpy (float64, or float32 on request)."""
    table = {n: (w, r) for n, w, r in plans()}
    with open(path, "wb") as f:
        for n in sizes:
            warmup, reps = table.get(n, (2, 10))
            call = warmup + reps - 1
            a, b = check.inputs(seed, n, call)
            c = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64) if float32 else a @ b
            if mutate is not None:
                c = mutate(n, a, b, c.copy())
            f.write(struct.pack("<6Q2d", check.MAGIC, n, call, failures, reps, warmup, event_ms, wall_ms))
            f.write(np.ascontiguousarray(c, dtype="<f8").tobytes())


def run_check(tmp: Path, sizes: list[int], **design) -> subprocess.CompletedProcess:
    ref, des = tmp / "ref", tmp / "des"
    ref.mkdir(exist_ok=True)
    des.mkdir(exist_ok=True)
    write_output(ref / "c.bin", sizes)
    write_output(des / "c.bin", sizes, **design)
    return subprocess.run([sys.executable, str(ROOT / "check.py"), str(ref), str(des), str(SEED)],
                          capture_output=True, text=True, timeout=120, env={"TMPDIR": str(tmp)})


def test_check_accepts_a_correct_product(tmp_path):
    r = run_check(tmp_path, [128, 1000])
    assert r.returncode == 0, r.stdout + r.stderr
    # and a C a few ulps away from the reference's (another order of summation)
    r = run_check(tmp_path, [128, 1000],
                  mutate=lambda n, a, b, c: c * (1 + 4 * 2.0**-53) + (a[:, ::-1] @ b[::-1, :] - a @ b))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("case,kwargs,words", [
    ("one entry off by 1e-9", {"mutate": lambda n, a, b, c: c + (np.arange(c.size).reshape(c.shape) == 4321) * 1e-9},
     "off by"),
    ("off-by-one k loop", {"mutate": lambda n, a, b, c: c - np.outer(a[:, -1], b[-1, :])}, "off by"),
    ("an entry left unwritten", {"mutate": lambda n, a, b, c: np.where(c == c[5, 6], np.nan, c)}, "not written"),
    ("failed on-device checks", {"failures": 2}, "on-device Freivalds"),
    ("GPU work hidden from the timed stream", {"event_ms": 0.01, "wall_ms": 3.0}, "outside the stream"),
])
def test_check_rejects(tmp_path, case, kwargs, words):
    r = run_check(tmp_path, [128, 1000], **kwargs)
    assert r.returncode == 1, f"{case}: {r.stdout}{r.stderr}"
    assert words in r.stdout and len(r.stdout.strip().splitlines()) == 1, r.stdout


@pytest.mark.parametrize("n", [128, 512, 1000])
def test_float32_accuracy_is_rejected(tmp_path, n):
    r = run_check(tmp_path, [n], float32=True)
    assert r.returncode == 1 and f"N={n}" in r.stdout, r.stdout + r.stderr


def test_freivalds_catches_what_the_reference_shares(tmp_path):
    """Reference and design wrong alike (so the entrywise comparison passes): the Freivalds vector
    drawn by check.py still sees it."""
    ref, des = tmp_path / "ref", tmp_path / "des"
    ref.mkdir()
    des.mkdir()
    wrong = {"mutate": lambda n, a, b, c: c - np.outer(a[:, -1], b[-1, :])}
    write_output(ref / "c.bin", [256], **wrong)
    write_output(des / "c.bin", [256], **wrong)
    r = subprocess.run([sys.executable, str(ROOT / "check.py"), str(ref), str(des), str(SEED)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "for a random v" in r.stdout, r.stdout


def test_check_rejects_other_sizes_and_garbage(tmp_path):
    ref, des = tmp_path / "ref", tmp_path / "des"
    ref.mkdir()
    des.mkdir()
    write_output(ref / "c.bin", [128, 256])
    write_output(des / "c.bin", [128])
    args = [sys.executable, str(ROOT / "check.py"), str(ref), str(des), str(SEED)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "sizes" in r.stdout
    (des / "c.bin").write_bytes(b"\0" * 100)
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "not the harness's output" in r.stdout
    (des / "c.bin").unlink()
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cannot read" in r.stdout


def test_exact_entries_are_exact():
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, (40, 300)), rng.uniform(-1, 1, (300, 40))
    rows, cols = np.array([0, 7, 39]), np.array([3, 3, 0])
    exact, mags = check.exact_entries(a, b, rows, cols)
    for s in range(3):
        want = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[rows[s]], b[:, cols[s]], strict=True))
        assert exact[s] == float(want)
        assert math.isclose(mags[s], float(np.abs(a[rows[s]]) @ np.abs(b[:, cols[s]])), rel_tol=1e-12)


def test_the_tolerance_separates_fp64_from_fp32_by_orders_of_magnitude():
    """README's figures: the bound 2 n u sum|a||b| against float32's typical error, per size."""
    rng = np.random.default_rng(1)
    for n in (512, 1024):
        a, b = rng.uniform(-1, 1, (64, n)), rng.uniform(-1, 1, (n, 64))
        exact = a @ b
        f32 = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
        bound = check.C_DESIGN * n * check.U * (np.abs(a) @ np.abs(b))
        assert np.median(np.abs(f32 - exact) / bound) > 1e3
