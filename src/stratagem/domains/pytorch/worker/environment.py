"""Owns the worker's description of where it ran: device, versions, CPU features, for the
response's `environment` (the agents' environment block and the caches' keys read it).

Worker-side only (imports torch).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

from stratagem.worker_api.stages import cpu_name


def describe(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "hostname": platform.node(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(
            device_name=torch.cuda.get_device_name(0),
            cuda=torch.version.cuda,
            capability=f"{props.major}.{props.minor}",
            memory_gb=round(props.total_memory / 2**30, 1),
            visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        )
    else:
        env.update(device_name=cpu_name(), threads=torch.get_num_threads(), cpu_capability=_cpu_capability(),
                   isa=_isa())
    env.update(_versions())
    return env


ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
             "amx_bf16", "asimd", "sve")
"""The instruction-set flags worth telling an agent about (from /proc/cpuinfo)."""


def _isa() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in ISA_FLAGS if f in have]
    except OSError:
        pass
    return []


def _cpu_capability() -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - older torch: unknown
        return ""


def _versions() -> dict[str, str]:
    """Triton's and the C++ compiler's versions (without importing triton: it is slow)."""
    from importlib import metadata

    out: dict[str, str] = {}
    try:
        out["triton"] = metadata.version("triton")
    except metadata.PackageNotFoundError:
        pass
    try:
        cfg = torch.__config__.show()
        m = re.search(r"(GCC|clang|MSVC)[ \w]*?(\d+\.\d+(?:\.\d+)?)", cfg)
        if m:
            out["compiler"] = f"{m.group(1)} {m.group(2)}"
    except Exception:  # noqa: BLE001 - a build without the config string
        pass
    return out
