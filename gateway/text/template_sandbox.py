"""The sandbox chat templates run in: jinja2's immutable sandbox (no attribute outside the safe
set, no mutation of our objects, no file or import access) plus bounds on the work and memory one
render may take, because templates come from model files (untrusted):

- every `{% for %}` loop, `range()`, recursive `loop()` and macro call draws from one budget
  per render (MAX_LOOP_ITEMS): nested loops over long strings or ranges, or a macro calling
  itself twice, end with a SecurityError instead of spinning the gateway's event loop for hours;
- `*` may not build a string or sequence longer than MAX_REPEAT_ITEMS, `**` takes exponents up
  to MAX_EXPONENT (`9 ** 9 ** 9` would compute for minutes), and integers stay under
  MAX_INT_BITS;
- no value grows past MAX_VALUE_WEIGHT and no render emits more than MAX_OUTPUT_CHARS
  (template_bounds.py): format widths, padding filters, joins, `+` and `~` are checked before
  they build their result, every call and filter result after;
- unbounded recursion (a macro calling itself) is Python's RecursionError, which ChatTemplate
  turns into a 400 like the sandbox's SecurityError.
Real templates stay far below: Qwen 3's walks the messages twice and the tools once.
"""
from __future__ import annotations

import numbers
import types

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.text import template_bounds as tb
from gateway.text import template_filters as tf
from gateway.text.template_bounds import MAX_LOOP_ITEMS, end_render, start_render  # noqa: F401 — re-exported

MAX_REPEAT_ITEMS = 1_000_000
MAX_EXPONENT = 256
MACRO_CALL_ITEMS = 4  # a macro call costs more than a loop step: a frame, a buffer, a join
_ITER_NAME = "laneserve_bounded_iter"  # a global: for-loop iterables are wrapped in it at parse time
_LITERAL = "laneserve_literal"  # a filter: template text made a runtime value (charged when emitted)
_CONCAT = "laneserve_concat"  # a filter: `~` with its length checked


def _bounded_iter(iterable):
    for item in iterable:
        tb.take_loop_items()
        yield item


def _bounded_range(*args):
    r = range(*args)
    tb.take_loop_items(len(r))  # a range's length is known up front: refuse before iterating
    return r


def _filter(node: nodes.Expr, name: str, args: list, lineno: int) -> nodes.Filter:
    return nodes.Filter(node, name, args, [], None, None, lineno=lineno)


def _bound_template(template: nodes.Template) -> nodes.Template:
    """Wraps for-loop iterables in the loop budget, template text in a runtime value (env.finalize
    charges every emitted piece) and `~` in a checked concatenation."""
    for loop in template.find_all(nodes.For):
        loop.iter = nodes.Call(nodes.Name(_ITER_NAME, "load", lineno=loop.lineno), [loop.iter], [], None, None,
                               lineno=loop.lineno)
    for output in template.find_all(nodes.Output):
        output.nodes = [_filter(n, _LITERAL, [nodes.Const(isinstance(n, nodes.TemplateData))], n.lineno)
                        if isinstance(n, (nodes.TemplateData, nodes.Const)) else n for n in output.nodes]
    for parent in list(template.find_all(nodes.Node)):
        for field in parent.fields:
            child = getattr(parent, field, None)
            if isinstance(child, nodes.Concat) and child.nodes:
                setattr(parent, field, _filter(child.nodes[0], _CONCAT, child.nodes[1:], child.lineno))
            elif isinstance(child, list):
                setattr(parent, field, [_filter(c.nodes[0], _CONCAT, c.nodes[1:], c.lineno)
                                        if isinstance(c, nodes.Concat) and c.nodes else c for c in child])
    return template


def _finalize(value):
    """Every piece a render emits, anywhere (output, macro and block bodies): weighed before it is
    made a string, charged to the render's output budget after."""
    if not isinstance(value, str):
        tb.check_value(value, "output")
        value = str(value)
    tb.charge_output(len(value))
    return value


class BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**", "+", "%"])

    def __init__(self, **options):
        super().__init__(finalize=_finalize, **options)
        self.globals[_ITER_NAME] = _bounded_iter
        self.globals["range"] = _bounded_range
        self.globals.pop("lipsum", None)  # lipsum(10**9) loops in Python; no chat template uses it
        self.filters = tf.bounded_filters(self.filters)
        self.filters[_LITERAL] = tf.literal
        self.filters[_CONCAT] = tf.concat

    @staticmethod
    def bounded_filter(name: str, fn):
        """A filter of the caller's (e.g. HF's tojson) under the same bounds as jinja's own."""
        return tf.bounded(name, fn)

    def _parse(self, source, name, filename):
        return _bound_template(super()._parse(source, name, filename))

    def call_binop(self, context, operator, left, right):
        if operator == "**":
            if isinstance(right, numbers.Number) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"exponent beyond {MAX_EXPONENT} in a template")
            if isinstance(left, int) and isinstance(right, int):
                tb.check_int_power(left, right)
        elif operator == "*":
            for seq, count in ((left, right), (right, left)):
                if hasattr(seq, "__len__") and isinstance(count, int) and tb.weight(seq) * count > MAX_REPEAT_ITEMS:
                    raise SecurityError(f"a template built a sequence longer than {MAX_REPEAT_ITEMS} items")
            if isinstance(left, int) and isinstance(right, int):
                tb.check_int_product(left, right)
        elif operator == "+":
            if hasattr(left, "__len__") and hasattr(right, "__len__"):
                if not isinstance(left, (str, bytes)) and len(left) + len(right) > tb.MAX_CONTAINER_ITEMS:
                    raise SecurityError(f"a template container over {tb.MAX_CONTAINER_ITEMS} items")
                tb.check_size(tb.weight(left) + tb.weight(right), "+")
        elif isinstance(left, (str, bytes)):  # "%": printf-style formatting, not modulo
            tb.check_percent_format(left, right)
        result = super().call_binop(context, operator, left, right)
        tb.check_built(result, operator)
        return result

    def wrap_str_format(self, value):
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt, is_map = value.__self__, value.__name__ == "format_map"

        def checked(*args, **kwargs):
            if is_map:
                tb.check_str_format(fmt, (), args[0] if len(args) == 1 and not kwargs else {})
            else:
                tb.check_str_format(fmt, args, kwargs)
            return wrapper(*args, **kwargs)
        return checked

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 — jinja's own signature
        if isinstance(__obj, Macro):
            tb.take_loop_items(MACRO_CALL_ITEMS)
        elif isinstance(__obj, LoopContext) and args:  # `loop(children)` of a recursive for
            args = (_bounded_iter(args[0]), *args[1:])
        elif isinstance(__obj, types.BuiltinMethodType) and isinstance(__obj.__self__, (str, bytes)):
            if __obj.__name__ == "join" and args and not hasattr(args[0], "__len__"):
                args = (tuple(_bounded_iter(args[0])), *args[1:])
            tb.check_values([*args, *kwargs.values()], f"{__obj.__name__}() argument")
            tb.check_str_method(__obj.__name__, __obj.__self__, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        tb.check_built(result, "call")
        return result
