"""Greedy output with an adapter, requested as `model: NAME` through the `openai` and `ollama`
clients of a real laneserve (`--lora NAME=PATH`), equals llama-server's with the same adapter
(`--lora PATH`) on the same raw prompts — up to llama-server's first near-tie.

The reference is tests/data/lora/server-<case>.json (make_server_reference.py: llama-server of
llama.cpp 0c1e57098, the golden data's, greedy, n_probs 2); the adapter is rebuilt here from its
spec and seed (lora_gguf.REAL_CASES, byte-identical). Raw prompts (/v1/completions, Ollama
/api/generate with raw: true) keep chat templates out of the comparison; the prompt's token ids are
checked against llama-server's. Near-ties: llama-server's own top-1/top-2 logit margin at each step;
at a step below the golden tests' margin (golden.GATES: 0.5 for SmolLM2, 1.0 for Gemma 3) another
rounding path may pick the other token, so the outputs may part there and only there: until they
part they must be equal token for token, past near-ties both resolved the same way included. The base model (`model: BASE`) is compared the same way against
llama-server at adapter scale 0, so the adapter's effect, not only the base's, is what is checked."""
from __future__ import annotations

import codecs
import json
import shutil
import sys
from pathlib import Path

import pytest

from ..conftest import running_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "csrc" / "model"))
from golden import GATES, GEMMA3, SMOLLM2, first_near_tie  # noqa: E402
from lora_gguf import REAL_CASES, cached_adapter  # noqa: E402

pytestmark = pytest.mark.real_model
DATA = Path(__file__).resolve().parents[2] / "data" / "lora"
MARGIN = {"smollm2": GATES[SMOLLM2].margin, "gemma3": GATES[GEMMA3].margin}
CASES = {"smollm2": "smollm2-r16-f16-all", "gemma3": "gemma3-r8-f32-all"}  # make_server_reference.CASES


def reference(model: str) -> dict:
    path = DATA / f"server-{CASES[model]}.json"
    if not path.exists():
        pytest.skip(f"no llama-server reference {path.name} (run tests/data/lora/make_server_reference.py)")
    return json.loads(path.read_text(encoding="utf-8"))


def expected(gen: dict, margin: float) -> tuple[str, bool]:
    """(llama-server's text up to its first near-tie, whether that is all of it)."""
    k = first_near_tie(gen["margins"], margin)
    if k == len(gen["ids"]):
        return gen["text"], True
    raw = b"".join(bytes(b) for b in gen["bytes"][:k])
    return codecs.getincrementaldecoder("utf-8")().decode(raw, final=False), False  # a cut character: left out


def follows(ours: str, gen: dict, margin: float, max_tokens: int) -> bool:
    """Ours is llama-server's output token for token until the two part, and they part only at one
    of llama-server's near-ties (after a near-tie both took the same way, the comparison goes on)."""
    raw = ours.encode("utf-8")
    pos = 0
    for k, token in enumerate(bytes(b) for b in gen["bytes"]):
        if raw[pos:pos + len(token)] != token:
            if pos >= len(raw):  # ours ended: only a character cut by max_tokens may be missing
                tail = b"".join(bytes(b) for b in gen["bytes"][k:])
                return codecs.getincrementaldecoder("utf-8")().decode(tail, final=False) == ""
            return gen["margins"][k] < margin
        pos += len(token)
    # Ours went on where llama-server ended its generation early: that step's margin is not recorded.
    return pos == len(raw) or len(gen["ids"]) < max_tokens


@pytest.fixture(scope="module", params=sorted(CASES))
def served(request, tmp_path_factory):
    model = request.param
    ref = reference(model)
    import lanes

    _, spec, scale = REAL_CASES[ref["case"]]
    assert scale == 1.0, "`model: NAME` applies an adapter at scale 1"
    base = Path(lanes.smollm2_path() if model == "smollm2" else lanes.gemma3_path())
    tmp = tmp_path_factory.mktemp(f"lora-{model}")
    adapter = tmp / "styled.gguf"
    shutil.copy(cached_adapter(base, spec), adapter)
    with running_server(tmp, "--model", model, "--lora", f"styled={adapter}") as srv:
        yield model, ref, srv


def test_reference_is_meaningful(served):
    model, ref, _ = served
    from lanes import _runtime, gemma3_path, smollm2_path

    tok = _runtime.Tokenizer(str(smollm2_path() if model == "smollm2" else gemma3_path()))
    for rec in ref["records"]:  # the prompt reaches both servers as the same tokens
        assert list(tok.encode(rec["prompt"], True, False)) == rec["prompt_ids"], rec["prompt"]
    assert sum(rec["adapter"]["ids"] != rec["base"]["ids"] for rec in ref["records"]) >= len(ref["records"]) // 2


@pytest.mark.parametrize("name,kind", [("styled", "adapter"), ("BASE", "base")])
def test_openai_greedy_equals_llama_server(served, name, kind):
    import openai

    model, ref, srv = served
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="x", max_retries=0, timeout=300)
    for rec in ref["records"]:
        out = client.completions.create(model=model if name == "BASE" else name, prompt=rec["prompt"],
                                        max_tokens=ref["max_tokens"], temperature=0)
        ours = out.choices[0].text
        assert follows(ours, rec[kind], MARGIN[model], ref["max_tokens"]), (rec["prompt"], ours,
                                                                            expected(rec[kind], MARGIN[model]))


def test_ollama_greedy_equals_llama_server(served):
    import ollama

    model, ref, srv = served
    client = ollama.Client(host=srv.base_url, timeout=300)
    for rec in ref["records"]:
        out = client.generate(model="styled:latest", prompt=rec["prompt"], raw=True,
                              options={"temperature": 0, "num_predict": ref["max_tokens"], "repeat_penalty": 1.0})
        margin = MARGIN[model]
        assert follows(out.response, rec["adapter"], margin, ref["max_tokens"]), (rec["prompt"], out.response,
                                                                                  expected(rec["adapter"], margin))
