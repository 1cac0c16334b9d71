"""Make a Ray wheel small enough to carry to the lent GPU machine (issue 29's H200 benchmark).

The device tool carries at most 64 MiB, and Ray's wheel is 79 MB, 32 MB of which is `ray/jars`
(Ray's Java workers, which a Python-only cluster never starts). This downloads Ray and its
dependencies for the device's Python (3.12 by default), repacks Ray without `ray/jars` (its
RECORD rewritten to match, so pip installs it as any wheel), and prints the folder's size. Carry
the folder with the pydantic wheels of `benchmarks/gpu_session.sh`, leaving out the agents'
wheels, which the executor benchmark does not import.

Usage (here, with network; writes the wheels into FOLDER, default .whl-ray):
    python benchmarks/ray_wheel.py [--folder .whl-ray] [--python-version 3.12] [--ray-version X]
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

DROP = ("ray/jars/",)
"""What a Python-only Ray never loads."""


def strip(wheel: Path, drop: tuple[str, ...] = DROP) -> Path:
    """`wheel` repacked without the files under `drop`, its RECORD listing what is left."""
    out = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        rows = []
        for info in src.infolist():
            if info.filename.startswith(drop) or info.filename == record_name:
                continue
            data = src.read(info.filename)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((info.filename, f"sha256={digest}", str(len(data))))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([*rows, (record_name, "", "")])
        dst.writestr(record_name, buf.getvalue())
    out.replace(wheel)
    return wheel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, default=Path(".whl-ray"))
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--ray-version", default=None, help="default: the Ray installed here")
    args = ap.parse_args(argv)
    version = args.ray_version
    if version is None:
        import ray

        version = ray.__version__
    args.folder.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version",
            args.python_version, "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform",
            "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "any", "-d",
            str(args.folder)]
    subprocess.run([*base, f"ray=={version}"], check=True)
    for numpy in args.folder.glob("numpy-*.whl"):  # the device has its own
        numpy.unlink()
    for wheel in args.folder.glob("ray-*.whl"):
        before = wheel.stat().st_size
        strip(wheel)
        print(f"{wheel.name}: {before / 1e6:.1f} MB -> {wheel.stat().st_size / 1e6:.1f} MB")
    total = sum(p.stat().st_size for p in args.folder.glob("*.whl"))
    print(f"{args.folder}: {total / 2**20:.1f} MiB in {len(list(args.folder.glob('*.whl')))} wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
