"""llama.cpp's outputs on a GGUF, for the scripts that make reference data (tests/data/*/make_reference.py;
run with llama-cpp-python 0.3.36, never at test time)."""
from __future__ import annotations

import ctypes

import numpy as np


def quantize(src, dst, ftype_name: str) -> None:
    """llama.cpp's own quantizer (llama_model_quantize: llama-quantize's code) from src to dst, to the
    file type llama_cpp.<ftype_name> (e.g. "LLAMA_FTYPE_MOSTLY_Q4_K_M")."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, (dst, rc)


def teacher_forced_and_greedy(path, ids: list[int], greedy_steps: int) -> tuple[np.ndarray, list[int], list[float]]:
    """(logits of every position of `ids` [n, n_vocab] as float64, then `greedy_steps` greedy ids from
    the end of `ids`, each with its top-1 − top-2 logit margin)."""
    from llama_cpp import Llama

    llm = Llama(str(path), logits_all=True, n_ctx=64, n_threads=2, n_batch=64, verbose=False, seed=0)
    llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    greedy, margins = [], []
    last = logits[-1]
    for _ in range(greedy_steps):
        order = np.argsort(-last)[:2]
        greedy.append(int(order[0]))
        margins.append(float(last[order[0]] - last[order[1]]))
        llm.eval([int(order[0])])
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    del llm
    return logits, greedy, margins


def one_token_at_a_time(path, ids: list[int]) -> np.ndarray:
    """llama.cpp's logits of every position of `ids` [n, n_vocab], decoding one token per batch."""
    from llama_cpp import Llama

    llm = Llama(str(path), logits_all=True, n_ctx=64, n_threads=2, n_batch=64, verbose=False, seed=0)
    for t in ids:
        llm.eval([t])
    logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    del llm
    return logits
