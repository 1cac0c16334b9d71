"""A newcomer's path (issue 43): a fresh clone, the README's first command as written, and every
view of its result checked against the run's last lines; then a command problem's design through
`stratagem eval`, as docs/command.md shows it. It installs the project and runs a real search
(about ten minutes on two cores), so it is marked `slow`: `pytest -m slow tests/test_newcomer.py`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)]


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    main_cmd, test_cmd = _readme_commands()[:2]
    assert main_cmd.startswith("python3 -m venv .venv") and "/stratagem run examples/" in main_cmd
    example = re.search(r"stratagem run (\S+)", main_cmd)
    assert example is not None and (ROOT / example.group(1)).is_file()
    assert test_cmd.startswith("python3 -m venv .venv") and test_cmd.endswith(".venv/bin/python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd.split(" && ")[0] + " && " + test_cmd.split(" && ")[1] in ci and "\n.venv/bin/python -m pytest\n" in ci


def _sh(cmd: str, cwd: Path, env: dict[str, str], timeout_s: float) -> str:
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.slow
@pytest.mark.timeout(3600)  # an install and a whole search
def test_a_newcomers_path_from_the_readme(tmp_path: Path) -> None:
    clone = tmp_path / "stratagem"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(STRATAGEM_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    out = _sh(_readme_commands()[0], clone, env, 3600)
    # the run's last lines name the run directory and the headline every view must repeat
    m = re.search(r"run directory: (\S+)", out)
    assert m is not None, out[-2000:]
    run_dir = clone / m.group(1) if not Path(m.group(1)).is_absolute() else Path(m.group(1))
    bin_ = clone / ".venv" / "bin" / "stratagem"
    shown = json.loads(_sh(f"{bin_} show {run_dir} --json", clone, env, 120))
    head = shown["headline"]
    flat = " ".join(out.split())
    for line in head["lines"]:
        assert " ".join(line.split()) in flat, line
    assert " ".join(_sh(f"{bin_} show {run_dir}", clone, env, 120).split()).count(" ".join(head["lines"][0].split())) == 1
    exported = _sh(f"{bin_} export {run_dir}", clone, env, 120)
    if head["beats_reference"]:
        assert head["design"] in exported and head["vs"]["reference"]["text"] in exported.split("\n\n")[0]
    else:
        assert "this is the reference itself" in exported
    _sh(f"{bin_} report {run_dir}", clone, env, 300)
    assert head["lines"][0].split(":")[0] in (run_dir / "report.html").read_text()
    # a command problem, as docs/command.md shows it: one design through the harness
    ex = clone / "examples" / "command" / "window_sums"
    ev = json.loads(_sh(f"{bin_} eval {ex} {ex / 'designs' / 'fast'} --json", clone, env, 900))
    assert ev["status"] in ("valid", "busy"), ev.get("failures")
