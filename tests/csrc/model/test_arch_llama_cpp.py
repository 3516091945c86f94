"""Architectures against llama.cpp on tiny random-weight GGUFs (arch_cases.py; llama.cpp's outputs in
tests/data/arch/reference.json, made by make_reference.py there).

Tolerance: the maximum logit difference to llama.cpp must stay within llama.cpp's own maximum
distance to the float64 reference forward on the same weights (a missing multiplier, norm or rope
detail gives differences of the order of the logit std). Greedy: equal to llama.cpp's tokens up to
the first step whose top-1/top-2 margin is below MARGIN. The file's chat template renders through
our jinja2 sandbox exactly as llama.cpp renders it (gpt-oss's real template: as llama-cpp-python's Jinja
renderer does, the date from strftime_now aside).

MoE cases: the tolerance holds only while every routing is decisive (a flipped expert is an O(1)
change that would also inflate llama.cpp's own distance to the reference), so each case's smallest
router logit gap between the last chosen and the first unchosen expert, over every prompt token and
layer of the float64 reference, must stay above ROUTER_GAP, and llama.cpp's batched logits must agree
with its own one-token-per-batch run to well within the tolerance (on K-quant experts llama.cpp's
batched and one-token activations round differently, moving router logits by more than the gap on
many seeds; the seeds in arch_cases.py are ones where no routing flips).

F16 weights: llama.cpp rounds the activations of an F16 matmul to fp16 (ggml's vec_dot_type for F16)
and we keep them fp32, so there the two differ by up to both their distances to the float64 reference
(each ~0.05 from the fp16 KV cache both keep): the bound is llama.cpp's distance plus ours, ours being
within the usual 1.5× of llama.cpp's."""
import json
import re
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from arch_cases import CASES, JINJA_RENDERED, LLAMA_QUANTIZED, MESSAGES, SAME_AS_LLAMA_QUANTIZED, sha256
from golden import first_near_tie
from lowbit_common import file_weights
from tiny_gguf import Q, reference_logits, write_tiny_gguf
from tiny_moe import router_min_gap

from gateway.text.chat_template import ChatTemplate
from lanes import Model

DATA = Path(__file__).resolve().parents[2] / "data" / "arch"
REF = json.loads((DATA / "reference.json").read_text("utf-8"))
MARGIN = 0.5  # as the golden tests: a top-1/top-2 gap another implementation may not reproduce
ROUTER_GAP = 0.05


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    name = request.param
    cfg, seed = CASES[name]
    if name in LLAMA_QUANTIZED:  # quantized by llama.cpp and kept
        path = DATA / f"{name}.gguf"
        weights, types = file_weights(path)
        assert types == REF[name]["tensor_types"]
    else:
        path = tmp_path_factory.mktemp(name) / f"{name}.gguf"
        weights = write_tiny_gguf(path, cfg, seed=seed)
    assert sha256(path) == REF[name]["sha256"], "the file differs from the one llama.cpp ran"
    return name, cfg, path, weights


def test_teacher_forced_logits_match_llama_cpp(case):
    name, cfg, path, weights = case
    rec = REF[name]
    ours = Model(path, threads=2, ctx_size=64).logits(rec["ids"]).astype(np.float64)
    diff = float(np.abs(ours - np.array(rec["logits"])).max())
    ffn_inputs: list = []
    ref = reference_logits(cfg, weights, rec["ids"], ffn_inputs)
    ours_ref = float(np.abs(ours - ref).max())
    assert ours_ref <= 1.5 * rec["llama_ref_max_abs"], (ours_ref, rec["llama_ref_max_abs"])
    bound = rec["llama_ref_max_abs"] + (ours_ref if cfg.weight_type == Q.F16 else 0.0)
    assert diff <= bound, (diff, bound)
    if cfg.n_expert:
        assert router_min_gap(cfg, weights, ffn_inputs) >= ROUTER_GAP
        assert rec["llama_batch_vs_one_token_max_abs"] <= 0.5 * rec["llama_ref_max_abs"]


@pytest.mark.parametrize("name", sorted(SAME_AS_LLAMA_QUANTIZED))
def test_written_quantized_tensors_are_llama_quantizes(name):
    """The gguf package's MXFP4 experts are byte for byte what llama-quantize MXFP4_MOE makes (checked when
    the reference was made), so the case runs the tensors released gpt-oss files carry."""
    assert REF[name]["same_as_llama_quantized"] is True


def test_greedy_follows_llama_cpp_to_first_near_tie(case):
    name, _, path, _ = case
    rec = REF[name]
    model = Model(path, threads=2, ctx_size=64)
    # llama.cpp's greedy ran unmasked; ours ignores end-of-generation tokens, so compare up to the first one.
    k = first_near_tie(rec["margins"], MARGIN)
    k = min([k] + [i for i, t in enumerate(rec["greedy_ids"]) if t in set(model.eog_ids)])
    assert k >= 3, k
    gen = model.generate(rec["ids"], max_tokens=k, temperature=0.0, ignore_eos=True)
    list(gen)
    assert gen.token_ids == rec["greedy_ids"][:k]


def test_chat_template_renders_as_llama_cpp(case):
    name, cfg, path, _ = case
    if REF[name]["chat"] is None:
        pytest.skip("no chat template in this file")
    assert Model(path, threads=1, ctx_size=64).chat_template == cfg.chat_template
    expected = REF[name]["chat"]
    if name in JINJA_RENDERED:  # rendered with strftime_now's date of the day the reference was made
        expected = re.sub(r"Current date: \d{4}-\d{2}-\d{2}", "Current date: " + date.today().isoformat(), expected)
    assert ChatTemplate(cfg.chat_template).render(MESSAGES) == expected
