"""A scripted attacker for `stratagem redteam --agent-cmd` (no model, no agent): each call
writes the next candidate of a list into the work directory's `candidate.py` (or the file named
by the second argument: a command problem's editable file), headed by the
attempt's declaration (`# exploit: <the file's stem>`, `none_<stem>` for an honest one). The list and a counter live in the
folder given as the first argument (`attempts.txt`, one candidate path per line; `next`),
shared by calls running at once under a lock; each call's TASK.md is kept there as
`task-<n>.md`. Past the list's end it writes nothing."""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path


def main(folder: str, name: str = "candidate.py") -> int:
    d = Path(folder)
    paths = [p for p in (d / "attempts.txt").read_text().splitlines() if p.strip()]
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counter = d / "next"
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
    task = Path("TASK.md")
    if task.exists():  # what the attacker was asked, for the tests to read
        (d / f"task-{n}.md").write_text(task.read_text())
    if n >= len(paths):
        return 0
    src = Path(paths[n])
    honest = "honest" in src.parts
    declared = "nothing: honest" if honest else "the corpus manifest's check"
    exploit = f"none_{src.stem}" if honest else src.stem
    Path(name).write_text(f"# exploit: {exploit}\n# caught-by: {declared}\n" + src.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
