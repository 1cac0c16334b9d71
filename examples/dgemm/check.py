"""The dgemm problem's checker (a fixed file): does the design's C agree with A B?

Usage: python check.py REFERENCE_DIR DESIGN_DIR SEED

Reads the c.bin each run wrote (main.cu documents the format), regenerates every size's A and B
from the seed with main.cu's generator (in numpy; cached under $TMPDIR when it is set), and checks
the design's C, entry by entry, against the problem's tolerance (README.md):

    |C[i][j] - (A B)[i][j]| <= 2 n u sum_k |A[i][k]| |B[k][j]|,   u = 2^-53

through four tests, each a rigorous consequence of that bound (an honest FP64 design never fails
one, whatever its order of summation):
  1. the headers: the sizes, the call whose output was written, the on-device Freivalds check of
     every call (zero failures), and the kernel time against the host's wall time around the call
     (GPU work hidden from the timed stream fails);
  2. every entry, against the reference's C (the naive kernel: error <= n u sum |a||b|):
     |C_d - C_r| <= 3 n u ub[i][j], where ub = min(max_k |A[i][k]| sum_k |B[k][j]|,
     sum_k |A[i][k]| max_k |B[k][j]|) >= sum_k |A[i][k]| |B[k][j]|; NaN or inf anywhere fails;
  3. a Freivalds check with a vector drawn now, from the operating system's entropy (a design
     cannot know it): |C v - A (B v)| <= 2 n u (|C| |v| + 3 |A| |B| |v|) on every row;
  4. entries at positions drawn now, against their exact value (products split exactly with
     Veltkamp's method, summed exactly by math.fsum): |C_d - exact| <= 2 n u sum |a||b|; the
     reference's own entries there must be within n u sum |a||b| (else the check itself is broken).
Every bound is widened by 1% (the roundings of the bounds themselves). Exit 0: the design agrees;
1: it does not (one line says why); 2: the reference's output is unusable.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

MAGIC = 0x4D4D4547443A5453
GOLDEN = 0x9E3779B97F4A7C15
MASK = (1 << 64) - 1
U = 2.0 ** -53
SLACK = 1.01
C_DESIGN = 2.0
"""The tolerance's constant: a design's entry may be off by C_DESIGN * n * u * sum |a||b|."""
SAMPLES = 32
HEADER_WORDS = 8
WALL_ALLOWANCE_MS = 0.2
"""Per call, the host's wall time may exceed the event time by this much (launch and sync latency)
plus as much again as the event time; beyond, the design did GPU work outside the timed stream."""


class Disagree(Exception):
    pass


class Broken(Exception):
    pass


def mix64_scalar(z: int) -> int:
    z &= MASK
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return z


def stream_key(seed: int, n: int, call: int, which: int) -> int:
    return mix64_scalar(mix64_scalar(mix64_scalar(seed + GOLDEN) ^ n) ^ ((call << 8) | which))


def gen_values(key: int, start: int, count: int) -> np.ndarray:
    """value(key, i) for i in start .. start + count - 1 (main.cu's gen_value), as float64."""
    x = np.arange(start + 1, start + count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x *= np.uint64(GOLDEN)
        x += np.uint64(key)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    x >>= np.uint64(11)
    return x.astype(np.float64) * 2.0 ** -52 - 1.0


def gen_matrix(key: int, n: int) -> np.ndarray:
    out = np.empty(n * n, dtype=np.float64)
    chunk = 1 << 22
    for start in range(0, n * n, chunk):
        count = min(chunk, n * n - start)
        out[start:start + count] = gen_values(key, start, count)
    return out.reshape(n, n)


def inputs(seed: int, n: int, call: int) -> tuple[np.ndarray, np.ndarray]:
    """A and B of one call, from the cache under $TMPDIR when there (the harness's private dir)."""
    tmp = os.environ.get("TMPDIR")
    cache = Path(tmp) / "dgemm-check" if tmp else None
    mats = []
    for which in (0, 1):
        path = cache / f"{seed}-{n}-{call}-{which}.npy" if cache else None
        if path is not None and path.is_file():
            try:
                m = np.load(path, mmap_mode="r")
                if m.shape == (n, n) and m.dtype == np.float64:
                    mats.append(np.asarray(m))
                    continue
            except (OSError, ValueError):
                pass
        m = gen_matrix(stream_key(seed, n, call, which), n)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                part = path.with_suffix(f".{os.getpid()}.part")
                with open(part, "wb") as f:
                    np.save(f, m)
                os.replace(part, path)
            except OSError:
                pass
        mats.append(m)
    return mats[0], mats[1]


def read_sections(path: Path, who: str) -> list[tuple[dict, np.ndarray]]:
    """The (header, C) pairs of one c.bin."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise (Broken if who == "reference" else Disagree)(f"{who}: cannot read {path.name}: {e}") from None
    sections, off = [], 0
    while off < len(raw):
        if off + 8 * HEADER_WORDS > len(raw):
            raise Disagree(f"{who}: {path.name} ends inside a header")
        words = np.frombuffer(raw, dtype="<u8", count=HEADER_WORDS, offset=off)
        floats = np.frombuffer(raw, dtype="<f8", count=HEADER_WORDS, offset=off)
        if int(words[0]) != MAGIC:
            raise Disagree(f"{who}: {path.name} is not the harness's output (bad magic at byte {off})")
        n = int(words[1])
        if not 0 < n <= 65536:
            raise Disagree(f"{who}: {path.name}: size {n} out of range")
        head = {"n": n, "call": int(words[2]), "failures": int(words[3]), "reps": int(words[4]),
                "warmup": int(words[5]), "event_ms": float(floats[6]), "wall_ms": float(floats[7])}
        off += 8 * HEADER_WORDS
        if off + 8 * n * n > len(raw):
            raise Disagree(f"{who}: {path.name} ends inside C for N={n}")
        c = np.frombuffer(raw, dtype="<f8", count=n * n, offset=off).reshape(n, n)
        off += 8 * n * n
        sections.append((head, c))
    if not sections:
        raise (Broken if who == "reference" else Disagree)(f"{who}: {path.name} is empty")
    return sections


def exact_entries(a: np.ndarray, b: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[list[float], np.ndarray]:
    """(A B)[rows[s], cols[s]] correctly rounded, and sum_k |a||b| for each sample."""
    x, y = a[rows, :], b[:, cols].T  # (samples, n) each

    def split(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = 134217729.0 * v  # 2^27 + 1 (no overflow: |v| <= 1)
        hi = t - (t - v)
        return hi, v - hi

    xh, xl = split(x)
    yh, yl = split(y)
    p = x * y
    e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl  # p + e == x * y exactly (Dekker)
    exact = [math.fsum(np.concatenate([p[s], e[s]]).tolist()) for s in range(len(rows))]
    return exact, (np.abs(x) * np.abs(y)).sum(axis=1)


def check_size(seed: int, rh: dict, rc: np.ndarray, dh: dict, dc: np.ndarray, rng: np.random.Generator) -> None:
    n = rh["n"]
    tag = f"N={n}"
    if dh["n"] != n or dh["call"] != rh["call"]:
        raise Disagree(f"{tag}: the design's output is of another size or call ({dh['n']}, call {dh['call']})")
    if rh["failures"]:
        raise Broken(f"{tag}: the reference failed its own on-device check ({rh['failures']} rows)")
    if dh["failures"]:
        raise Disagree(f"{tag}: {dh['failures']} rows failed the on-device Freivalds check of the timed calls "
                       f"(C v != A (B v) beyond the tolerance in some call: a call that did not compute the product)")
    ev, wall = dh["event_ms"], dh["wall_ms"]
    if not (math.isfinite(ev) and ev > 0):
        raise Disagree(f"{tag}: the design's kernel time {ev!r} ms is not a positive number")
    if wall > 2.0 * ev + WALL_ALLOWANCE_MS:
        raise Disagree(f"{tag}: the timed events saw {ev:.4f} ms but the call took {wall:.4f} ms of wall time "
                       f"(median): work outside the stream the harness times (or host work in the call)")
    if not np.isfinite(dc).all():
        bad = np.argwhere(~np.isfinite(dc))[0]
        raise Disagree(f"{tag}: C[{bad[0]}][{bad[1]}] = {float(dc[bad[0], bad[1]])!r} (an entry not written, or not finite)")

    a, b = inputs(seed, n, rh["call"])
    aa, ab = np.abs(a), np.abs(b)

    # 2. every entry against the reference's, with a rank-one upper bound on |A| |B|.
    ra_max, ra_sum = aa.max(axis=1), aa.sum(axis=1)
    cb_max, cb_sum = ab.max(axis=0), ab.sum(axis=0)
    step = max(1, (1 << 22) // n)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        ub = np.minimum(ra_max[r0:r1, None] * cb_sum[None, :], ra_sum[r0:r1, None] * cb_max[None, :])
        tol = SLACK * (C_DESIGN + 1.0) * n * U * ub
        diff = np.abs(dc[r0:r1] - rc[r0:r1])
        over = diff > tol
        if over.any():
            i, j = np.argwhere(over)[0]
            raise Disagree(f"{tag}: C[{r0 + i}][{j}] = {float(dc[r0 + i, j])!r}, the reference's {float(rc[r0 + i, j])!r}: "
                           f"off by {diff[i, j]:.3e}, allowed {tol[i, j]:.3e} (3 n u sum|a||b|)")

    # 3. Freivalds with a vector the design cannot know.
    v = rng.uniform(-1.0, 1.0, n)
    av = np.abs(v)
    y, z = dc @ v, a @ (b @ v)
    ya, za = np.abs(dc) @ av, aa @ (ab @ av)
    tol = SLACK * C_DESIGN * n * U * (ya + 3.0 * za)
    diff = np.abs(y - z)
    if not (diff <= tol).all():
        i = int(np.argmax(diff - tol))
        raise Disagree(f"{tag}: (C v)[{i}] = {float(y[i])!r} but (A (B v))[{i}] = {float(z[i])!r} for a random v: "
                       f"off by {diff[i]:.3e}, allowed {tol[i]:.3e}")

    # 4. sampled entries against their exact values.
    rows, cols = rng.integers(0, n, SAMPLES), rng.integers(0, n, SAMPLES)
    exact, mags = exact_entries(a, b, rows, cols)
    for s in range(SAMPLES):
        i, j, want = int(rows[s]), int(cols[s]), exact[s]
        if abs(rc[i, j] - want) > SLACK * n * U * mags[s]:
            raise Broken(f"{tag}: the reference's C[{i}][{j}] = {float(rc[i, j])!r} but the exact value is {want!r}")
        err, allowed = abs(dc[i, j] - want), SLACK * C_DESIGN * n * U * mags[s]
        if err > allowed:
            raise Disagree(f"{tag}: C[{i}][{j}] = {float(dc[i, j])!r} but the exact value is {want!r}: off by {err:.3e}, "
                           f"allowed {allowed:.3e} (2 n u sum|a||b|, relative {err / max(abs(want), 1e-300):.1e})")


def check(reference: Path, design: Path, seed: int) -> None:
    ref = read_sections(reference / "c.bin", "reference")
    des = read_sections(design / "c.bin", "design")
    if [h["n"] for h, _ in des] != [h["n"] for h, _ in ref]:
        raise Disagree(f"the design's sizes {[h['n'] for h, _ in des]} are not the reference's "
                       f"{[h['n'] for h, _ in ref]}")
    entropy = int.from_bytes(os.urandom(8), "little")
    rng = np.random.default_rng(entropy)
    try:
        for (rh, rc), (dh, dc) in zip(ref, des):
            check_size(seed, rh, rc, dh, dc, rng)
    except Disagree as e:
        raise Disagree(f"{e} [check entropy {entropy}]") from None


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: check.py REFERENCE_DIR DESIGN_DIR SEED", file=sys.stderr)
        return 2
    try:
        seed = int(argv[3])
    except ValueError:
        print(f"SEED must be an integer, not {argv[3]!r}")
        return 2
    try:
        check(Path(argv[1]), Path(argv[2]), seed)
    except Disagree as e:
        print(f"dgemm check failed: {e}")
        return 1
    except Broken as e:
        print(f"dgemm check: the reference's output is unusable: {e}")
        return 2
    print("dgemm check: the design agrees at every size")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
