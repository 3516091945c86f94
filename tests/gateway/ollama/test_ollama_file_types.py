"""/api/show's quantization level for the low-bit files llama.cpp's quantizer writes (no server needed)."""
from pathlib import Path

import pytest

from gateway.ollama.models import model_facts

LOWBIT = Path(__file__).resolve().parents[2] / "data" / "lowbit"


@pytest.mark.parametrize("name, level", [("tiny-q2_k", "Q2_K"), ("tiny-q3_k_m", "Q3_K_M"),
                                         ("tiny-iq4_nl", "IQ4_NL"), ("tiny-iq4_xs", "IQ4_XS")])
def test_quantization_level_of_low_bit_files(name, level):
    assert model_facts(str(LOWBIT / f"{name}.gguf"), "").quantization == level
