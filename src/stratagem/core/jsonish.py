"""Owns reading loosely typed JSON records (validator details, stored bodies) without
assuming their shape.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a mapping, else an empty one (a missing or malformed field reads as
    empty, never as an error in a view)."""
    return value if isinstance(value, Mapping) else _EMPTY
