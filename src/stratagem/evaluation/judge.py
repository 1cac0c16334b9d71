"""Owns the judge entry point: `python -P -m stratagem.evaluation.judge REQUEST GO RECORD RESPONSE PROGRESS`.

Runs in the sandbox beside the worker, in a process and directory of its own where no
candidate code runs (docs/integrity.md, "The judge"). REQUEST is the parent's copy of the
request; GO the file the parent writes once the worker has ended ({nonce, claims}: the
worker's response, untrusted); RECORD the directory of candidate outputs the worker
recorded. Writes {request_id, nonce, ok, failures, checked, notes} to RESPONSE atomically and
the same phase events as a worker to PROGRESS. Imports only the standard library and the
domain's judge module, the one the request names (`judge_module`: the domain declares it,
`Domain.judge_module`, and the parent writes it into the request).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratagem.evaluation.worker import serve


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print("usage: python -m stratagem.evaluation.judge REQUEST GO RECORD RESPONSE PROGRESS", file=sys.stderr)
        return 2
    request_path, go_path, record_dir, response_path, progress_path = (Path(a) for a in argv)
    request = json.loads(request_path.read_text(encoding="utf-8"))
    if not request.get("judge_module"):
        print(f"domain {request.get('domain')!r} names no judge module", file=sys.stderr)
        return 3

    def run(module: Any, emit: Callable[[str, dict[str, Any]], None]) -> dict[str, Any]:
        return {"request_id": request["request_id"], **module.run_judge(request, go_path, record_dir, Path.cwd(), emit)}

    serve(str(request["judge_module"]), run, progress_path, response_path, done=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
