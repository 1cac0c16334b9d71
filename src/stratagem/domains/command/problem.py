"""Owns a command problem as a Problem: the directory read into one bundle of files (its
`problem.toml`, the fixed files, the reference's editable files, the docs folder), kept as the
Problem's source so that a stored run holds the whole problem and its id changes with any file
of it. A reference whose files declare a template (docs/tune.md) is built at the template's
defaults: `Bundle.reference_files` renders it, `Bundle.reference_source_files` keeps it as
written (the template `--policy tune` uses by default). Standard library only (the worker
unpacks the same bundle)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stratagem.core.problem import Problem
from stratagem.core.template import TemplateError, render_defaults
from stratagem.domains.command.spec import PROBLEM_FILE, Baseline, Spec, parse_spec
from stratagem.errors import ProblemError

BUNDLE_FORMAT = "stratagem-command/1"
DOCS_MAX_BYTES = 256 * 1024
"""Docs beyond this (all files together) are left out of the bundle."""


@dataclass(frozen=True)
class Bundle:
    """A command problem's files (relative path -> text) and its parsed spec."""

    files: Mapping[str, str]
    spec: Spec

    def reference_source_files(self) -> dict[str, str]:
        """The reference's versions of the editable files as written (a template's declarations
        and placeholders kept)."""
        return {name: self.files[f"{self.spec.reference}/{name}"] for name in self.spec.editable}

    def reference_files(self) -> dict[str, str]:
        """The reference design as the harness builds it: its versions of the editable files, a
        template (any file declaring a parameter) rendered at its defaults.

        Raises:
            TemplateError: a template that cannot be read or whose defaults violate a
                constraint (`load_problem` refuses such a problem first).
        """
        return render_defaults(self.reference_source_files())

    def baseline_files(self, name: str) -> dict[str, str]:
        """A harness baseline's program: its versions of the editable files over the reference's."""
        b = next(x for x in self.spec.baselines if x.name == name)
        files = self.reference_files()
        files.update({rel: self.files[f"{b.files}/{rel}"] for rel in self.spec.editable
                      if f"{b.files}/{rel}" in self.files})
        return files

    def fixed_files(self) -> dict[str, str]:
        return {name: self.files[name] for name in self.spec.fixed}

    def docs(self) -> dict[str, str]:
        prefix = f"{self.spec.docs}/" if self.spec.docs else None
        return {k: v for k, v in self.files.items() if prefix and k.startswith(prefix)}


def claims(path: Path) -> bool:
    """A directory holding `problem.toml`, or that file itself."""
    p = Path(path)
    return (p.is_dir() and (p / PROBLEM_FILE).is_file()) or p.name == PROBLEM_FILE


def _read(root: Path, rel: str, key: str, where: str) -> str:
    p = root / rel
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProblemError(f"{where}: key `{key}`: {rel} is not in {root}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(f"{where}: key `{key}`: {rel} cannot be read as UTF-8 text: {e}") from None


def load_problem(path: str | Path) -> Problem:
    """Read a command problem directory (or its `problem.toml`).

    Raises:
        ProblemError: no `problem.toml`, a malformed one, or a file it names missing.
    """
    p = Path(path)
    root = p.parent if p.name == PROBLEM_FILE else p
    toml = root / PROBLEM_FILE
    where = str(toml)
    try:
        text = toml.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(f"{where}: cannot read the problem file: {e}") from None
    spec = parse_spec(text, where, root.resolve().name)
    files = {PROBLEM_FILE: text}
    for rel in spec.fixed:
        files[rel] = _read(root, rel, "files.fixed", where)
    for rel in spec.editable:
        files[f"{spec.reference}/{rel}"] = _read(root, f"{spec.reference}/{rel}", "files.reference", where)
    for b in spec.baselines:
        files |= _baseline_files(root, spec, b, where)
    try:
        Bundle(files, spec).reference_files()
    except TemplateError as e:
        raise ProblemError(f"{where}: key `files.reference`: {spec.reference}/{e}") from None
    if spec.docs:
        files |= _docs(root, spec.docs, where)
    return Problem(name=spec.name, domain="command", source=to_source(files), path=str(root),
                   size_constants={s.name: s.low for s in spec.sizes}, settings={})


def _baseline_files(root: Path, spec: Spec, b: Baseline, where: str) -> dict[str, str]:
    """A baseline's editable files, by their path in the bundle."""
    folder = root / b.files
    if not folder.is_dir():
        raise ProblemError(f"{where}: key `baselines.{b.name}.files`: {b.files} is not a folder in {root}")
    held = [rel for rel in spec.editable if (folder / rel).is_file()]
    if not held:
        raise ProblemError(f"{where}: key `baselines.{b.name}.files`: {b.files} holds none of the editable "
                           f"files ({', '.join(spec.editable)})")
    return {f"{b.files}/{rel}": _read(root, f"{b.files}/{rel}", f"baselines.{b.name}.files", where) for rel in held}


def _docs(root: Path, docs: str, where: str) -> dict[str, str]:
    """The docs folder's text files, by their path in the bundle, up to DOCS_MAX_BYTES in all."""
    folder = root / docs
    if not folder.is_dir():
        raise ProblemError(f"{where}: key `docs`: {docs} is not a folder in {root}")
    out, total = {}, 0
    for f in sorted(x for x in folder.rglob("*") if x.is_file()):
        try:
            body = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # binary docs are not for the agents
        total += len(body)
        if total > DOCS_MAX_BYTES:
            break
        out[f.relative_to(root).as_posix()] = body
    return out


def to_source(files: Mapping[str, str]) -> str:
    return json.dumps({"format": BUNDLE_FORMAT, "files": dict(sorted(files.items()))}, indent=1, ensure_ascii=False)


@functools.lru_cache(maxsize=16)
def bundle_of(source: str, where: str = "problem") -> Bundle:
    """The bundle a Problem's source holds, its spec parsed (once per source: every question
    asked of a problem reads it; read its `files`, never change them).

    Raises:
        ProblemError: not a command problem's bundle, or its `problem.toml` is malformed.
    """
    try:
        data = json.loads(source)
    except json.JSONDecodeError as e:
        raise ProblemError(f"{where}: not a command problem's bundle: {e}") from None
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT or not isinstance(data.get("files"), dict):
        raise ProblemError(f"{where}: not a command problem's bundle (format {BUNDLE_FORMAT})")
    files = {str(k): str(v) for k, v in data["files"].items()}
    if PROBLEM_FILE not in files:
        raise ProblemError(f"{where}: the bundle holds no {PROBLEM_FILE}")
    spec = parse_spec(files[PROBLEM_FILE], f"{where}/{PROBLEM_FILE}", where)
    return Bundle(files, spec)


def written_reference(problem: Problem) -> dict[str, str]:
    """The reference's editable files as written (`Domain.written_reference`): a template's
    declarations and placeholders kept (the harness builds it at its defaults; `--policy
    tune` tunes it by default)."""
    return bundle_of(problem.source, problem.path or problem.name).reference_source_files()


def parse_problem(source: str, *, name: str, path: str | None = None) -> Problem:
    """A stored command problem read back (the bundle checked again)."""
    b = bundle_of(source, path or name)
    return Problem(name=name, domain="command", source=source, path=path,
                   size_constants={s.name: s.low for s in b.spec.sizes}, settings={})
