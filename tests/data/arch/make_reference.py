"""Regenerates llama.cpp's outputs for tests/csrc/model/test_arch_llama_cpp.py.

Needs llama-cpp-python 0.3.36, numpy and gguf:  /path/to/llama-venv/bin/python tests/data/arch/make_reference.py [NAME ...]
(names: only those cases, the others kept as they are in reference.json).

For each case of arch_cases.CASES it writes the tiny GGUF (tiny_gguf.py, deterministic; the cases of
LLAMA_QUANTIZED in F32, then quantized by llama.cpp to <name>.gguf next to this script, kept), runs llama.cpp
over IDS teacher-forced (all logits) and greedily for GREEDY steps, renders MESSAGES with the file's chat
template through llama.cpp's llama_chat_apply_template (JINJA_RENDERED cases: llama-cpp-python's
Jinja2ChatFormatter, llama.cpp's Python-side Jinja renderer), and stores in reference.json: the file's sha256,
the logits, llama.cpp's maximum distance to the float64 reference forward, greedy ids with their
top-1/top-2 margins, and the rendering (SAME_AS_LLAMA_QUANTIZED cases: also that llama.cpp's quantizer makes
their tensors); MoE cases also the smallest router logit gap between the last
chosen and the first unchosen expert over the prompt (tiny_moe.router_min_gap) and llama.cpp's distance
between its batched logits and the same prompt decoded one token per batch, and quantized ones
their tensor types.
"""
from __future__ import annotations

import ctypes
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "csrc" / "model"))
from arch_cases import CASES, IDS, JINJA_RENDERED, LLAMA_QUANTIZED, MESSAGES, SAME_AS_LLAMA_QUANTIZED, sha256  # noqa: E402
from llama_cpp_run import one_token_at_a_time, quantize, teacher_forced_and_greedy  # noqa: E402
from lowbit_common import file_weights  # noqa: E402
from tiny_gguf import reference_logits, write_tiny_gguf  # noqa: E402
from tiny_moe import router_min_gap  # noqa: E402

GREEDY = 16


def render(name: str, cfg) -> str:
    import llama_cpp

    if name in JINJA_RENDERED:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        return Jinja2ChatFormatter(cfg.chat_template, eos_token="", bos_token="")(messages=MESSAGES).prompt

    msgs = (llama_cpp.llama_chat_message * len(MESSAGES))()
    keep = []
    for i, m in enumerate(MESSAGES):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        msgs[i].role, msgs[i].content = role, content
    buf = ctypes.create_string_buffer(8192)
    n = llama_cpp.llama_chat_apply_template(cfg.chat_template.encode(), msgs, len(MESSAGES), True, buf, len(buf))
    assert 0 < n < len(buf), n
    return buf.raw[:n].decode()


def tensors(path: Path) -> dict[str, tuple[str, bytes]]:
    import gguf

    return {t.name: (t.tensor_type.name, bytes(t.data)) for t in gguf.GGUFReader(str(path)).tensors}


def same_as_llama_quantized(name: str, path: Path, tmp: str) -> bool:
    """True when llama.cpp's quantizer, run on SAME_AS_LLAMA_QUANTIZED's F32 case, writes exactly path's tensors."""
    src_name, ftype = SAME_AS_LLAMA_QUANTIZED[name]
    src_cfg, src_seed = CASES[src_name]
    src, dst = Path(tmp) / f"{name}-src.gguf", Path(tmp) / f"{name}-llama.gguf"
    write_tiny_gguf(src, src_cfg, seed=src_seed)
    quantize(src, dst, ftype)
    return tensors(dst) == tensors(path)


def main() -> None:
    only = set(sys.argv[1:])
    unknown = only - set(CASES)
    assert not unknown, f"no such case: {sorted(unknown)}"
    ref_path = HERE / "reference.json"
    out = json.loads(ref_path.read_text("utf-8")) if only and ref_path.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cfg, seed) in CASES.items():
            if only and name not in only:
                continue
            path = Path(tmp) / f"{name}.gguf"
            weights = write_tiny_gguf(path, cfg, seed=seed)
            types = None
            if name in LLAMA_QUANTIZED:
                src, path = path, HERE / f"{name}.gguf"
                quantize(src, path, LLAMA_QUANTIZED[name])
                weights, types = file_weights(path)
            ffn_inputs: list = []
            ref = reference_logits(cfg, weights, IDS, ffn_inputs)
            logits, greedy, margins = teacher_forced_and_greedy(path, IDS, GREEDY)
            out[name] = {"sha256": sha256(path), "ids": IDS, "logits": np.round(logits, 5).tolist(),
                         "llama_ref_max_abs": float(np.abs(logits - ref).max()), "logit_std": float(ref.std()),
                         "greedy_ids": greedy, "margins": margins,
                         "chat": render(name, cfg) if cfg.chat_template else None}
            if cfg.n_expert:
                out[name]["router_min_gap"] = router_min_gap(cfg, weights, ffn_inputs)
                single = one_token_at_a_time(path, IDS)
                out[name]["llama_batch_vs_one_token_max_abs"] = float(np.abs(logits - single).max())
            if types is not None:
                out[name]["tensor_types"] = types
            if name in SAME_AS_LLAMA_QUANTIZED:
                out[name]["same_as_llama_quantized"] = same_as_llama_quantized(name, path, tmp)
                assert out[name]["same_as_llama_quantized"], f"{name}: llama.cpp's quantizer writes other tensors"
            print(name, out[name]["llama_ref_max_abs"], out[name]["logit_std"], out[name].get("router_min_gap"),
                  out[name].get("llama_batch_vs_one_token_max_abs"),
                  types, repr(out[name]["chat"]))
    out = {name: out[name] for name in CASES if name in out}  # case order
    ref_path.write_text(json.dumps(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
