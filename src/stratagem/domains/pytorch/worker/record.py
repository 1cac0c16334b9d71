"""Owns the record of candidate outputs that the judge checks (docs/integrity.md, "The judge").

The worker hands the judge the candidate's output of every call that decides correctness
(each correctness trial, the randomised-parameters trial, the off-distribution trial, and the
timed calls drawn for checking), one record per call, named by how its inputs are made. The
judge, a separate process that never runs candidate code, makes the same inputs from the
request's seeds, runs the reference itself, and compares.

On a GPU a record is a CUDA IPC description of the output (`KEY.ipc.json`, ipc.py), which the
judge reads in place on the device while the worker waits; nothing of the output crosses the
host. Otherwise it is a file (`KEY.pt`) read back with `torch.load(weights_only=True)`, which
rebuilds tensors and plain containers only, so a planted file cannot run code in the judge.

The names are the contract between the two sides: `trial-SEED`, `params-SEED`,
`offdist-SEED` (and `offdist-SEED-down`), `timed-ATTEMPT-CALL`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from stratagem.domains.pytorch.worker import ipc, runtime

SEED_BITS = 48
"""Derived seeds are this wide (valid for every generator `runtime.seed_all` seeds)."""
_TIMED = re.compile(r"^timed-(\d+)-(\d+)$")


def trial_key(seed: int) -> str:
    return f"trial-{seed}"


def params_key(seed: int) -> str:
    return f"params-{seed}"


def offdist_key(seed: int, scale: float) -> str:
    """The off-distribution trial's record at `scale` (above the visible inputs, or below)."""
    return f"offdist-{seed}" if scale >= 1 else f"offdist-{seed}-down"


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


ANSWER_TIMEOUT_S = 60.0
"""How long the worker waits for the judge to answer an IPC record (the judge may still be
starting); then it writes the record as a file instead."""
IPC_SUFFIX = ".ipc.json"


class Recorder:
    """Worker side: hands each deciding output to the judge (nothing when `directory` is None).

    On a GPU the output travels by CUDA IPC (ipc.py): the worker writes `KEY.ipc.json`, the
    judge maps the tensors, compares them on the device and answers `KEY.answer`, and the
    worker keeps them alive until then (its wait is the `wait` phase). Elsewhere, or when IPC
    cannot carry an output or the judge cannot open it, the output is written to `KEY.pt` (a
    host copy), which the judge reads when it needs it."""

    def __init__(self, directory: Path | None, device: str = "cpu",
                 waiting: Callable[[], AbstractContextManager[None]] | None = None) -> None:
        self.directory = directory
        self.device = device
        self._waiting = waiting or contextlib.nullcontext
        self.ipc_off: str | None = None if device.startswith("cuda") else "not a GPU evaluation"
        """Why outputs are written as files (None: they travel by IPC)."""
        self.transports: dict[str, str] = {}
        """key -> `ipc` or `file`."""
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def save(self, key: str, output: Any) -> None:
        if self.directory is None:
            return
        if self.ipc_off is None and self._by_ipc(key, output):
            self.transports[key] = "ipc"
            return
        path = self.directory / f"{key}.pt"
        tmp = path.with_name(path.name + ".tmp")  # whole or absent: the judge reads records as they come
        torch.save(to_cpu(output), tmp)
        os.replace(tmp, path)
        self.transports[key] = "file"

    def _by_ipc(self, key: str, output: Any) -> bool:
        assert self.directory is not None
        try:
            desc, keep = ipc.export(output)
        except ipc.Unshareable as e:
            self.ipc_off = str(e)
            return False
        runtime.synchronize(self.device)  # the output is complete before the judge reads it
        path = self.directory / f"{key}{IPC_SUFFIX}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(desc), encoding="utf-8")
        os.replace(tmp, path)
        answer = self.directory / f"{key}.answer"
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        pause = 0.001
        with self._waiting():
            while not answer.exists() and time.monotonic() < deadline:
                time.sleep(pause)
                pause = min(0.02, pause * 2)
        del keep
        # the copy's memory, which IPC keeps until the judge lets its mapping go, back now:
        # left to the allocator, each trial's copy stayed allocated into the next (memory.py)
        if torch.cuda.is_initialized():
            torch.cuda.ipc_collect()
        text = answer.read_text(encoding="utf-8").strip() if answer.exists() else ""
        if text == "received":
            return True
        path.unlink(missing_ok=True)
        self.ipc_off = (f"the judge could not read an IPC record ({text})" if text
                        else f"the judge did not answer an IPC record within {ANSWER_TIMEOUT_S:g} s")
        return False


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
    """The keys recorded as files."""
    return sorted(p.stem for p in directory.glob("*.pt")) if directory.is_dir() else []


def ipc_keys(directory: Path) -> list[str]:
    """The keys waiting as IPC records."""
    if not directory.is_dir():
        return []
    return sorted(p.name.removesuffix(IPC_SUFFIX) for p in directory.glob(f"*{IPC_SUFFIX}"))


def read_ipc(directory: Path, key: str, device: str) -> Any:
    """The output of IPC record `key`, mapped from the worker's memory.

    Raises:
        ValueError: unreadable or malformed (ipc.open_output)."""
    path = directory / f"{key}{IPC_SUFFIX}"
    if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
        raise ValueError(f"{key}: not an IPC record")
    try:
        desc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{key}: unreadable IPC record ({e})") from e
    return ipc.open_output(desc, device)


def answer_ipc(directory: Path, key: str, text: str) -> None:
    """Tell the worker the judge is done with IPC record `key` (`received`, or why not)."""
    path = directory / f"{key}.answer"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
