"""Owns the coding-agent backend of the writer seam: a command (Claude Code, Codex CLI, opencode,
Aider, a script) run once per writing turn in a fresh work directory.

The directory holds `problem/` (a copy of the problem: its file, or its directory), the current
design's files at the top level (PyTorch: `candidate.py`; a command problem: its editable
files), `TASK.md` (the role's instructions and curated context; also the command's stdin) and
`check.sh`, a self-check through `stratagem eval` whose results are unofficial (the official
evaluation happens after, in the harness's sandbox). The design is whatever of the design's
files the agent leaves there; none changed is a call that wrote nothing.

The command runs under `sh -c` in its own process group with stratagem's environment (the
agent keeps its credentials; candidate code still runs only in the harness). Past
`timeout_s` the whole group is killed. Each call is recorded as one query; its tokens and
money are read from the agent's output when it reports them (`parse_usage`: the formats are
listed there and in docs/agents.md); what it does not report is unknown (None: tokens and
`cost_usd`), never 0, and its transcript says so (`search/budget.py`: how budgets treat it). A failed, hung or silent agent is a failed call (`Written`
with an error), as a failed LLM call is.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratagem.agents.calls import prompt_hash
from stratagem.agents.fix_loop import Written
from stratagem.agents.models import RoleModels
from stratagem.agents.writers import WriteRequest, WriterRoutes
from stratagem.config import AgentCommandConfig, StratagemConfig
from stratagem.core.design import FILE_MARKER
from stratagem.core.problem import Problem
from stratagem.core.search import AgentCall
from stratagem.errors import ConfigError

TASK_FILE = "TASK.md"
CHECK_FILE = "check.sh"
PROBLEM_DIR = "problem"
OUTPUT_TAIL_CHARS = 20_000
"""Characters of the agent's stdout and stderr kept in the call's transcript (each)."""
KILL_GRACE_S = 5.0
"""Seconds a killed process group has to be reaped before the call gives up waiting."""


@dataclass(frozen=True)
class Usage:
    """What an agent reported about its own spend (None: not reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    format: str = ""
    """Which format it was read from: `usage-json` or `claude-code`."""


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def usage_of(obj: Mapping[str, Any]) -> Usage | None:
    """The usage one JSON object reports, if it reports any.

    - Claude Code's `--output-format json` result (`"type": "result"`): `total_cost_usd`, and
      `usage` with `input_tokens` (+ `cache_creation_input_tokens` + `cache_read_input_tokens`,
      counted as input) and `output_tokens`.
    - stratagem's own line: `{"usage": {"input_tokens": N, "output_tokens": N}, "cost_usd": X}`
      (either part may be missing; Codex CLI's `--json` `turn.completed` event has this `usage`).
    """
    u = obj.get("usage")
    usage: Mapping[str, Any] = u if isinstance(u, Mapping) else {}  # type: ignore[assignment]
    claude = obj.get("type") == "result" and "total_cost_usd" in obj
    inp = _int(usage.get("input_tokens"))
    if inp is not None:
        inp += sum(_int(usage.get(k)) or 0 for k in ("cache_creation_input_tokens", "cache_read_input_tokens"))
    out = _int(usage.get("output_tokens"))
    cost = _float(obj.get("total_cost_usd") if claude else obj.get("cost_usd"))
    if inp is None and out is None and cost is None:
        return None
    return Usage(inp, out, cost, "claude-code" if claude else "usage-json")


def parse_usage(stdout: str) -> Usage | None:
    """The usage the agent reported: the last line of stdout that is a JSON object reporting
    some (`usage_of`), else the whole stdout read as one JSON object; None when neither."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and (u := usage_of(obj)) is not None:  # type: ignore[arg-type]
            return u
    try:
        whole = json.loads(stdout)
    except ValueError:
        return None
    return usage_of(whole) if isinstance(whole, dict) else None  # type: ignore[arg-type]


def _reported_error(stdout: str) -> str | None:
    """Claude Code's own verdict on its run (`is_error` in the result object), when it says so."""
    for line in reversed(stdout.strip().splitlines()[-5:]):
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("type") == "result" and obj.get("is_error") is True:  # type: ignore[union-attr]
                return str(obj.get("result") or obj.get("subtype") or "the agent reported an error")  # type: ignore[union-attr]
    return None


@dataclass(frozen=True)
class RunResult:
    """How the command ended."""

    exit_code: int | None
    """None when it was killed at the limit."""
    stdout: str
    stderr: str
    latency_s: float
    timed_out: bool = False


async def run_command(cmd: str, cwd: Path, stdin: str, timeout_s: float) -> RunResult:
    """Run `cmd` under `sh -c` in `cwd`, in a new process group, feeding it `stdin`; past
    `timeout_s` (or on cancellation) the whole group is killed."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", cmd, cwd=cwd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    timed_out = False
    try:
        try:  # asyncio.timeout, not wait_for: 3.11's wait_for can lose a Ctrl-C that meets the end
            async with asyncio.timeout(timeout_s):
                out, err = await proc.communicate(stdin.encode())
        except TimeoutError:
            timed_out = True
            _kill_group(proc.pid)
            try:
                async with asyncio.timeout(KILL_GRACE_S):
                    out, err = await proc.communicate()
            except TimeoutError:
                out, err = b"", b""
    finally:
        if proc.returncode is None:  # cancelled: leave nothing running
            _kill_group(proc.pid)
    return RunResult(None if timed_out else proc.returncode, out.decode(errors="replace"),
                     err.decode(errors="replace"), time.monotonic() - start, timed_out)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def design_names(problem: Problem, files: Mapping[str, str]) -> list[str]:
    """The files an agent's design is read back from: the domain's editable files (a command
    problem's), else its main file, plus any the current design already has."""
    from stratagem.config import EvaluationConfig
    from stratagem.domains import get_domain

    domain = get_domain(problem.domain)
    facts = domain.open(problem, EvaluationConfig()).agent_facts()
    editable = facts.get("editable")
    names = [str(n) for n in editable] if isinstance(editable, list | tuple) else [domain.main_file(problem)]
    return [n for n in dict.fromkeys([*names, *files]) if _inside(n)]


def _inside(name: str) -> bool:
    """Whether a design's file name stays inside the work directory (relative, no `..`)."""
    p = Path(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts


def design_text(files: Mapping[str, str], main: str) -> str:
    """The design as the one text the Session takes: the main file's text alone when it is the
    only file, else every file under its `FILE_MARKER` line (so a lone non-main file keeps its name)."""
    if list(files) == [main]:
        return files[main]
    return "".join(f"{FILE_MARKER.format(name=n)}\n{t}{'' if t.endswith(chr(10)) else chr(10)}"
                   for n, t in sorted(files.items()))


def _task_text(req: WriteRequest, names: Sequence[str], timeout_s: float) -> str:
    shown = ", ".join(f"`{n}`" for n in names)
    return f"""# stratagem: {req.role} for `{req.problem.name}`

You are a coding agent working in this directory for stratagem, a search for faster code.

- **Your design is the file(s) {shown} in this directory** as you leave them when you exit
  ({"they hold the current design: change them" if req.files else "write them; a new design, so start from the problem's reference in `" + PROBLEM_DIR + "/`"}). Nothing else
  you write is read: code printed instead of written to those files is lost, whatever the
  instructions below say about the form of an answer.
- The problem is in `{PROBLEM_DIR}/` (read only; do not change it).
- `sh {CHECK_FILE}` runs stratagem's harness on your design (`stratagem eval`; it takes that
  command's options, e.g. `--json`): its result is
  **unofficial**, a self-check. The official evaluation happens after you exit, in the harness's
  sandbox, and only it counts.
- You have {timeout_s:g} seconds; past them your process group is killed and nothing is read.

## Your role's instructions

{req.instructions.strip() or "(none)"}

## The task

{req.prompt.strip()}
"""


def _check_script(names: Sequence[str], problem_path: Path, device: str) -> str:
    target = ".selfcheck" if problem_path.is_dir() else f".selfcheck/{names[0]}"
    copies = "\n".join(f'[ -f {shlex.quote(n)} ] && mkdir -p ".selfcheck/$(dirname {shlex.quote(n)})" '
                       f'&& cp {shlex.quote(n)} ".selfcheck/{n}"' for n in names)
    return f"""#!/bin/sh
# An UNOFFICIAL self-check of the design in this directory through `stratagem eval` (the harness's
# sandbox). The official evaluation happens after the agent exits; only it counts.
cd "$(dirname "$0")" || exit 2
rm -rf .selfcheck && mkdir -p .selfcheck
{copies}
echo "== stratagem self-check (UNOFFICIAL: the search evaluates the design again after you exit) ==" >&2
{shlex.quote(sys.executable)} -m stratagem eval {shlex.quote(str(problem_path))} {target} --device {shlex.quote(device)} "$@"
rc=$?
echo "== end of the UNOFFICIAL self-check (exit status $rc); only the search's own evaluation counts ==" >&2
exit $rc
"""


class CommandWriter:
    """The coding-agent backend (`[agents.command]`, `--agent-cmd`)."""

    def __init__(self, cfg: AgentCommandConfig, workroot: Path, *, device: str = "cpu") -> None:
        self.cfg = cfg
        self.workroot = Path(workroot)
        self.device = device
        """The device the self-check evaluates on (the run's `evaluation.device`)."""
        self._seq = itertools.count(1)

    @property
    def label(self) -> str:
        """The model name its calls are recorded under: `command:<program>`."""
        try:
            program = shlex.split(self.cfg.cmd)[0]
        except (ValueError, IndexError):
            program = self.cfg.cmd.split()[0] if self.cfg.cmd.split() else "?"
        return f"command:{Path(program).name}"

    def prepare(self, req: WriteRequest) -> tuple[Path, list[str], str]:
        """A fresh work directory for `req`: (its path, the design's file names, the task text)."""
        self.workroot.mkdir(parents=True, exist_ok=True)
        who = "".join(c if c.isalnum() or c in "-_." else "_" for c in req.worker) or "writer"
        while True:
            d = self.workroot / f"{next(self._seq):04d}-{who}-{req.role}"
            if not d.exists():
                break
        d.mkdir(parents=True)
        pdir = d / PROBLEM_DIR
        src = Path(req.problem.path) if req.problem.path else None
        if src is not None and src.is_dir():
            shutil.copytree(src, pdir, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        else:
            pdir.mkdir()
            name = src.name if src is not None else "problem.py"
            (pdir / name).write_text(req.problem.source, encoding="utf-8")
        problem_path = src.resolve() if src is not None and src.exists() else pdir / (src.name if src else "problem.py")
        names = design_names(req.problem, req.files)
        for n, text in req.files.items():
            if not _inside(n):
                continue
            (d / n).parent.mkdir(parents=True, exist_ok=True)
            (d / n).write_text(text, encoding="utf-8")
        task = _task_text(req, names, self.cfg.timeout_s)
        (d / TASK_FILE).write_text(task, encoding="utf-8")
        (d / CHECK_FILE).write_text(_check_script(names, problem_path, self.device), encoding="utf-8")
        (d / CHECK_FILE).chmod(0o755)
        return d, names, task

    async def write(self, req: WriteRequest) -> Written:
        meter, refused = req.admitted()
        if refused is not None:
            return refused
        try:
            d, names, task = self.prepare(req)
            res = await run_command(self.cfg.cmd, d, task, self.cfg.timeout_s)
        except BaseException:
            if meter is not None:
                meter.close()
            raise
        left = {n: (d / n).read_text(encoding="utf-8", errors="replace") for n in names if (d / n).is_file()}
        changed = {n: t for n, t in left.items() if req.files.get(n) != t}
        usage = parse_usage(res.stdout)
        kind, error = self._failure(res, left, changed)
        call = AgentCall(
            role=req.role, model=self.label, prompt_hash=prompt_hash(req.instructions, req.prompt),
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            requests=1, cost_usd=usage.cost_usd if usage else None, latency_s=res.latency_s,
            ok=kind is None, error=None if kind is None else f"{kind}: {error}",
            messages_json=json.dumps(self._transcript(d, res, usage, sorted(changed), task)),
        )
        if meter is not None:
            meter.close(call.requests)
        if req.record is not None:
            req.record(call)
        tokens = (call.input_tokens or 0) + (call.output_tokens or 0)  # the fix loop's count: reported only
        if kind is not None:
            return Written(None, tokens, kind, error)
        return Written(design_text(left, names[0]), tokens)

    def _failure(self, res: RunResult, left: Mapping[str, str], changed: Mapping[str, str]) -> tuple[str | None, str]:
        if res.timed_out:
            return "timeout", f"the agent command ran past {self.cfg.timeout_s:g} s and was killed ([agents.command] timeout_s)"
        if res.exit_code != 0:
            tail = (res.stderr.strip() or res.stdout.strip())[-300:]
            return "agent_failed", f"the agent command exited with status {res.exit_code}: {tail}"
        if (reported := _reported_error(res.stdout)) is not None:
            return "agent_failed", f"the agent reported an error: {reported[:300]}"
        if not changed or not any(t.strip() for t in left.values()):
            return "no_output", "the agent command left no design (none of the design's files was written or changed)"
        return None, ""

    def _transcript(self, d: Path, res: RunResult, usage: Usage | None, changed: list[str], task: str) -> dict[str, Any]:
        return {
            "kind": "agent_command", "cmd": self.cfg.cmd, "workdir": str(d), "exit_code": res.exit_code,
            "timed_out": res.timed_out, "latency_s": res.latency_s, "files_written": changed,
            "usage": None if usage is None else {"input_tokens": usage.input_tokens,
                                                 "output_tokens": usage.output_tokens,
                                                 "cost_usd": usage.cost_usd, "format": usage.format},
            "usage_note": "" if usage is not None else "unknown: the agent reported no usage (its tokens and "
                                                      "price are recorded as unknown, and a max_tokens budget "
                                                      "stops the run)",
            "task": task, "stdout_tail": res.stdout[-OUTPUT_TAIL_CHARS:], "stderr_tail": res.stderr[-OUTPUT_TAIL_CHARS:],
        }


def command_routes(cfg: StratagemConfig, workdir: Path) -> WriterRoutes | None:
    """The writing roles `[agents.command]` takes, with their `CommandWriter` (work directories
    under `<workdir>/agents/command/`); None when no command is configured."""
    c = cfg.agents.command
    if c is None:
        return None
    writer = CommandWriter(c, Path(workdir) / "agents" / "command", device=cfg.evaluation.device)
    return WriterRoutes(writer, frozenset(c.roles))


def no_models() -> RoleModels:
    """The models of a policy whose every role the command takes (`--agent-cmd` without
    `--model`): one that fails any request it is asked, naming the cause (never asked while the
    command takes the roles)."""
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from stratagem.agents.models import ModelPool

    def refuse(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        raise ConfigError("no model is configured (agents.model, --model) and [agents.command] does not take this role")

    return RoleModels(default=ModelPool([FunctionModel(refuse, model_name="none")], labels=["none"]))
