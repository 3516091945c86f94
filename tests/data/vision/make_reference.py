"""Regenerates reference.json / reference.npz: llama.cpp's mtmd on random-weight projectors paired with the real
text models, for tests/csrc/vision/ (encoder embeddings, prompt layout) and the lane tests (greedy continuations).

Needs llama-cpp-python 0.3.36 built with libmtmd (llama.cpp 0c1e57098), numpy and gguf in the running
interpreter, and the two real models (lanes.smollm2_path(), lanes.gemma3_path()):

    /path/to/llama-venv/bin/python tests/data/vision/make_reference.py --smollm2 FILE --gemma3 FILE \
        [--lib DIR_WITH_libmtmd.so]

--lib points llama_cpp at a directory holding libllama/libggml*/libmtmd of one build (an installed wheel that
lacks libmtmd can borrow the lib/ folder of the wheel that has it).

For each projector of tests/csrc/vision/mmproj_gguf.SPECS (written deterministically; its sha256 is recorded) and
each of its IMAGES (raw RGB handed to mtmd_bitmap_init, so no image codec is involved), it tokenizes PROMPT with
the image marker, and stores:
  - the chunk layout: text chunks' token ids, image chunks' token counts, the total prompt token count;
  - per image chunk, encoded twice (flash attention off: fp32 attention; on, mtmd's default on CPU: K and V in
    fp16): the off embeddings of rows ROWS (first, thirds, last) and every row's L2 norm, plus the largest and
    RMS |on − off| difference — the numerical variation of llama.cpp itself that bounds what any
    differently-rounded encoder can be asked to match;
  - greedy continuation (GREEDY tokens) after the prompt with the flash-attention-off embeddings, each step's
    top-1/top-2 log-prob margin, and the first step's top-20 log-probs.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "csrc" / "vision"))
import mmproj_gguf  # noqa: E402

MARKER = "<__media__>"
PROMPT = {
    "gemma3": "<start_of_turn>user\n" + MARKER + "Describe the picture.<end_of_turn>\n<start_of_turn>model\n",
    "idefics3": "<|im_start|>user\n" + MARKER + "Describe the picture.<|im_end|>\n<|im_start|>assistant\n",
}
GREEDY = 16
TOP = 20


def row_picks(n: int) -> list[int]:
    return sorted({0, n // 3, (2 * n) // 3, n - 1})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", required=True)
    ap.add_argument("--gemma3", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    if args.lib:
        os.environ["LLAMA_CPP_LIB_PATH"] = args.lib
        os.environ["MTMD_CPP_LIB"] = args.lib
    import llama_cpp
    import llama_cpp.mtmd_cpp as mt
    from llama_cpp import Llama

    out_json: dict = {"marker": MARKER, "prompt": PROMPT, "greedy": GREEDY, "projectors": {}}
    arrays: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in mmproj_gguf.SPECS.items():
            mmproj = mmproj_gguf.write_mmproj(Path(tmp) / f"{name}.gguf", spec)
            if name == "idefics3":
                text = mmproj_gguf.add_vocab_tokens(Path(args.smollm2), Path(tmp) / "smollm2-vlm.gguf",
                                                    mmproj_gguf.IDEFICS3_TOKENS)
            else:
                text = Path(args.gemma3)
            llm = Llama(str(text), n_ctx=2048, n_batch=512, n_threads=args.threads, verbose=False, seed=0)
            model, lctx = llm._model.model, llm._ctx.ctx

            def mctx_with(flash: int):
                p = mt.mtmd_context_params_default()
                p.use_gpu = False
                p.n_threads = args.threads
                p.flash_attn_type = flash
                p.warmup = False
                p.media_marker = MARKER.encode()
                ctx = mt.mtmd_init_from_file(str(mmproj).encode(), model, p)
                assert ctx, f"mtmd_init_from_file failed for {name}"
                return ctx

            ctxs = {"off": mctx_with(llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED),
                    "on": mctx_with(llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED)}
            record = {"mmproj_sha256": sha256(mmproj), "text_sha256": sha256(text) if name == "idefics3" else None,
                      "images": {}}
            for img in mmproj_gguf.IMAGES[name]:
                pix = np.ascontiguousarray(mmproj_gguf.image_pixels(img))
                chunks_by_mode = {}
                for mode, mctx in ctxs.items():
                    bmp = mt.mtmd_bitmap_init(img.width, img.height,
                                              pix.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)))
                    chunks = mt.mtmd_input_chunks_init()
                    text_in = mt.mtmd_input_text(PROMPT[name].encode(), len(PROMPT[name].encode()), True, True)
                    bitmaps = (mt.mtmd_bitmap_p_ctypes * 1)(bmp)
                    rc = mt.mtmd_tokenize(mctx, chunks, ctypes.byref(text_in), bitmaps, 1)
                    assert rc == 0, f"mtmd_tokenize failed ({rc}) for {name}/{img.name}"
                    chunks_by_mode[mode] = (chunks, bmp)
                layout, n_prompt = [], 0
                chunks_off, chunks_on = chunks_by_mode["off"][0], chunks_by_mode["on"][0]
                for i in range(mt.mtmd_input_chunks_size(chunks_off)):
                    ch = mt.mtmd_input_chunks_get(chunks_off, i)
                    n = mt.mtmd_input_chunk_get_n_tokens(ch)
                    n_prompt += n
                    if mt.mtmd_input_chunk_get_type(ch) == mt.MTMD_INPUT_CHUNK_TYPE_TEXT:
                        n_tok = ctypes.c_size_t(0)
                        ptr = mt.mtmd_input_chunk_get_tokens_text(ch, ctypes.byref(n_tok))
                        layout.append({"type": "text", "tokens": [int(ptr[k]) for k in range(n_tok.value)]})
                        continue
                    embd = {}
                    for mode, chs in (("off", chunks_off), ("on", chunks_on)):
                        mctx = ctxs[mode]
                        assert mt.mtmd_encode_chunk(mctx, mt.mtmd_input_chunks_get(chs, i)) == 0
                        n_embd = llama_cpp.llama_model_n_embd(model)
                        ptr = mt.mtmd_get_output_embd(mctx)
                        embd[mode] = np.ctypeslib.as_array(ptr, shape=(n * n_embd,)).reshape(n, n_embd).copy()
                    diff = np.abs(embd["on"] - embd["off"])
                    rows = row_picks(n)
                    key = f"{name}/{img.name}/{len(layout)}"
                    arrays[key + "/rows"] = embd["off"][rows].astype(np.float32)
                    arrays[key + "/norms"] = np.linalg.norm(embd["off"], axis=1).astype(np.float32)
                    layout.append({"type": "image", "n_tokens": n, "rows": rows, "key": key,
                                   "fa_max_abs_diff": float(diff.max()),
                                   "fa_rms_diff": float(np.sqrt((diff ** 2).mean())),
                                   "rms": float(np.sqrt((embd["off"] ** 2).mean()))})
                # Greedy continuation over the prompt with the flash-attention-off embeddings.
                llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(lctx), True)
                new_n_past = llama_cpp.llama_pos(0)
                rc = mt.mtmd_helper_eval_chunks(ctxs["off"], lctx, chunks_off, 0, 0, 512, True,
                                                ctypes.byref(new_n_past))
                assert rc == 0, f"eval_chunks failed ({rc})"
                n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
                greedy, margins, first_top = [], [], None
                for step in range(GREEDY):
                    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,))
                    lp = log_softmax(logits)
                    order = np.argsort(-lp)
                    if step == 0:
                        first_top = [[int(t), float(lp[t])] for t in order[:TOP]]
                    tok = int(order[0])
                    greedy.append(tok)
                    margins.append(float(lp[order[0]] - lp[order[1]]))
                    arr = (llama_cpp.llama_token * 1)(tok)
                    assert llama_cpp.llama_decode(lctx, llama_cpp.llama_batch_get_one(arr, 1)) == 0
                record["images"][img.name] = {"width": img.width, "height": img.height, "seed": img.seed,
                                              "n_prompt_tokens": n_prompt, "n_past": int(new_n_past.value),
                                              "layout": layout, "greedy_ids": greedy, "margins": margins,
                                              "first_top": first_top}
                for chunks, bmp in chunks_by_mode.values():
                    mt.mtmd_input_chunks_free(chunks)
                    mt.mtmd_bitmap_free(bmp)
                print(name, img.name, n_prompt, [c.get("n_tokens", len(c.get("tokens", []))) for c in layout],
                      greedy[:6], flush=True)
            for mctx in ctxs.values():
                mt.mtmd_free(mctx)
            del llm
            out_json["projectors"][name] = record
    (HERE / "reference.json").write_text(json.dumps(out_json, indent=1) + "\n", encoding="utf-8")
    np.savez_compressed(HERE / "reference.npz", **arrays)


if __name__ == "__main__":
    main()
