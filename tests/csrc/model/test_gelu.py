"""Gemma's GeGLU and the vision encoder's plain GELU (csrc/model/gelu.cpp) reproduce ggml's fp16-table GELU bit for bit, on the
dispatched (AVX2 gather) and the portable path, over every 101st float of [−12, 12] and the edge
values (±10, infinities, NaN, fp16 overflow)."""
from __future__ import annotations

from pathlib import Path

from native_build import build_checker, run_checker


def test_geglu_matches_ggml_recipe_on_every_path():
    out = run_checker(build_checker(Path(__file__).with_name("gelu_check.cpp")), "101")
    assert out.count("ok sweep") == 4, out
    assert out.count("ok plain") == 2, out
