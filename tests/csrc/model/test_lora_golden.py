"""LoRA adapters on SmolLM2 and Gemma 3 against llama.cpp's own outputs with the same adapters
(tests/data/lora/<case>.jsonl, from make_reference.py: llama-cpp-python 0.3.36, `lora_path` +
`lora_scale`, on the golden tests' own prompts — the 12 teacher-forced logits prompts, >1000
positions per model, and the 10 greedy prompts with up to 64 tokens each).

Gates: exactly the golden tests' (golden.GATES, used by test_llama_golden.py / test_gemma3_golden.py):
top-1 agreement and mean KL over all positions, greedy agreement over the steps whose llama.cpp
top-1/top-2 margin is decisive — over as many positions as the base model's gates, so one near-tie
moves top-1 by ~0.1%, not by the gate.

Known gap (measured on the regenerated references, not loosened here): with two of the random
adapters top-1 falls short of the gate while KL and every decisive greedy step pass —
gemma3-r8-f32-all 0.931 (of 1032 positions, gate 0.95), gemma3-r16-q8_0a-f16b-attn 0.944. The gates
come from llama.cpp's own variation on the base models (97–98% argmax agreement between its batch and
one-token-per-decode paths on SmolLM2, 96% on Gemma 3); these adapters make the models more sensitive
to rounding, and llama.cpp no longer meets the gate against itself: its step path agrees with its own
batch reference at 0.942 on gemma3-r8-f32-all and 0.932 on gemma3-r16-q8_0a-f16b-attn. The top-1 of
these cases moves by a point with any change of summation order: gemma3-r8-f32-all was 0.940 and
smollm2-r16-f16-all 0.957 (then a known gap too, now 0.962) with the previous kernels' order.
Against the exact float64 merged-weights forward (tests/csrc/model/test_lora_real.py's reference,
all 1310 positions, previous kernels) ours and llama.cpp's agree about equally: top-1 0.958 vs 0.961,
mean |Δlogprob| of the exact top-1 0.044 vs 0.044 (base model: 0.974 vs 0.982, 0.035 vs 0.033);
gemma3-r8-f32-all 0.927 vs 0.940, 0.075 vs 0.072. So the gap is two rounding paths disagreeing, not
an arithmetic difference of ours (rounding x and B's input as llama.cpp's F16 / Q8_0 vec_dot types
did not change it either). Those cases end as an expected failure after every other gate has been
asserted, and turn into a failure of this test (strict) once they pass."""
import json
from pathlib import Path

import pytest

import lanes
from lanes import Model

from golden import GATES, GEMMA3, SMOLLM2, compare_logits, decisive_greedy_agreement, load
from lora_gguf import REAL_CASES, cached_adapter

DATA = Path(__file__).resolve().parents[2] / "data" / "lora"
GOLDEN_NAMES = {"smollm2": SMOLLM2, "gemma3": GEMMA3}
TOP1_SHORT = {"gemma3-r8-f32-all", "gemma3-r16-q8_0a-f16b-attn"}  # the known gap above


def records(case: str) -> tuple[list[dict], list[dict]]:
    """(teacher-forced logits records, greedy records) of a case."""
    path = DATA / f"{case}.jsonl"
    if not path.exists():
        pytest.skip(f"no llama.cpp reference for {case} (run tests/data/lora/make_reference.py)")
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if any("kind" not in r for r in recs):
        pytest.skip(f"{case}: reference in the old 4-prompt format (rerun tests/data/lora/make_reference.py "
                    f"--case {case})")
    return [r for r in recs if r["kind"] == "logits"], [r for r in recs if r["kind"] == "greedy"]


def base_path(model_name: str) -> str:
    return lanes.smollm2_path() if model_name == "smollm2" else lanes.gemma3_path()


@pytest.mark.parametrize("case", sorted(REAL_CASES))
def test_adapter_matches_llama_cpp(case):
    model_name, spec, scale = REAL_CASES[case]
    gate = GATES[GOLDEN_NAMES[model_name]]
    logits_recs, greedy_recs = records(case)
    base = base_path(model_name)
    model = Model(base, threads=2, ctx_size=1024, lora=[(cached_adapter(Path(base), spec), scale)])
    top1, kl, n = compare_logits(model, logits_recs)
    agree, decisive = decisive_greedy_agreement(model, greedy_recs, gate.margin)
    model.set_lora([])
    base_top1, base_kl, _ = compare_logits(model, logits_recs)
    print(f"{case}: {n} positions, top-1 {top1:.4f}, KL {kl:.4f}; greedy {agree}/{decisive} decisive steps; "
          f"without the adapter: top-1 {base_top1:.3f}, KL {base_kl:.3f}")
    assert n > gate.min_positions, n
    assert kl <= gate.max_kl, kl
    assert decisive > gate.min_decisive, decisive
    assert agree / decisive >= gate.min_greedy, (agree, decisive)
    assert base_kl > 5 * max(kl, 1e-3)  # llama.cpp really applied the adapter, and so do we
    if case in TOP1_SHORT:
        assert top1 < gate.min_top1, f"{case} now meets the top-1 gate ({top1:.4f}): drop it from TOP1_SHORT"
        pytest.xfail(f"known gap: top-1 {top1:.4f} < {gate.min_top1} (module docstring)")
    assert top1 >= gate.min_top1, top1


@pytest.mark.parametrize("case", sorted(REAL_CASES))
def test_reference_prompts_are_the_golden_tests(case):
    """The stored references ran on the golden data's token ids (tested against llama.cpp's tokenizer there)."""
    golden = GOLDEN_NAMES[REAL_CASES[case][0]]
    logits_recs, greedy_recs = records(case)
    for kind, recs in (("logits", logits_recs), ("greedy", greedy_recs)):
        assert [(r["name"], r["ids"]) for r in recs] == [(r["name"], r["ids"]) for r in load(golden, kind)]
