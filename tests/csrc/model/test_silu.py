"""The SwiGLU activation (csrc/model/silu.cpp): the dispatched path (eight glibc-exact expf at once on AVX2)
gives the portable loop's bits over every 101st float of [−200, 200] and the edge values (exp's overflow and
underflow limits, infinities, NaN, subnormals). `silu_check 1` (every float of [−200, 200], ~1 minute) passed
when the vector path was written; the test runs the every-101st sweep."""
from __future__ import annotations

from pathlib import Path

from native_build import build_checker, run_checker


def test_swiglu_vector_path_equals_the_portable_loop():
    out = run_checker(build_checker(Path(__file__).with_name("silu_check.cpp")), "101")
    assert out.count("ok sweep") == 3, out
