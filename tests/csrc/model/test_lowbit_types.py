"""Q2_K, Q3_K_M, IQ4_NL and IQ4_XS models quantized by llama.cpp's own quantizer load and match
llama.cpp (tests/data/lowbit: the files, llama.cpp's outputs, and make_reference.py that made both).

Tolerance: the maximum logit difference to llama.cpp must stay within llama.cpp's own maximum
distance to the float64 reference forward on the same dequantized weights (both implementations
quantize activations to int8; a wrong block layout or scale gives differences of the logit std, ~8).
Greedy: equal to llama.cpp's tokens up to the first step whose top-1/top-2 margin is below MARGIN."""
import json
import re
from pathlib import Path

import gguf
import numpy as np
import pytest
from golden import first_near_tie
from lowbit_common import CONFIG, TYPES, file_weights
from tiny_gguf import reference_logits

from lanes import Model, _runtime

DATA = Path(__file__).resolve().parents[2] / "data" / "lowbit"
REF = json.loads((DATA / "reference.json").read_text(encoding="utf-8"))
MARGIN = 0.5
MAIN_TYPE = {"tiny-q2_k": "Q2_K", "tiny-q3_k_m": "Q3_K", "tiny-iq4_nl": "IQ4_NL", "tiny-iq4_xs": "IQ4_XS"}


@pytest.mark.parametrize("name", sorted(TYPES))
def test_teacher_forced_logits_match_llama_cpp(name):
    rec = REF[name]
    path = DATA / f"{name}.gguf"
    weights, types = file_weights(path)
    assert types == rec["tensor_types"] and MAIN_TYPE[name] in types
    ours = Model(path, threads=2, ctx_size=64).logits(rec["ids"]).astype(np.float64)
    llama = np.array(rec["logits"])
    diff = float(np.abs(ours - llama).max())
    assert diff <= rec["llama_ref_max_abs"], (diff, rec["llama_ref_max_abs"])
    # And no further from the float64 reference than llama.cpp is.
    ref = reference_logits(CONFIG, weights, rec["ids"])
    assert float(np.abs(ours - ref).max()) <= 1.5 * rec["llama_ref_max_abs"]


@pytest.mark.parametrize("name", sorted(TYPES))
def test_greedy_follows_llama_cpp_to_first_near_tie(name):
    rec = REF[name]
    k = first_near_tie(rec["margins"], MARGIN)
    assert k >= 4, k  # the comparison has substance
    model = Model(DATA / f"{name}.gguf", threads=2, ctx_size=64)
    gen = model.generate(rec["ids"], max_tokens=k, temperature=0.0, ignore_eos=True)
    list(gen)
    assert gen.token_ids == rec["greedy_ids"][:k]


@pytest.mark.parametrize("name", sorted(TYPES))
def test_low_bit_tensors_are_repacked_at_load(name, tmp_path):
    """On a SIMD path the model repacks its Q2_K / Q3_K / IQ4 projections into the interleaved layout (the
    layout part of the repack cache key lists every repacked tensor's type and shape)."""
    if _runtime.quant.active_isa() == "scalar":
        pytest.skip("the scalar path keeps the row layout")
    path = DATA / f"{name}.gguf"
    model = Model(path, threads=2, ctx_size=64, repack_cache_dir=str(tmp_path))
    assert model.repack_status.startswith("built "), model.repack_status
    (cache,) = tmp_path.glob("*.lsrp")
    key = re.search(rb"layout=il16v\d+((?:;\d+:\d+x\d+)+)", cache.read_bytes()[:4096])
    repacked = {int(e.split(b":")[0]) for e in key.group(1).split(b";")[1:]}
    assert int(gguf.GGMLQuantizationType[MAIN_TYPE[name]]) in repacked, repacked
    assert np.abs(model.logits(REF[name]["ids"]) - np.array(REF[name]["logits"])).max() <= REF[name]["llama_ref_max_abs"]
