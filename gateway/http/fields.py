"""Typed readers for single JSON fields, each failing with a 400 that names the parameter.

Rules every reader follows: `null` means "not given" (OpenAI clients send explicit nulls);
`bool` is never accepted where a number is expected (Python's bool is an int subclass);
integers must be real ints (orjson turns integers beyond 64 bits into floats); numbers must be
finite (orjson already rejects NaN/Infinity, the check keeps these readers safe on their own).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Callable

from gateway.http.errors import invalid

MISSING = object()
# The engine samples in 32-bit floats: a double in (0, 2^-150] becomes 0 there, so "> 0" bounds
# are checked on the float32 value (schemathesis sent 5e-324 as repetition_penalty: engine 503).
F32_ROUNDS_TO_ZERO = 2.0 ** -150
F32_TINY = 2.0 ** -149  # the smallest positive float32


def as_float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


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
    if not math.isfinite(value) or value > hi or value < lo or (lo_open and as_float32(value) <= lo):
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


# --- Declarative fields: one definition drives the validator and the OpenAPI document -------------
# Each request route lists its fields in a table of these; the route's parser reads each field
# through its entry, and gateway/server/openapi.py renders the same entries as JSON Schema. A bound or a
# type changed here changes both at once.


@dataclass(frozen=True)
class Field:
    name: str
    doc: str = ""

    def read(self, body: dict) -> Any:
        raise NotImplementedError

    def json_schema(self) -> dict:
        raise NotImplementedError

    def schema(self) -> dict:
        out = self.json_schema()
        if self.doc:
            out["description"] = self.doc
        return out


@dataclass(frozen=True)
class Int(Field):
    lo: int = 0
    hi: int = 0
    default: Any = None

    def read(self, body: dict, default: Any = MISSING) -> Any:
        return get_int(body, self.name, self.default if default is MISSING else default, self.lo, self.hi)

    def json_schema(self) -> dict:
        return {"type": ["integer", "null"], "minimum": self.lo, "maximum": self.hi}


@dataclass(frozen=True)
class Float(Field):
    lo: float = 0.0
    hi: float = 0.0
    default: Any = None
    lo_open: bool = False

    def read(self, body: dict) -> Any:
        return get_float(body, self.name, self.default, self.lo, self.hi, lo_open=self.lo_open)

    def json_schema(self) -> dict:
        # lo_open: above lo as a float32 (for lo = 0: above 2^-150, which rounds to 0).
        low = {"exclusiveMinimum": F32_ROUNDS_TO_ZERO if self.lo == 0 else self.lo} if self.lo_open \
            else {"minimum": self.lo}
        return {"type": ["number", "null"], **low, "maximum": self.hi}


@dataclass(frozen=True)
class Bool(Field):
    default: Any = None

    def read(self, body: dict, default: Any = MISSING) -> Any:
        return get_bool(body, self.name, self.default if default is MISSING else default)

    def json_schema(self) -> dict:
        return {"type": ["boolean", "null"]}


@dataclass(frozen=True)
class Str(Field):
    max_chars: int = 256
    default: Any = None

    def read(self, body: dict, default: Any = MISSING) -> Any:
        return get_str(body, self.name, self.default if default is MISSING else default, self.max_chars)

    def json_schema(self) -> dict:
        return {"type": ["string", "null"], "maxLength": self.max_chars}


@dataclass(frozen=True)
class Obj(Field):
    def read(self, body: dict) -> dict | None:
        return get_object(body, self.name)

    def json_schema(self) -> dict:
        return {"type": ["object", "null"]}


@dataclass(frozen=True)
class NoOp(Field):
    """A known field we cannot honour: only its no-op values pass (`require_default`)."""
    allowed: tuple = ()
    what: str = ""

    def read(self, body: dict) -> None:
        require_default(body, self.name, self.allowed, self.what)

    def json_schema(self) -> dict:
        return {"enum": [*self.allowed, None], "description": f"not supported ({self.what}): only the no-op values"}

    def schema(self) -> dict:
        return self.json_schema()


@dataclass(frozen=True)
class Custom(Field):
    """A field whose reader is a function next to its schema (shapes JSON Schema types cannot
    say in one keyword, e.g. a string or an array of strings)."""
    reader: Callable[[dict], Any] | None = None
    shape: dict | None = None

    def read(self, body: dict) -> Any:
        return self.reader(body) if self.reader is not None else None

    def json_schema(self) -> dict:
        return dict(self.shape or {})


def table(*fields: Field) -> dict[str, Field]:
    return {f.name: f for f in fields}


def object_schema(fields: dict[str, Field], required: tuple[str, ...] = (), *, closed: bool = True) -> dict:
    """JSON Schema of a request body read through `fields` (closed: unknown fields → 400)."""
    out = {"type": "object", "properties": {name: f.schema() for name, f in fields.items()},
           "additionalProperties": not closed}
    if required:
        out["required"] = list(required)
    return out
