"""A chat template (from an untrusted model file) cannot make one render build a huge value:
format widths, padding filters, joins, replacements, doubling in loops or macros, literal text
in loops — each is the caller's 400 within a second and a bounded amount of memory
(gateway/text/template_bounds.py). Templates within the bounds render as before."""
import time
import tracemalloc

import pytest

from gateway.http.errors import APIError
from gateway.text import template_bounds as tb
from gateway.text.chat_template import ChatTemplate

MESSAGES = [{"role": "user", "content": "hi"}]
PEAK_BYTES_LIMIT = 64 * 1024 * 1024

HOSTILE = {
    "str.format width": '{{ "{:>1000000000}".format(1) }}',
    "str.format precision": '{{ "{:.1000000000f}".format(1.5) }}',
    "str.format nested width": '{{ "{0:{1}}".format(1, 1000000000) }}',
    "str.format_map width": '{{ "{x:>1000000000}".format_map({"x": 1}) }}',
    "str.format field repeated": '{{ ("{0}" * 100000).format("y" * 1000) }}',
    "percent width": '{{ "%1000000000d" % 1 }}',
    "percent star width": '{{ "%*d" % (1000000000, 1) }}',
    "percent precision": '{{ "%.1000000000f" % 1.5 }}',
    "percent key repeated": '{{ "%(a)s" * 100000 % {"a": "y" * 1000} }}',
    "format filter width": '{{ "%1000000000d"|format(1) }}',
    "center filter": '{{ "x"|center(10**9) }}',
    "indent filter": '{{ "x\ny"|indent(10**9) }}',
    "wordwrap filter": '{{ ("x " * 500000)|wordwrap(1, wrapstring="y" * 1000) }}',
    "join filter separator": '{{ ("y" * 1000)|join("x" * 100000) }}',
    "replace filter": '{{ ("x" * 1000000)|replace("x", "y" * 100) }}',
    "batch filter fill": '{{ [1]|batch(10**9, "x")|list }}',
    "slice filter count": '{{ [1]|slice(10**9)|list|length }}',
    "tojson indent": '{{ messages|tojson(indent=10**8) }}',
    "str.ljust": '{{ "x".ljust(10**9) }}',
    "str.zfill": '{{ "x".zfill(10**9) }}',
    "str.expandtabs": '{{ "\t".expandtabs(10**9) }}',
    "str.replace empty": '{{ ("x" * 1000000).replace("", "y" * 100) }}',
    "str.join": '{{ ("y" * 100000).join(["a"] * 1000) }}',
    "str.translate": '{{ ("x" * 100000).translate({120: "y" * 1000}) }}',
    "doubling with ~": '{% set ns = namespace(s="x") %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}'
                       '{% endfor %}{{ ns.s|length }}',
    "doubling with +": '{% set ns = namespace(s=["x"]) %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}'
                       '{% endfor %}{{ ns.s|length }}',
    "squaring an integer": '{% set ns = namespace(n=3) %}{% for i in range(60) %}{% set ns.n = ns.n * ns.n %}'
                           '{% endfor %}{{ ns.n > 1 }}',
    "doubling in a macro": '{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}{% endmacro %}{{ d("x", 60) }}',
    "output in a loop": '{% for i in range(200000) %}{{ "x" * 1000000 }}{% endfor %}',
    "literal text in a loop": '{% for i in range(200000) %}' + "x" * 1000 + "{% endfor %}",
    "shared lists printed": '{% set a = ["x" * 1000000] %}{% set b = [a,a,a,a,a,a,a,a,a,a] %}'
                            '{% set c = [b,b,b,b,b,b,b,b,b,b] %}{{ c }}',
    "shared lists to json": '{% set a = ["x" * 1000000] %}{% set b = [a,a,a,a,a,a,a,a,a,a] %}'
                            '{% set c = [b,b,b,b,b,b,b,b,b,b] %}{{ c|tojson }}',
    "nested repeat summed": '{% set a = [[1] * 1000] * 1000 %}{{ a|sum(start=[])|length }}',
    "dict.fromkeys": '{{ {}.fromkeys(range(100000), "x" * 1000) }}',
    "lipsum": "{{ lipsum(10**9) }}",
    "building without emitting": '{% for i in range(100000) %}{% set _ = "x".center(16000000) %}{% endfor %}',
}


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_output_sizes_are_a_400_in_bounded_time_and_memory(source):
    template = ChatTemplate(source)
    start = time.monotonic()
    with pytest.raises(APIError) as info:
        template.render(MESSAGES)
    assert info.value.status == 400
    assert time.monotonic() - start < 3.0  # alone each takes < 1.2 s
    tracemalloc.start()  # again, measured: tracemalloc slows deep call chains many times over
    try:
        with pytest.raises(APIError):
            template.render(MESSAGES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES_LIMIT


@pytest.mark.parametrize("source, expected", [
    ('{{ "{:>6}|{:.2f}".format("ab", 1.5) }}', "    ab|1.50"),
    ('{{ "%-4s|%05d|%*d" % ("ab", 42, 3, 7) }}', "ab  |00042|  7"),
    ('{{ "%s=%d"|format("n", 3) }}', "n=3"),
    ('{{ "ab"|center(6) }}|{{ "a\nb"|indent(2) }}', "  ab  |a\n  b"),
    ("{{ ['a', 'b']|join(', ') }}|{{ 'a-b'|replace('-', '+') }}", "a, b|a+b"),
    ('{{ {"k": [1]}|tojson(indent=2) }}', '{\n  "k": [\n    1\n  ]\n}'),
    ("{% macro m(x) %}<{{ x }}>{% endmacro %}{% for c in 'abc' %}{{ m(c) ~ '.' }}{% endfor %}", "<a>.<b>.<c>."),
    ("{{ 2 ** 100 * 3 }}", str(2 ** 100 * 3)),
    # filters that take jinja's context (a Mapping that is not a value of the template's)
    ("{{ messages|map(attribute='role')|join(',') }}|{{ messages|selectattr('role', 'eq', 'user')|list|length }}",
     "user|1"),
])
def test_templates_within_the_bounds_render_as_before(source, expected):
    assert ChatTemplate(source).render(MESSAGES) == expected


def test_a_long_message_fits_the_bounds():
    content = "z" * 6_000_000  # near the default 8 MiB request body
    t = ChatTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m['content'] | trim }}<|im_end|>\n"
                     "{% endfor %}{{ messages|tojson|length > 0 }}")
    assert len(t.render([{"role": "user", "content": content}])) > len(content)


def test_weight_counts_shared_values_each_time_and_stops_at_the_limit():
    a = ["x" * 10]
    assert tb.weight([a, a, a]) == 3 + 3 * (1 + 10)
    huge = [[["y"] * 1000] * 1000] * 1000
    start = time.monotonic()
    assert tb.weight(huge, limit=10_000) > 10_000
    assert time.monotonic() - start < 0.5


@pytest.mark.parametrize("autoescape", [False, True])
def test_bounded_rendering_escapes_like_jinja(autoescape):
    # template text and constants become runtime values (charged when emitted), `~` a checked
    # join: escaping stays jinja's — text never, constants and values in autoescape blocks
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from gateway.text.template_sandbox import BoundedSandbox

    source = ('{% autoescape true %}<b>{{ "<i>" }}{{ "<" ~ x }}</b>{% endautoescape %}<p>{{ "<" ~ x }}{{ 5 }}'
              "{% for c in 'ab' %}<{{ c }}>{% endfor %}")
    plain = ImmutableSandboxedEnvironment(autoescape=autoescape).from_string(source).render(x="&")
    assert BoundedSandbox(autoescape=autoescape).from_string(source).render(x="&") == plain
