"""Regenerates the tiny low-bit GGUFs and llama.cpp's outputs on them (tests/csrc/model/test_lowbit_types.py).

Needs llama-cpp-python 0.3.36 (its `llama_model_quantize` is llama-quantize's code), numpy and gguf:

    /path/to/llama-venv/bin/python tests/data/lowbit/make_reference.py

For each llama.cpp file type of TYPES it writes a tiny random-weight llama GGUF in F32 (tiny_gguf.py,
deterministic from CONFIG and SEED), quantizes it with llama.cpp to <name>.gguf next to this script
(kept: the tests cannot run llama.cpp), then runs llama.cpp over IDS teacher-forced (all logits) and
greedily for GREEDY steps from the prompt, and stores in reference.json per file: the tensor types,
llama.cpp's logits, its distance to the float64 reference forward on the same (dequantized) weights,
and the greedy ids with their top-1/top-2 logit margins.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "csrc" / "model"))
from llama_cpp_run import quantize, teacher_forced_and_greedy  # noqa: E402
from tiny_gguf import reference_logits, relative_error, write_tiny_gguf  # noqa: E402
from lowbit_common import CONFIG, IDS, SEED, TYPES, file_weights  # noqa: E402

GREEDY = 16


def main() -> None:
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "f32.gguf"
        write_tiny_gguf(src, CONFIG, seed=SEED)
        for name, ftype_name in TYPES.items():
            dst = HERE / f"{name}.gguf"
            quantize(src, dst, ftype_name)
            weights, types = file_weights(dst)
            ref = reference_logits(CONFIG, weights, IDS)
            logits, greedy, margins = teacher_forced_and_greedy(dst, IDS, GREEDY)
            out[name] = {
                "tensor_types": types,
                "ids": IDS,
                "logits": np.round(logits, 5).tolist(),
                "llama_ref_max_abs": float(np.abs(logits - ref).max()),
                "llama_ref_rel": relative_error(logits, ref),
                "logit_std": float(ref.std()),
                "greedy_ids": greedy,
                "margins": margins,
            }
            print(name, {k: v for k, v in out[name].items() if k in ("tensor_types", "llama_ref_max_abs", "llama_ref_rel", "logit_std")})
    (HERE / "reference.json").write_text(json.dumps(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
