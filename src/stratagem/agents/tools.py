"""Owns the base tools of an agent that works over several turns (the Implementor): a sandboxed
work directory and a planning scratchpad. Roles with no use for them (the Strategist, the
Analyst, PIKE's one-shot agents) are not offered them. Also the harness's tools
(`probe_toolset`): `check` for the Implementor and `profile` for it, the Strategist and the
Analyst, where the problem's domain offers them, run through the run's Session
(`Session.probe`: the evaluator, in the sandbox, counted in the run's spend).

The work directory confines `read_file`, `write_file` and `list_files` to one folder: absolute
paths, `..` components and symlinks leading outside are refused. The scratchpad keeps short notes
for the length of one agent's life. Each tool's description says what it is for (a version
kept before a risky change survives the conversation being summarized). Tool failures come
back to the model as text (it can correct itself); they never raise out of a run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic_ai import FunctionToolset, RunContext

from stratagem.core.search import ProbeMode, Session

MAX_READ_CHARS = 60_000
"""A file read through the tool is cut to this many characters."""

MAX_WRITE_CHARS = 500_000
MAX_LIST_ENTRIES = 200
MAX_NOTES = 50


class WorkdirError(ValueError):
    """A path that would leave the work directory, or an unusable file."""


@dataclass(frozen=True)
class Workdir:
    """A folder an agent may read and write; created on first write."""

    root: Path

    def resolve(self, rel: str) -> Path:
        """The absolute path of `rel` inside the work directory.

        Raises:
            WorkdirError: absolute path, `..` component, or a symlink leading outside.
        """
        if not rel or not rel.strip():
            raise WorkdirError("empty path")
        pure = PurePosixPath(rel.replace("\\", "/"))
        if pure.is_absolute() or rel.startswith("~"):
            raise WorkdirError(f"{rel!r}: absolute paths are not allowed; use a relative path")
        if ".." in pure.parts:
            raise WorkdirError(f"{rel!r}: '..' is not allowed")
        root = self.root.resolve()
        target = (root / Path(*pure.parts)).resolve()
        if target != root and not target.is_relative_to(root):
            raise WorkdirError(f"{rel!r} leads outside the work directory")
        return target

    def read(self, rel: str, max_chars: int = MAX_READ_CHARS) -> str:
        path = self.resolve(rel)
        if not path.is_file():
            raise WorkdirError(f"{rel!r}: no such file")
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n... [{len(text) - max_chars} more characters]"
        return text

    def write(self, rel: str, text: str) -> int:
        if len(text) > MAX_WRITE_CHARS:
            raise WorkdirError(f"{rel!r}: more than {MAX_WRITE_CHARS} characters")
        path = self.resolve(rel)
        if path == self.root.resolve() or path.is_dir():
            raise WorkdirError(f"{rel!r} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return len(text)

    def list(self, rel: str = ".") -> list[str]:
        base = self.root.resolve() if rel in ("", ".", "./") else self.resolve(rel)
        if not base.is_dir():
            return []
        root = self.root.resolve()
        out = []
        for p in sorted(base.rglob("*")):
            if p.is_symlink():
                continue
            rel_path = p.relative_to(root).as_posix()
            out.append(rel_path + ("/" if p.is_dir() else ""))
            if len(out) >= MAX_LIST_ENTRIES:
                out.append("... (more entries not shown)")
                break
        return out


Probe = Callable[[ProbeMode, str], Awaitable[str]]
"""A writer's tool run (`Session.probe` for one author): the mode and its target -> the text."""


@dataclass
class BaseDeps:
    """What the base tools need; every role's deps extend it."""

    workdir: Workdir
    notes: list[str] = field(default_factory=list)
    probe: Probe | None = None
    """Runs the harness's tools (`probe_toolset`); None: the role was given none."""
    probes: tuple[ProbeMode, ...] = ()
    """The harness's tools this role is offered (those the problem's domain offers, that the
    role may use)."""


def session_probe(session: Session, author: str) -> Probe:
    """`session.probe` for `author` (whose name the live view shows beside each run)."""
    async def run(mode: ProbeMode, target: str) -> str:
        return await session.probe(mode, target, author=author)
    return run


def probe_toolset(modes: Sequence[ProbeMode]) -> FunctionToolset[Any]:
    """The harness's tools among `modes` (those the problem's domain offers; none: an empty
    toolset), for an agent whose deps are a `BaseDeps` with a `probe`."""
    ts: FunctionToolset[Any] = FunctionToolset()

    async def run(ctx: RunContext[BaseDeps], mode: ProbeMode, target: str) -> str:
        if ctx.deps.probe is None:
            return f"`{mode}` is not available here"
        return await ctx.deps.probe(mode, target)

    if "check" in modes:
        @ts.tool
        async def check(ctx: RunContext[BaseDeps], code: str) -> str:
            """Build `code` and run it on the hidden inputs against the reference before you
            answer: compile errors, wrong shapes and mismatches, in seconds. No timing and not
            a verdict (your answer is evaluated in full); each call counts in the run's budget
            of device time, so check a version you are unsure of, not every small edit.

            Args:
                code: the complete design, exactly as you would answer it.
            """
            return await run(ctx, "check", code)

    if "profile" in modes:
        @ts.tool
        async def profile(ctx: RunContext[BaseDeps], target: str = "reference") -> str:
            """Where one call's time goes, under a profiler, in the harness's sandbox: on a GPU
            the heaviest kernels with their device time, on the CPU the heaviest operators,
            with the total beside the roofline floor when it is known. Counts in the run's
            budget of device time.

            Args:
                target: `reference`, a design's id (6 or more characters), or a design's
                    complete code.
            """
            return await run(ctx, "profile", target)

    return ts


def base_toolset() -> FunctionToolset[Any]:
    """The file and scratchpad tools, for an agent whose deps are a `BaseDeps`."""
    ts: FunctionToolset[Any] = FunctionToolset()

    @ts.tool
    def read_file(ctx: RunContext[BaseDeps], path: str) -> str:
        """Read back a file you wrote to your private work directory (a version of your code you
        kept, say). Nothing there is evaluated: only your answer is.

        Args:
            path: a path relative to the work directory.
        """
        try:
            return ctx.deps.workdir.read(path)
        except (WorkdirError, OSError) as e:
            return f"error: {e}"

    @ts.tool
    def write_file(ctx: RunContext[BaseDeps], path: str, content: str) -> str:
        """Keep a file in your private work directory (replacing it if it exists): for example a
        version that passed before you try a risky change, since a long conversation is
        summarized and older code in it may be dropped. Nothing there is evaluated.

        Args:
            path: a path relative to the work directory.
            content: the whole file content.
        """
        try:
            n = ctx.deps.workdir.write(path, content)
        except (WorkdirError, OSError) as e:
            return f"error: {e}"
        return f"wrote {n} characters to {path}"

    @ts.tool
    def list_files(ctx: RunContext[BaseDeps], path: str = ".") -> str:
        """List the files you kept in your private work directory (or a folder in it).

        Args:
            path: a folder relative to the work directory.
        """
        try:
            entries = ctx.deps.workdir.list(path)
        except (WorkdirError, OSError) as e:
            return f"error: {e}"
        return "\n".join(entries) if entries else "(empty)"

    @ts.tool
    def note(ctx: RunContext[BaseDeps], text: str) -> str:
        """Add a note to your planning scratchpad: what you tried, what failed and why, what to
        try next; it lasts for this conversation, across attempts and summaries.

        Args:
            text: the note.
        """
        notes = ctx.deps.notes
        notes.append(text.strip())
        del notes[:-MAX_NOTES]
        return f"noted ({len(notes)} notes)"

    @ts.tool
    def read_notes(ctx: RunContext[BaseDeps]) -> str:
        """Read your planning scratchpad (the notes you added in this conversation)."""
        notes = ctx.deps.notes
        return "\n".join(f"{i}. {n}" for i, n in enumerate(notes, 1)) if notes else "(no notes)"

    return ts
