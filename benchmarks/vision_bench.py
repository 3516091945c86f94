"""Image encode time per encoder input: laneserve's vision encoder (lanes._runtime.VisionEncoder) next to
llama.cpp's mtmd (mtmd_encode_chunk) on the same random-weight projector and the same preprocessed image, at 1
and 2 threads. One line per (projector, threads, round): median of --repeat runs each, wall and process CPU time
(all threads, spinning included: steadier than wall time on a loaded machine), mtmd / ours ratios (> 1: we are
faster). --rounds N alternates the two N times (mtmd, then ours, per round) so that both sides of each ratio
see the same machine load; a last line per (projector, threads) gives the median ratio over the rounds.

The projectors are SmolVLM-256M-shaped (idefics3: 512-px tiles, 16-px patches, hidden 768, 12 heads, FFN 3072,
scale 4 → 64 embeddings per tile) and a Gemma-3-style SigLIP at 448 px / 14-px patches (1024 patches pooled 4×4 →
64 embeddings), both with --layers blocks (default 6; real ones have 12 and 27), F16 matrices, paired with
SmolLM2-135M (vocabulary extended with SmolVLM's markers) and Gemma 3 270M.

    python benchmarks/vision_bench.py --llama-python /path/to/llama-venv/bin/python [--lib DIR] [--repeat 5] [--rounds 3]

mtmd runs in that interpreter (llama-cpp-python 0.3.36 with libmtmd; --lib as in tests/data/vision/
make_reference.py). Timings on a shared machine are noisy: compare the two columns of one run only.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "csrc" / "vision"))
import mmproj_gguf  # noqa: E402

MTMD_SCRIPT = r"""
import ctypes, json, os, sys, time
import numpy as np
args = json.loads(sys.argv[1])
if args["lib"]:
    os.environ["LLAMA_CPP_LIB_PATH"] = args["lib"]; os.environ["MTMD_CPP_LIB"] = args["lib"]
import llama_cpp, llama_cpp.mtmd_cpp as mt
from llama_cpp import Llama
llm = Llama(args["text"], n_ctx=512, verbose=False)
pix = np.load(args["image"])
out = {}
for threads in args["threads"]:
    p = mt.mtmd_context_params_default()
    p.use_gpu = False; p.n_threads = threads; p.warmup = False
    ctx = mt.mtmd_init_from_file(args["mmproj"].encode(), llm._model.model, p)
    bmp = mt.mtmd_bitmap_init(pix.shape[1], pix.shape[0], pix.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)))
    chunks = mt.mtmd_input_chunks_init()
    text = mt.mtmd_input_text(b"<__media__>", 11, False, True)
    assert mt.mtmd_tokenize(ctx, chunks, ctypes.byref(text), (mt.mtmd_bitmap_p_ctypes * 1)(bmp), 1) == 0
    image = next(mt.mtmd_input_chunks_get(chunks, i) for i in range(mt.mtmd_input_chunks_size(chunks))
                 if mt.mtmd_input_chunk_get_type(mt.mtmd_input_chunks_get(chunks, i)) != mt.MTMD_INPUT_CHUNK_TYPE_TEXT)
    mt.mtmd_encode_chunk(ctx, image)  # warm-up
    times = []
    for _ in range(args["repeat"]):
        t, c = time.perf_counter(), time.process_time()
        assert mt.mtmd_encode_chunk(ctx, image) == 0
        times.append((time.perf_counter() - t, time.process_time() - c))
    out[threads] = times
    mt.mtmd_free(ctx)
print(json.dumps(out))
"""

BENCH = {
    "idefics3": dataclasses.replace(mmproj_gguf.SPECS["idefics3"], image_size=512, patch_size=16, merge=4, n_embd=768,
                                    n_ff=3072, n_head=12, longest_edge=512, seed=7),
    "gemma3": dataclasses.replace(mmproj_gguf.SPECS["gemma3"], image_size=448, patch_size=14, merge=4, n_embd=768,
                                  n_ff=3072, n_head=12, seed=8),
}


def medians(pairs: list) -> tuple[float, float]:
    """Per-column medians of (wall, CPU) pairs."""
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--lib", default="")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--projectors", nargs="+", choices=list(BENCH), default=list(BENCH))
    args = ap.parse_args()
    import lanes
    from PIL import Image

    from gateway.vision.preprocess import VisionConfig, preprocess
    from lanes import _runtime as rt

    with tempfile.TemporaryDirectory() as tmp:
        for name in args.projectors:
            spec = BENCH[name]
            spec = dataclasses.replace(spec, n_layer=args.layers)
            mmproj = mmproj_gguf.write_mmproj(Path(tmp) / f"{name}.gguf", spec)
            if name == "idefics3":
                text = mmproj_gguf.add_vocab_tokens(Path(lanes.smollm2_path()), Path(tmp) / "smollm2-vlm.gguf",
                                                    mmproj_gguf.IDEFICS3_TOKENS)
            else:
                text = Path(lanes.gemma3_path())
            # One encoder input's worth of pixels: exactly image_size², so mtmd's first chunk is that input.
            img = mmproj_gguf.TestImage("bench", spec.image_size, spec.image_size, 5)
            pix = mmproj_gguf.image_pixels(img)
            np.save(Path(tmp) / "image.npy", pix)
            req = {"lib": args.lib, "text": str(text), "mmproj": str(mmproj), "image": str(Path(tmp) / "image.npy"),
                   "threads": args.threads, "repeat": args.repeat}
            encs = {t: rt.VisionEncoder(str(mmproj), n_threads=t) for t in args.threads}
            x = preprocess(Image.fromarray(pix), VisionConfig.from_encoder(encs[args.threads[0]])).inputs[0]
            ratios = {t: [] for t in args.threads}
            for rnd in range(args.rounds):
                res = subprocess.run([args.llama_python, "-c", MTMD_SCRIPT, json.dumps(req)], capture_output=True,
                                     text=True, check=True)
                theirs = json.loads(res.stdout.strip().splitlines()[-1])
                for threads in args.threads:
                    enc = encs[threads]
                    enc.encode(x)  # warm-up
                    ours = []
                    for _ in range(args.repeat):
                        t, c = time.perf_counter(), time.process_time()
                        enc.encode(x)
                        ours.append((time.perf_counter() - t, time.process_time() - c))
                    (a, a_cpu), (b, b_cpu) = medians(ours), medians(theirs[str(threads)])
                    ratios[threads].append((b / a, b_cpu / a_cpu))
                    print(f"{name:9s} {spec.image_size}px {(spec.image_size // spec.patch_size) ** 2} patches "
                          f"{spec.n_layer} blocks  threads={threads}  round {rnd + 1}  ours {a * 1e3:7.1f} ms "
                          f"(CPU {a_cpu * 1e3:7.1f})  mtmd {b * 1e3:7.1f} ms (CPU {b_cpu * 1e3:7.1f})  "
                          f"ratio {b / a:5.2f}x (CPU {b_cpu / a_cpu:5.2f}x)", flush=True)
            if args.rounds > 1:
                for threads in args.threads:
                    wall, cpu = medians(ratios[threads])
                    print(f"{name:9s} threads={threads}  median ratio over {args.rounds} rounds {wall:5.2f}x "
                          f"(CPU time {cpu:5.2f}x)", flush=True)

if __name__ == "__main__":
    main()
