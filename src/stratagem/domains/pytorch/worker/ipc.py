"""Owns handing a GPU output from the worker to the judge without a host copy: CUDA IPC.

Worker-side and judge-side (imports torch). A recorded output on a GPU is described by the
CUDA IPC handles of its tensors' storages (`export`), written as JSON; the judge maps them
into its own process (`open_output`), reads them on the device, and answers; the worker keeps
the tensors alive until it has the answer. Nothing crosses the host: a 6.4 GB output costs
the judge its comparison only, where a file record cost a device-to-host copy, a write and a
read back (about 12 s on an H200 machine).

The description is data only (integers, dtype names, base64 handles), never a pickle, and the
judge checks every field against the storage it maps before it builds a tensor on it, so a
forged description can make the judge fail (which fails the stage closed) but not run code.

What is shared is a device copy of each output tensor, never the program's own storage:
`_share_cuda_` replaces a storage's deleter, which breaks programs that manage their outputs'
memory (CUDA graph trees). The copy costs one output's memory while the judge reads it
(`memory.py` plans for it) and a device-to-device copy (about 3 ms for 6.4 GB on an H200).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import torch

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.complex64, torch.complex128)}


class Unshareable(Exception):
    """The output cannot travel by IPC (a leaf that is not a CUDA tensor, or IPC failed)."""


def _b64(x: Any) -> Any:
    return base64.b64encode(x).decode("ascii") if isinstance(x, bytes) else x


def _unb64(x: Any) -> Any:
    return base64.b64decode(x) if isinstance(x, str) else x


def export(out: Any) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """The JSON description of `out` (tensors by IPC handle, containers and plain values by
    value) and the tensors that must stay alive until the judge has answered.

    Raises:
        Unshareable: a leaf is not a dense CUDA tensor of a known dtype, or sharing failed.
    """
    keep: list[torch.Tensor] = []

    def enc(x: Any) -> dict[str, Any]:
        if isinstance(x, torch.Tensor):
            t = x.detach()
            dtype = str(t.dtype).removeprefix("torch.")
            if not t.is_cuda or t.layout != torch.strided or dtype not in DTYPES or type(x) is not torch.Tensor:
                raise Unshareable(f"a {type(x).__name__} on {t.device} ({t.dtype}) cannot travel by IPC")
            if t.numel() == 0:
                return {"empty": {"shape": list(t.shape), "dtype": dtype}}
            # a copy the harness owns: sharing a storage swaps its deleter for IPC's reference
            # counting, and storages the program still owns (CUDA graph trees' pools, torch.compile
            # with mode="reduce-overhead") then fail its next call ("Expected standard deleter")
            t = t.clone()
            try:
                dev, handle, size_b, off_b, rc_h, rc_off, ev_h, ev_sync = t.untyped_storage()._share_cuda_()
            except Exception as e:  # noqa: BLE001 - any failure: the file record instead
                raise Unshareable(f"CUDA IPC export failed: {type(e).__name__}: {e}") from e
            keep.append(t)
            return {"tensor": {
                "dtype": dtype, "shape": list(t.shape), "stride": list(t.stride()), "offset": t.storage_offset(),
                "device": int(dev), "handle": _b64(handle), "size_bytes": int(size_b), "offset_bytes": int(off_b),
                "ref_counter": _b64(rc_h), "ref_counter_offset": int(rc_off), "event": _b64(ev_h),
                "event_sync": bool(ev_sync)}}
        if isinstance(x, list | tuple):
            return {"list" if isinstance(x, list) else "tuple": [enc(v) for v in x]}
        if x is None or isinstance(x, bool | int | float | str):
            return {"value": x}
        return {"value": repr(x)}  # not a tensor: the comparison reports the type mismatch

    return enc(out), keep


def open_output(desc: Mapping[str, Any], device: str) -> Any:
    """The output `desc` describes, its tensors mapped from the worker's memory (read only by
    convention: the judge never writes them).

    Raises:
        ValueError: a malformed description, or a mapping that failed.
    """
    if not isinstance(desc, Mapping) or len(desc) != 1:
        raise ValueError("malformed IPC record")
    (kind, body), = desc.items()
    if kind in ("list", "tuple"):
        if not isinstance(body, list):
            raise ValueError("malformed IPC record: a container without items")
        items = [open_output(v, device) for v in body]
        return items if kind == "list" else tuple(items)
    if kind == "value":
        return body
    if kind == "empty":
        return torch.empty(_ints(body.get("shape")), dtype=_dtype(body.get("dtype")), device=device)
    if kind != "tensor" or not isinstance(body, Mapping):
        raise ValueError(f"malformed IPC record: {kind!r}")
    dtype = _dtype(body.get("dtype"))
    shape, stride = _ints(body.get("shape")), _ints(body.get("stride"))
    offset, size_b = int(body.get("offset", -1)), int(body.get("size_bytes", -1))
    if len(shape) != len(stride) or offset < 0 or size_b <= 0:
        raise ValueError("malformed IPC record: shape, stride, offset or size")
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    if extent * torch.empty((), dtype=dtype).element_size() > size_b:
        raise ValueError("malformed IPC record: the tensor reaches past its storage")
    try:
        torch.cuda._lazy_init()
        storage = torch.UntypedStorage._new_shared_cuda(
            int(body["device"]), _unb64(body["handle"]), size_b, int(body["offset_bytes"]),
            _unb64(body["ref_counter"]), int(body["ref_counter_offset"]), _unb64(body["event"]),
            bool(body["event_sync"]))
        return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)
    except Exception as e:  # noqa: BLE001 - the caller fails closed or falls back
        raise ValueError(f"CUDA IPC open failed: {type(e).__name__}: {e}") from e


def _dtype(name: Any) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"malformed IPC record: dtype {name!r}")
    return DTYPES[name]


def _ints(xs: Any) -> list[int]:
    if not isinstance(xs, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in xs):
        raise ValueError("malformed IPC record: sizes must be non-negative integers")
    return list(xs)
