"""The fp32 row softmax of the vision encoder's attention (csrc/model/softmax.h), on every attention
kernel family usable here (portable, AVX2, AVX-512): bit for bit the scalar contract (std::exp, fp32 sum
in index order), within fp32 rounding of a float64 softmax; vector tails, row groups, large / tiny scores,
−inf entries (an all −inf row gives NaN as ggml does) and row padding left untouched."""
from __future__ import annotations

from pathlib import Path

from native_build import build_checker, run_checker


def test_softmax_rows_equal_scalar_contract_on_every_kernel_family():
    out = run_checker(build_checker(Path(__file__).with_name("softmax_check.cpp")))
    assert out.count("ok equals_scalar_contract/portable/") == 10, out
    assert out.count("ok matches_float64/") >= 10 and "FAIL" not in out, out
    assert "/avx2/" in out, out  # the vector path ran (every CPU this project targets has AVX2)
