"""Owns the record of candidate outputs that the judge checks (docs/integrity.md, "The judge").

The worker saves the candidate's output of every call that decides correctness (each
correctness trial, the randomised-parameters trial, the off-distribution trial, and the
timed calls drawn for checking) into the record directory, one file per call, named by how
its inputs are made. The judge, a separate process that never runs candidate code, makes
the same inputs from the request's seeds, runs the reference itself, and compares.

The names are the contract between the two sides: `trial-SEED`, `params-SEED`,
`offdist-SEED`, `timed-ATTEMPT-CALL`. Files are read back with `torch.load(weights_only=True)`,
which rebuilds tensors and plain containers only, so a planted file cannot run code in the
judge.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import torch

from stratagem.domains.pytorch.worker import runtime

SEED_BITS = 48
"""Derived seeds are this wide (valid for every generator `runtime.seed_all` seeds)."""
_TIMED = re.compile(r"^timed-(\d+)-(\d+)$")


def trial_key(seed: int) -> str:
    return f"trial-{seed}"


def params_key(seed: int) -> str:
    return f"params-{seed}"


def offdist_key(seed: int) -> str:
    return f"offdist-{seed}"


def timed_key(attempt: int, call: int) -> str:
    return f"timed-{attempt}-{call}"


def derived_seed(timing_seed: int, *path: object) -> int:
    """A seed for the inputs named by `path`, keyed by the request's secret `timing_seed`
    (BLAKE2b with it as the key). A candidate can read the seed of the inputs it is called
    with (`torch.initial_seed()` after `seed_all`), so seeds that followed one another would
    let it compute the next timed calls' inputs, and their outputs, while untimed: the keyed
    hash makes every seed independent of the others for anyone without `timing_seed`, which
    itself seeds no input."""
    key = (timing_seed % 2**64).to_bytes(8, "little")
    msg = ":".join(str(x) for x in path).encode()
    digest = hashlib.blake2b(msg, key=key, digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**SEED_BITS


def timed_seed(timing_seed: int, attempt: int, call: int) -> int:
    """The seed of timed call `call` of timing attempt `attempt` (0-based): every call of
    every attempt, re-timings included, gets inputs of its own, unpredictable from any other's."""
    return derived_seed(timing_seed, "timed", attempt, call)


def warm_seed(timing_seed: int, index: int) -> int:
    """The seed of warm-up input set `index` (also the inputs of the call that compiles a
    candidate again before timing)."""
    return derived_seed(timing_seed, "warm", index)


def parse_timed(key: str) -> tuple[int, int] | None:
    """(attempt, call) of a `timed-` key, or None."""
    m = _TIMED.match(key)
    return (int(m.group(1)), int(m.group(2))) if m else None


class Recorder:
    """Worker side: saves outputs under `directory` (nothing when it is None)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def save(self, key: str, output: Any) -> None:
        if self.directory is None:
            return
        torch.save(to_cpu(output), self.directory / f"{key}.pt")


def to_cpu(out: Any, keep_other: bool = False) -> Any:
    """Tensors moved to the CPU (copies), containers rebuilt; anything else kept when
    `keep_other`, else its repr (a record holds tensors and plain values only)."""
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu").clone()
    if isinstance(out, list | tuple):
        items = [to_cpu(x, keep_other) for x in out]
        return items if isinstance(out, list) else tuple(items)
    if keep_other or out is None or isinstance(out, int | float | bool | str):
        return out
    return repr(out)  # not a tensor: the judge's comparison reports the type mismatch


def keys(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.pt")) if directory.is_dir() else []


def load(directory: Path, key: str, device: str, max_bytes: int) -> Any:
    """The recorded output `key`, moved to `device`.

    Raises:
        FileNotFoundError: nothing was recorded under `key`.
        ValueError: the file is larger than `max_bytes` or not tensors and containers.
    """
    path = directory / f"{key}.pt"
    if not path.is_file() or path.is_symlink():
        raise FileNotFoundError(key)
    if path.stat().st_size > max_bytes:
        raise ValueError(f"{key}: {path.stat().st_size} bytes, over the limit of {max_bytes}")
    try:
        out = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:
        raise ValueError(f"{key}: not a recorded output ({runtime.one_line(e)})") from e
    return to_device(out, device)


def to_device(out: Any, device: str) -> Any:
    if isinstance(out, torch.Tensor):
        return out.to(device)
    if isinstance(out, list | tuple):
        return type(out)(to_device(x, device) for x in out)
    return out
