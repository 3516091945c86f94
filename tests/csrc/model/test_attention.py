"""The attention kernels and run_attention (csrc/model/attention.h) without a model file.

Builds the standalone attention_check.cpp (native_build.py) and runs it:
* every kernel family (portable, AVX2, AVX-512 where usable) against a float64 softmax
  attention at depths 1 … 2051, for GQA (SmolLM2 9:3), MQA with Gemma 3's 512-position sliding
  window and its global layers, a group of 7 query heads and MHA with head size 36;
* the vectorised exp against std::exp, bit for bit;
* bit-identity of every output across 1/2/3 threads, batch splits (alone, batches of 2 and 4,
  one shuffled batch of 15: both scheduling modes) at depths up to 2600 (five 512-position
  chunks); tokens within one chunk equal plain one-softmax attention exactly; AVX-512 = AVX2.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from native_build import build_checker, run_checker

CHECKER = Path(__file__).with_name("attention_check.cpp")


@pytest.fixture(scope="module")
def checker() -> Path:
    return build_checker(CHECKER)


def test_kernels_match_float64_and_exp_matches_std_exp(checker):
    out = run_checker(checker, "kernels", "7")  # every 7th float of [−104.5, 0] (1 = all 1.1e9)
    assert out.count("ok matches_float64/") >= 5 * 1, out
    assert "ok exp_equals_std_exp/portable/" in out, out


def test_bit_identical_across_threads_batches_modes_and_isa(checker):
    out = run_checker(checker, "identity")
    for check in ("alone_threads3/", "one_batch_shuffled_threads3/", "batches_of2_threads2/", "batches_of4_threads3/",
                  "one_chunk_is_plain_softmax/gemma_local/"):
        assert check in out, out


def test_paged_cache_is_bit_identical_to_contiguous(checker):
    """Reading K/V through page tables (shuffled pages of 16, 64 or 128 positions) changes no bit, for every
    layout and kernel family, in both scheduling modes, at depths of one to three chunks."""
    out = run_checker(checker, "paged")
    assert "FAIL" not in out, out
    assert out.count("ok paged_equals_contiguous_") >= 5 * 3 * 4, out
