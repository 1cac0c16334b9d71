"""The host half of the ferry (docs/usage.md, "GPUs that only batch jobs reach"): unpack the
answers a device call brought back (`benchmarks/ferry_serve.sh` packed them into fq.tgz) into
the queue folder the run waits on, and remove the requests they answer, so the run takes them
and nothing is served twice. Standard library only.

    python benchmarks/ferry_collect.py --queue runs/fq FILES_AT/fq.tgz

Only the archive's `responses/<id>.json` files are read; anything else in it is named and
skipped. An answer whose request already has one (an earlier call's) is not kept again.
Prints what it did; exit 1 when the archive cannot be read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path

from stratagem.evaluation.queue import QueueDir

ANSWER = re.compile(r"^(?:\./)?responses/([0-9a-f]{32})\.json$")


def collect(queue: Path, archive: Path) -> dict[str, int]:
    """Unpack `archive`'s answers into `queue`: counts of answers kept, already answered (not
    kept), skipped (not an answer) and the requests still waiting afterwards."""
    q = QueueDir(queue)
    kept = again = skipped = 0
    with tarfile.open(archive, "r:*") as tar:
        for m in tar:
            if m.isdir():
                continue
            named = ANSWER.match(m.name) if m.isfile() else None
            if named is None:
                print(f"ferry_collect: skipping {m.name!r} (not responses/<id>.json)", file=sys.stderr)
                skipped += 1
                continue
            f = tar.extractfile(m)
            try:
                body = json.loads(f.read().decode("utf-8")) if f is not None else None
            except (UnicodeDecodeError, ValueError) as e:
                print(f"ferry_collect: skipping {m.name}: not JSON ({e})", file=sys.stderr)
                skipped += 1
                continue
            if not isinstance(body, dict) or body.get("id") != named.group(1):
                print(f"ferry_collect: skipping {m.name}: not a queue answer", file=sys.stderr)
                skipped += 1
                continue
            if q.accept(body):
                kept += 1
            else:
                again += 1
    return {"kept": kept, "already_answered": again, "skipped": skipped, "waiting": q.count("requests")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("archive", type=Path, help="fq.tgz from the device call (ferry_serve.sh)")
    ap.add_argument("--queue", type=Path, required=True, help="the queue folder the run waits on (its --queue)")
    args = ap.parse_args(argv)
    try:
        n = collect(args.queue, args.archive)
    except (OSError, tarfile.TarError) as e:
        print(f"ferry_collect: cannot read {args.archive}: {e}", file=sys.stderr)
        return 1
    print(f"ferry_collect: {n['kept']} answers unpacked into {args.queue}, {n['already_answered']} already answered, "
          f"{n['skipped']} other files skipped; {n['waiting']} requests wait for the next call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
