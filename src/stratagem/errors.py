"""Owns the exception hierarchy: exceptions are for bugs and broken infrastructure only.

A candidate's failure (wrong answer, crash, hang, compile error) is never an exception: it is
data, a validator result inside a verdict. What is raised here stops the command that hit it.
"""

from __future__ import annotations


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


class WorkerLost(HarnessError):
    """A worker process vanished or returned output that breaks the protocol."""
