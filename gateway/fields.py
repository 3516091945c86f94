"""Typed readers for single JSON fields, each failing with a 400 that names the parameter.

Rules every reader follows: `null` means "not given" (OpenAI clients send explicit nulls);
`bool` is never accepted where a number is expected (Python's bool is an int subclass);
integers must be real ints (orjson turns integers beyond 64 bits into floats); numbers must be
finite (orjson already rejects NaN/Infinity, the check keeps these readers safe on their own).
"""
from __future__ import annotations

import math
from typing import Any

from gateway.errors import invalid

MISSING = object()


def _type_error(name: str, expected: str) -> Exception:
    return invalid(f"'{name}' must be {expected}", param=name, code="invalid_type")


def get_int(body: dict, name: str, default: Any, lo: int, hi: int) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not int:
        raise _type_error(name, "an integer")
    if not lo <= value <= hi:
        raise invalid(f"'{name}' must be between {lo} and {hi}", param=name)
    return value


def get_float(body: dict, name: str, default: Any, lo: float, hi: float, *, lo_open: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if type(value) not in (int, float):
        raise _type_error(name, "a number")
    value = float(value)
    if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
        bound = f"> {lo}" if lo_open else f">= {lo}"
        raise invalid(f"'{name}' must be {bound} and <= {hi}", param=name)
    return value


def get_bool(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not bool:
        raise _type_error(name, "true or false")
    return value


def get_str(body: dict, name: str, default: Any, max_chars: int) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not str:
        raise _type_error(name, "a string")
    if len(value) > max_chars:
        raise invalid(f"'{name}' is longer than {max_chars} characters", param=name)
    return value


def get_object(body: dict, name: str) -> dict | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not dict:
        raise _type_error(name, "an object")
    return value


def require_default(body: dict, name: str, allowed: tuple, what: str) -> None:
    """A known field we cannot honour: accept only its no-op values, never drop it silently."""
    value = body.get(name, MISSING)
    if value is MISSING or value is None:
        return
    # `==` would let True match 1 and 1.0 match 1; compare type and value.
    if any(type(value) is type(ok) and value == ok for ok in allowed):
        return
    raise invalid(f"'{name}' is not supported by this server ({what})", param=name, code="unsupported_parameter")
