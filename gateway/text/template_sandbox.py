"""The sandbox chat templates run in: jinja2's immutable sandbox (no attribute outside the safe
set, no mutation of our objects, no file or import access) plus bounds on the work one render
may do, because templates come from model files (untrusted):

- every `{% for %}` loop and `range()` draws its items from one budget per render
  (MAX_LOOP_ITEMS): nested loops over long strings or ranges end with a SecurityError instead
  of spinning the gateway's event loop for hours;
- `*` may not build a string or sequence longer than MAX_REPEAT_ITEMS, and `**` takes exponents
  up to MAX_EXPONENT (`9 ** 9 ** 9` would compute for minutes);
- unbounded recursion (a macro calling itself) is Python's RecursionError, which ChatTemplate
  turns into a 400 like the sandbox's SecurityError.
Real templates stay far below: Qwen 3's walks the messages twice and the tools once.
"""
from __future__ import annotations

import contextvars
import numbers

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_LOOP_ITEMS = 200_000
MAX_REPEAT_ITEMS = 1_000_000
MAX_EXPONENT = 256
_ITER_NAME = "laneserve_bounded_iter"  # a global: for-loop iterables are wrapped in it at parse time

_budget: contextvars.ContextVar[list[int]] = contextvars.ContextVar("template_loop_budget")


def start_render() -> contextvars.Token:
    """Opens the loop budget of one render (end_render closes it)."""
    return _budget.set([MAX_LOOP_ITEMS])


def end_render(token: contextvars.Token) -> None:
    _budget.reset(token)


def _take(n: int = 1) -> None:
    left = _budget.get(None)
    if left is None:
        left = [MAX_LOOP_ITEMS]  # rendered outside ChatTemplate.render (tests): a fresh budget
        _budget.set(left)
    left[0] -= n
    if left[0] < 0:
        raise SecurityError(f"the template iterated more than {MAX_LOOP_ITEMS} times in one render")


def _bounded_iter(iterable):
    for item in iterable:
        _take()
        yield item


def _bounded_range(*args):
    r = range(*args)
    _take(len(r))  # a range's length is known up front: refuse before iterating
    return r


def _wrap_for_loops(template: nodes.Template) -> nodes.Template:
    for loop in template.find_all(nodes.For):
        loop.iter = nodes.Call(nodes.Name(_ITER_NAME, "load", lineno=loop.lineno), [loop.iter], [], None, None,
                               lineno=loop.lineno)
    return template


class BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def __init__(self, **options):
        super().__init__(**options)
        self.globals[_ITER_NAME] = _bounded_iter
        self.globals["range"] = _bounded_range

    def _parse(self, source, name, filename):
        return _wrap_for_loops(super()._parse(source, name, filename))

    def call_binop(self, context, operator, left, right):
        if operator == "**":
            if isinstance(right, numbers.Number) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"exponent beyond {MAX_EXPONENT} in a template")
        elif operator == "*":
            for seq, count in ((left, right), (right, left)):
                if hasattr(seq, "__len__") and isinstance(count, int) and len(seq) * count > MAX_REPEAT_ITEMS:
                    raise SecurityError(f"a template built a sequence longer than {MAX_REPEAT_ITEMS} items")
        return super().call_binop(context, operator, left, right)
