"""check.py: the ground truth of the robertson problem (a fixed file: a design may not change it).

Usage: python check.py REFERENCE_DIR DESIGN_DIR SEED [--max-n N]
Exit 0 when the design's out.json is right, 1 (with a one-line reason on stdout) when it is not,
2 when the REFERENCE's own output is wrong (the problem's fault, said as such).
(--max-n is for testing on the CPU only: the sizes above N are not required.)

For every size n in 10 .. 10^6 the design's out.json (written by main.cu) must:
  1. list the sampled cells the seed gives (the splitmix64 derivation of main.cu, redone here);
  2. hold, at every sampled cell and for every species s, a final state within
         |y_s - y*_s| <= RTOL * |y*_s| + ATOL[s]
     of the ground truth y*: scipy's Radau (float64, analytic Jacobian, rtol 1e-10, atol 1e-20;
     all sampled cells of all sizes integrated together as one block-diagonal system);
  3. conserve mass: |y1 + y2 + y3 - 1| <= MASS_TOL at every sampled cell, and the harness's
     largest mass defect over ALL cells of every call (warm-up included) <= MASS_TOL;
  4. have no non-finite value in any cell of any call;
  5. have, for every call (warm-up included) and species, a seed-weighted checksum over ALL
     cells within 2 * (RTOL * C_ref + ATOL[s] * W) of the reference's last call's checksum C_ref
     (W: the sum of the weights), the per-cell tolerance summed over the cells and doubled
     because the reference and the design may each be off by up to the tolerance.
The reference's sampled cells must pass 2 and 3 themselves (else exit 2).

The ground truth is cached in $TMPDIR (the evaluation's private temporary directory), keyed by the
cell's interpolation parameter s = c / (n - 1), so the checks after the timed blocks (same seed)
cost no integration.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path

K1, K2, K3 = 0.04, 3.0e7, 1.0e4
T_END = 100.0
SIZES = (10, 100, 1000, 10000, 100000, 1000000)
NSAMPLES = 8
RTOL = 1.0e-5
ATOL = (1.0e-10, 1.0e-14, 1.0e-10)
MASS_TOL = 1.0e-9
TRUTH_RTOL, TRUTH_ATOL = 1.0e-10, 1.0e-20
CACHE_NAME = "robertson_truth_v1.json"
SPECIES = ("y1", "y2", "y3")

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


class Fail(Exception):
    pass


def mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def sampled_cells(seed: int, n: int) -> list[int]:
    """main.cu's sampled cells of size n: 0, n - 1, then distinct next() % n."""
    state = (seed * GOLDEN + n) & M64
    cells = [0] + ([n - 1] if n > 1 else [])
    while len(cells) < min(NSAMPLES, n):
        state = (state + GOLDEN) & M64
        c = mix(state) % n
        if c not in cells:
            cells.append(c)
    return cells


def s_of(c: int, n: int) -> float:
    return c / (n - 1) if n > 1 else 0.0


def initial(s: float) -> tuple[float, float, float]:
    return (0.5 * s, 1.0 - s, 0.5 * s)


def integrate(ss: list[float]) -> list[list[float]]:
    """Final states at T_END of the cells starting at s in ss, by scipy's Radau, as one system."""
    import numpy as np
    from scipy import sparse
    from scipy.integrate import solve_ivp

    m = len(ss)
    s = np.asarray(ss, dtype=float)
    y0 = np.stack([0.5 * s, 1.0 - s, 0.5 * s], 1).ravel()
    idx = np.arange(3 * m).reshape(m, 3)
    rows = np.repeat(idx, 3, axis=1).ravel()
    cols = np.tile(idx, (1, 3)).ravel()

    def f(_t, y):
        a, b, c = y[0::3], y[1::3], y[2::3]
        r1, r2, r3 = K1 * a, K2 * b * b, K3 * b * c
        return np.stack([-r1 + r3, r1 - r3 - r2, r2], 1).ravel()

    def jac(_t, y):
        b, c = y[1::3], y[2::3]
        z = np.zeros(m)
        v = np.stack([np.full(m, -K1), K3 * c, K3 * b,
                      np.full(m, K1), -K3 * c - 2 * K2 * b, -K3 * b,
                      z, 2 * K2 * b, z], 1).ravel()
        return sparse.csc_matrix((v, (rows, cols)), shape=(3 * m, 3 * m))

    r = solve_ivp(f, (0.0, T_END), y0, method="Radau", jac=jac, rtol=TRUTH_RTOL, atol=TRUTH_ATOL)
    if not r.success:
        raise RuntimeError(f"the ground truth's integration failed: {r.message}")
    return r.y[:, -1].reshape(m, 3).tolist()


def truth(ss: list[float]) -> dict[str, list[float]]:
    """Ground truth keyed by repr(s), from the cache in $TMPDIR, integrating what is missing."""
    cache = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / CACHE_NAME
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    missing = sorted({repr(s) for s in ss} - set(known))
    if missing:
        for k, y in zip(missing, integrate([float(k) for k in missing]), strict=True):
            known[k] = y
        tmp = cache.with_name(f"{CACHE_NAME}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(known))
            os.replace(tmp, cache)
        except OSError:
            pass  # a cache we cannot write only costs time
    return known


def load(d: str, who: str) -> dict:
    p = Path(d) / "out.json"
    try:
        return json.loads(p.read_text())
    except OSError as e:
        raise Fail(f"the {who} wrote no readable out.json ({e})") from None
    except ValueError as e:
        raise Fail(f"the {who}'s out.json is not JSON ({e})") from None


def size_entry(out: dict, n: int, seed: int, who: str) -> dict:
    try:
        e = out["sizes"][str(n)]
        ok = (e["n"] == n and isinstance(e["y"], list) and isinstance(e["checksums"], list)
              and isinstance(e["reps"], int) and isinstance(e["cells"], list))
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise Fail(f"the {who}'s out.json has no (well-formed) entry for n = {n}")
    if not isinstance(out, dict) or out.get("seed") != seed:
        raise Fail(f"the {who}'s out.json is for seed {out.get('seed')}, not {seed}")
    if e["cells"] != sampled_cells(seed, n):
        raise Fail(f"n = {n}: the {who}'s sampled cells {e['cells']} are not the seed's")
    if len(e["y"]) != len(e["cells"]) or any(not isinstance(v, list) or len(v) != 3 for v in e["y"]):
        raise Fail(f"n = {n}: the {who}'s sampled states are malformed")
    calls = 1 + e["reps"]
    if not (len(e["checksums"]) == len(e["mass_defect"]) == len(e["nonfinite"]) == calls):
        raise Fail(f"n = {n}: the {who}'s per-call records do not cover its {calls} calls")
    return e


def check_cells(e: dict, n: int, gt: dict, who: str) -> None:
    for c, y in zip(e["cells"], e["y"], strict=True):
        s = s_of(c, n)
        ref = gt[repr(s)]
        if any(v is None or not math.isfinite(v) for v in y):
            raise Fail(f"n = {n}, cell {c}: the {who}'s final state {y} is not finite")
        for k in range(3):
            tol = RTOL * abs(ref[k]) + ATOL[k]
            if abs(y[k] - ref[k]) > tol:
                raise Fail(f"n = {n}, cell {c} (y0 = {initial(s)}): the {who}'s {SPECIES[k]} = {y[k]:.10g}, "
                           f"the ground truth {ref[k]:.10g}: off by {abs(y[k] - ref[k]):.3g} > "
                           f"tolerance {tol:.3g} (rtol {RTOL:g}, atol {ATOL[k]:g})")
        defect = abs(y[0] + y[1] + y[2] - 1.0)
        if defect > MASS_TOL:
            raise Fail(f"n = {n}, cell {c}: the {who}'s y1 + y2 + y3 - 1 = {defect:.3g} > mass tolerance {MASS_TOL:g}")


def check_all_cells(e: dict, ref: dict, n: int) -> None:
    for k, (bad, defect) in enumerate(zip(e["nonfinite"], e["mass_defect"], strict=True)):
        call = "the warm-up call" if k == 0 else f"timed call {k}"
        if bad:
            raise Fail(f"n = {n}, {call}: {bad} cells have non-finite final states")
        if defect is None or not defect <= MASS_TOL:
            raise Fail(f"n = {n}, {call}: the largest mass defect over all cells is {defect} > {MASS_TOL:g}")
    if e["weight_sum"] != ref["weight_sum"]:
        raise Fail(f"n = {n}: the checksum weights differ from the reference's")
    want = ref["checksums"][-1]
    w = ref["weight_sum"]
    for k, got in enumerate(e["checksums"]):
        call = "the warm-up call" if k == 0 else f"timed call {k}"
        for s in range(3):
            tol = 2.0 * (RTOL * abs(want[s]) + ATOL[s] * w)
            if got[s] is None or not abs(got[s] - want[s]) <= tol:
                raise Fail(f"n = {n}, {call}: the weighted checksum of {SPECIES[s]} over all cells is {got[s]}, "
                           f"the reference's {want[s]:.12g}: off by more than {tol:.3g} (a cell not integrated, "
                           f"or integrated wrong, outside the sampled ones)")


def main(argv: list[str]) -> int:
    args = list(argv[1:])
    max_n = None
    if "--max-n" in args:
        i = args.index("--max-n")
        max_n = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        print("usage: check.py REFERENCE_DIR DESIGN_DIR SEED [--max-n N]")
        return 2
    ref_dir, des_dir, seed = args[0], args[1], int(args[2])
    sizes = [n for n in SIZES if max_n is None or n <= max_n]
    try:
        ref_out = load(ref_dir, "reference")
        refs = {n: size_entry(ref_out, n, seed, "reference") for n in sizes}
    except Fail as e:
        print(f"problem error: {e}")
        return 2
    except (KeyError, IndexError, TypeError, ValueError) as e:
        print(f"problem error: the reference's out.json is malformed ({type(e).__name__}: {e})")
        return 2
    try:
        des_out = load(des_dir, "design")
        des = {n: size_entry(des_out, n, seed, "design") for n in sizes}
    except Fail as e:
        print(e)
        return 1
    except (KeyError, IndexError, TypeError, ValueError) as e:
        print(f"the design's out.json is malformed ({type(e).__name__}: {e})")
        return 1
    gt = truth([s_of(c, n) for n in sizes for c in refs[n]["cells"]])
    try:
        for n in sizes:
            check_cells(refs[n], n, gt, "reference")
    except Fail as e:
        print(f"problem error: {e}")
        return 2
    except (KeyError, IndexError, TypeError, ValueError) as e:
        print(f"problem error: the reference's out.json is malformed ({type(e).__name__}: {e})")
        return 2
    try:
        for n in sizes:
            check_cells(des[n], n, gt, "design")
            check_all_cells(des[n], refs[n], n)
    except Fail as e:
        print(e)
        return 1
    except (KeyError, IndexError, TypeError, ValueError) as e:
        print(f"the design's out.json is malformed ({type(e).__name__}: {e})")
        return 1
    print(f"ok: {len(sizes)} sizes, {sum(len(refs[n]['cells']) for n in sizes)} sampled cells within rtol {RTOL:g}, "
          f"mass within {MASS_TOL:g}, checksums over all cells agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
