"""Owns the exception hierarchy: exceptions are for bugs and broken infrastructure only.

A candidate's failure (wrong answer, crash, hang, compile error) is never an exception: it is
data, a validator result inside a verdict. What is raised here stops the command that hit it.
"""

from __future__ import annotations

from pathlib import Path


class StratagemError(Exception):
    """Base class of every error stratagem raises on purpose."""


class ConfigError(StratagemError):
    """A configuration value, CLI option or config file is invalid (exit code 2)."""


class ProblemError(StratagemError):
    """A problem file is malformed: syntax error, missing names, wrong signatures (exit code 2)."""


class CandidateError(StratagemError):
    """A candidate file cannot be read at all (missing, not UTF-8); exit code 2.

    A candidate that parses but is wrong is not an error: it gets an `invalid` verdict.
    """


class ModelUnreachable(StratagemError):
    """An LLM the run needs did not answer its preflight request (exit code 1)."""


class StoreError(StratagemError):
    """The run database is unreadable, from a newer schema, or inconsistent."""


class HarnessError(StratagemError):
    """The evaluation harness itself failed (worker could not start, protocol broken)."""


class QueueStalled(StratagemError):
    """A run waited on its queue folder longer than `evaluation.queue_wait_s` with no sign of a
    worker (no claim, lease, progress or answer): the run stops cleanly, marked interrupted, its
    requests left queued, and `stratagem resume` continues it (exit code 75, "try again later")."""


class MissingExtra(ConfigError):
    """A feature needs an optional dependency that is not installed (exit code 2): the message
    names the extra and the pip command that installs it."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(f"{feature} needs {module}, which is not installed: pip install 'stratagem[{extra}]'")
        self.feature, self.extra, self.module = feature, extra, module


def read_text(path: Path, what: str, error: type[StratagemError]) -> str:
    """A file's UTF-8 text (`what`: the file's kind, as messages name it: `problem file`).

    Raises:
        error: the file is missing, unreadable or not UTF-8.
    """
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise error(f"{what} not found: {path}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"cannot read {what} {path}: {e}") from e


def import_extra(module: str, extra: str, feature: str) -> object:
    """`module`, imported (a feature's optional dependency).

    Raises:
        MissingExtra: it is not installed; the message names `extra` and the pip command.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(feature, extra, module) from None
