"""Jinja filters under the render bounds of template_bounds.py.

Every filter checks the weight of its arguments before it runs and of its result after, so a
filter linear in its input (sum, list, string, tojson, pprint, escape, ...) stays within
MAX_VALUE_WEIGHT. The filters that amplify get an estimate checked first: padding (center,
indent), a separator or replacement per item (join, wordwrap, replace), printf widths (format),
a fill count (batch, slice).
"""
from __future__ import annotations

import functools

from jinja2 import filters as jf
from jinja2.runtime import markup_join
from markupsafe import Markup
from jinja2.exceptions import SecurityError

from gateway.text import template_bounds as tb


def _n(value) -> int:
    return len(value) if isinstance(value, (str, bytes)) else tb.weight(value)


def _check_center(value, width=80, *_a, **_k):
    tb.check_size(_n(value) + (width if isinstance(width, int) else 0), "center")


def _check_indent(s, width=4, *_a, **_k):
    pad = width if isinstance(width, int) else _n(width)
    text = str(s)
    tb.check_size(len(text) + (text.count("\n") + 1) * max(0, pad), "indent")


def _check_wordwrap(_env, s, width=79, break_long_words=True, wrapstring=None, *_a, **_k):
    # at worst a line per character, each followed by the wrap string
    sep = 1 if wrapstring is None else _n(wrapstring)
    tb.check_size(_n(s) * (1 + sep), "wordwrap")


def _check_join(_ctx, value, d="", *_a, **_k):
    count = len(value) if hasattr(value, "__len__") else 0
    tb.check_size(tb.weight(value) + count * _n(d), "join")


def _check_replace(_ctx, s, old, new, count=None, *_a, **_k):
    tb.check_str_method("replace", str(s), (str(old), str(new), -1 if count is None else count), {})


def _check_format(value, *args, **kwargs):
    tb.check_percent_format(str(value), kwargs or args)


def _check_batch(value, linecount, fill_with=None, *_a, **_k):
    if isinstance(linecount, int) and fill_with is not None:
        tb.check_size(linecount * max(1, tb.weight(fill_with)), "batch")


def _check_slice(_ctx, value, slices, *_a, **_k):
    if isinstance(slices, int):
        tb.take_loop_items(max(0, slices))  # slice loops over range(slices) wherever it is consumed


CHECKS = {"center": _check_center, "indent": _check_indent, "wordwrap": _check_wordwrap, "join": _check_join,
          "replace": _check_replace, "format": _check_format, "batch": _check_batch, "slice": _check_slice}


def bounded(name: str, fn):
    """`fn` with the bounds: its arguments and result weighed, its amplification estimated."""
    check = CHECKS.get(name)

    @functools.wraps(fn)  # keeps jinja_pass_arg (pass_context & co.)
    def wrapper(*args, **kwargs):
        tb.check_values([*args, *kwargs.values()], f"|{name} argument")
        if check is not None:
            check(*args, **kwargs)
        result = fn(*args, **kwargs)
        tb.check_built(result, f"|{name}")
        return result
    return wrapper


def bounded_filters(filters: dict) -> dict:
    return {name: bounded(name, fn) for name, fn in filters.items()}


def tojson(value, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    """HF's tojson (keeps non-ASCII). With an indent the text is built piece by piece and
    refused once over the bound: its size grows with the indent times the nesting depth."""
    import json

    if indent is None:
        return json.dumps(value, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)
    tb.check_size(indent if isinstance(indent, int) else 0, "|tojson indent")  # the encoder builds it first
    encoder = json.JSONEncoder(indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)
    pieces, size = [], 0
    for piece in encoder.iterencode(value):
        size += len(piece)
        if size > tb.MAX_VALUE_WEIGHT:
            raise SecurityError(f"a template |tojson would build a value over {tb.MAX_VALUE_WEIGHT} characters")
        pieces.append(piece)
    return "".join(pieces)


@jf.pass_context
def literal(context, value, is_template_text=True):
    """Template text or a constant as a runtime value, so env.finalize charges it to the output
    budget each time it is emitted (a loop repeats it); pass_context keeps jinja from folding it
    at compile. Template text is never escaped, in `{% autoescape %}` blocks too; constants are."""
    return Markup(value) if is_template_text and context.eval_ctx.autoescape else value


@jf.pass_eval_context
def concat(eval_ctx, *values):
    """`a ~ b ~ c`, its length checked before the join (escaping as jinja's `~` does)."""
    tb.check_values(values, "~")
    texts = [v if isinstance(v, str) else str(v) for v in values]
    tb.check_size(sum(map(len, texts)), "~")
    result = markup_join(values) if eval_ctx.autoescape else "".join(texts)
    tb.check_built(result, "~")
    return result
