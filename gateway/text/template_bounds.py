"""Size bounds on what one chat-template render may build (template_sandbox.py applies them).

A template comes from a model file (untrusted) and can ask Python for huge strings in one step:
`"{:>1000000000}".format(x)`, `"%1000000000d" % x`, `x|center(10**9)`, `s.replace("", s)`,
`sep.join(items)`, or grow a value by doubling it in a loop or a recursive macro. Each such step
is checked *before* it runs against an estimate of its result, and every value a call, filter
or operator returns is checked after, so no value exceeds MAX_VALUE_WEIGHT; those values are
charged to a per-render MAX_BUILT_CHARS (time spent building), and what a render emits (its
output and every macro or block body) to MAX_OUTPUT_CHARS. A
template past a bound raises SecurityError, which ChatTemplate turns into a 400.

The limits sit far above a real render: the request body is 8 MiB by default, so the messages
and tools a template walks are a few million characters at most.
"""
from __future__ import annotations

import contextvars
import re
from collections.abc import Mapping, MappingView

from jinja2.exceptions import SecurityError
from jinja2.utils import Namespace

MAX_LOOP_ITEMS = 200_000
MAX_VALUE_WEIGHT = 16_000_000  # characters (plus container items) of one value
MAX_OUTPUT_CHARS = 32_000_000  # characters one render emits, macro and block bodies included
# Characters of all the values one render's calls, filters and operators return: bounds the time
# a template spends building values it never emits (a loop padding a string to 16 M each pass).
MAX_BUILT_CHARS = 512_000_000
MAX_CONTAINER_ITEMS = 1_000_000  # items of one list, tuple or dict (checked before walking it)
MAX_INT_BITS = 1 << 16  # `*` and `**` on integers: 65 536 bits is ~20 000 digits
DIGITS_PER_BIT = 0.302  # log10(2): an integer's decimal length from its bit length


class RenderBudget:
    """What is left of one render's loop items and output characters."""

    __slots__ = ("loop_items", "output_chars", "built_chars", "weights")

    def __init__(self) -> None:
        self.loop_items = MAX_LOOP_ITEMS
        self.output_chars = MAX_OUTPUT_CHARS
        self.built_chars = MAX_BUILT_CHARS
        # The last containers weighed (id → (container, weight)): a template passes the same
        # list (messages, tools) to many filters and calls. Few entries: each keeps its
        # container alive until the render ends.
        self.weights: dict[int, tuple[object, int]] = {}


_budget: contextvars.ContextVar[RenderBudget] = contextvars.ContextVar("template_render_budget")


def start_render() -> contextvars.Token:
    """Opens the budget of one render (end_render closes it)."""
    return _budget.set(RenderBudget())


def end_render(token: contextvars.Token) -> None:
    _budget.reset(token)


def _current() -> RenderBudget:
    budget = _budget.get(None)
    if budget is None:  # rendered outside ChatTemplate.render (tests): a fresh budget
        budget = RenderBudget()
        _budget.set(budget)
    return budget


def take_loop_items(n: int = 1) -> None:
    budget = _current()
    budget.loop_items -= n
    if budget.loop_items < 0:
        raise SecurityError(f"the template iterated more than {MAX_LOOP_ITEMS} times in one render")


def charge_output(n_chars: int) -> None:
    budget = _current()
    budget.output_chars -= n_chars
    if budget.output_chars < 0:
        raise SecurityError(f"the template emitted more than {MAX_OUTPUT_CHARS} characters in one render")


# --- the weight of a value ------------------------------------------------------------------------

WEIGHT_MEMO_ENTRIES = 8
_CONTAINERS = (list, tuple, set, frozenset, dict, MappingView)


def _scalar_weight(v) -> int | None:
    """The weight of a string, an integer or any other non-container; None for a container."""
    if isinstance(v, (str, bytes, bytearray)):
        return len(v)
    if isinstance(v, int):
        return 1 + int(v.bit_length() * DIGITS_PER_BIT)
    if isinstance(v, _CONTAINERS) or isinstance(v, Namespace):
        return None
    return 1  # jinja's own objects too (a Context is a Mapping: not ours to walk)


def weight(value, limit: int = MAX_VALUE_WEIGHT) -> int:
    """Characters of the strings plus items of the containers reachable from `value`, a shared
    sub-value counted each time it is reached (str() and json.dumps expand it each time); an
    integer weighs its decimal digits. Stops counting past `limit`; a container of more than
    MAX_CONTAINER_ITEMS items is refused before it is walked, so one walk is ~1 s at most, and
    the last containers weighed are remembered for the render."""
    scalar = _scalar_weight(value)
    if scalar is not None:  # most checks: a string or a number, no walk
        return scalar
    memo = _current().weights
    sizes: dict[int, int] = {}

    def walk(v, depth: int) -> int:
        scalar = _scalar_weight(v)
        if scalar is not None:
            return scalar
        if depth > 200:  # deeper than any JSON a template sees; str() would recurse anyway
            raise SecurityError("a template value nested more than 200 levels deep")
        mutable = isinstance(v, Namespace)  # `{% set ns.x = ... %}` changes it: never remembered
        if mutable:
            v = v._Namespace__attrs  # noqa: SLF001 — str(namespace) prints this dict
        if len(v) > MAX_CONTAINER_ITEMS:
            raise SecurityError(f"a template container over {MAX_CONTAINER_ITEMS} items")
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in memo and memo[key][0] is v:
            return memo[key][1]
        sizes[key] = limit + 1  # a cycle reached again is over the limit
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else v
        total = len(items)
        for item in items:
            total += len(item) if type(item) is str else walk(item, depth + 1)
            if total > limit:
                break
        sizes[key] = total
        if not mutable and total > 64:
            if len(memo) >= WEIGHT_MEMO_ENTRIES:
                del memo[next(iter(memo))]
            memo[key] = (v, total)
        return total

    return walk(value, 0)


def check_size(estimate: int, what: str) -> None:
    if estimate > MAX_VALUE_WEIGHT:
        raise SecurityError(f"a template {what} would build a value over {MAX_VALUE_WEIGHT} characters")


def check_value(value, what: str = "value") -> None:
    check_size(weight(value), what)


def check_built(value, what: str) -> None:
    """A value a call, filter or operator returned: within the bound, and charged to the render."""
    n = weight(value)
    check_size(n, what)
    budget = _current()
    budget.built_chars -= n
    if budget.built_chars < 0:
        raise SecurityError(f"the template built more than {MAX_BUILT_CHARS} characters of values in one render")


def check_values(values, what: str) -> int:
    """The heaviest of `values` (each checked)."""
    heaviest = 0
    for v in values:
        w = weight(v)
        check_size(w, what)
        heaviest = max(heaviest, w)
    return heaviest


# --- integers ---------------------------------------------------------------------------------------

def check_int_product(left: int, right: int) -> None:
    if left.bit_length() + right.bit_length() > MAX_INT_BITS:
        raise SecurityError(f"a template integer over {MAX_INT_BITS} bits")


def check_int_power(base: int, exponent: int) -> None:
    if exponent > 0 and base.bit_length() * exponent > MAX_INT_BITS:
        raise SecurityError(f"a template integer over {MAX_INT_BITS} bits")


# --- format strings ----------------------------------------------------------------------------------

# printf-style: %[(key)][flags][width|*][.precision|*][length]type
_PERCENT = re.compile(r"%(?:\(([^)]*)\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
_NUMBER = re.compile(r"\d+")


def check_percent_format(fmt, args) -> None:
    """`fmt % args` (the `%` operator and the `format` filter): each conversion may pad to its
    width or precision, or to `*` taken from the arguments, and print the heaviest argument."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")
    values = list(args.values()) if isinstance(args, Mapping) else list(args) if isinstance(args, tuple) else [args]
    heaviest = check_values(values, "format argument")
    stars = [v for v in values if isinstance(v, int)]
    estimate = len(fmt)
    for match in _PERCENT.finditer(fmt):
        _key, width, precision, kind = match.groups()
        if kind == "%":
            continue
        pad = 0
        for n in (width, precision):
            if n == "*":
                pad += max((abs(v) for v in stars), default=0)
            elif n:
                pad += int(n)
        estimate += heaviest + pad
    check_size(estimate, "format string")


def check_str_format(fmt: str, args, kwargs) -> None:
    """`fmt.format(*args, **kwargs)` and format_map: every field may print the heaviest argument
    padded to the numbers in its spec. A spec that itself holds a field (`{:{w}}`) is refused:
    its width would only be known while formatting."""
    import string

    heaviest = check_values([*args, *kwargs.values()], "format argument")
    estimate = len(fmt)
    for _literal, field, spec, _conversion in string.Formatter().parse(fmt):
        if field is None:
            continue
        spec = spec or ""
        if "{" in spec:
            raise SecurityError("a template format spec with a nested field")
        estimate += heaviest + sum(int(n) for n in _NUMBER.findall(spec))
    check_size(estimate, "format string")


# --- str and bytes methods ----------------------------------------------------------------------------

def _int_arg(args, kwargs, index: int, name: str, default: int) -> int:
    value = args[index] if len(args) > index else kwargs.get(name, default)
    return value if isinstance(value, int) else default


def check_str_method(name: str, s, args, kwargs) -> None:
    """The methods of str/bytes whose result can be much longer than the string and arguments."""
    n = len(s)
    if name in ("center", "ljust", "rjust", "zfill"):
        check_size(max(n, _int_arg(args, kwargs, 0, "width", 0)), f"str.{name}")
    elif name == "expandtabs":
        tab = s.count("\t" if isinstance(s, str) else b"\t")
        check_size(n + tab * max(0, _int_arg(args, kwargs, 0, "tabsize", 8)), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        hits = n + 1 if not old else s.count(old) if isinstance(old, type(s)) else 0
        limit = _int_arg(args, kwargs, 2, "count", -1)
        if limit >= 0:
            hits = min(hits, limit)
        check_size(n + hits * weight(new), "str.replace")
    elif name == "join" and args:
        items = args[0]
        count = len(items) if hasattr(items, "__len__") else 0
        check_size(weight(items) + count * n, "str.join")
    elif name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((weight(v) for v in args[0].values()), default=1)
        check_size(n * max(1, longest), "str.translate")
