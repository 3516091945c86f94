"""Speed at real model shapes: Llama-3.2-1B, Llama-3.2-3B and a Qwen3-30B-A3B-shaped MoE, ours vs llama.cpp
(and ik_llama.cpp), prefill and decode, with decode's achieved bytes/s against measured copy bandwidth.

    python benchmarks/shapes_bench.py [--llama-bin /work/llama-build/build/bin] [--ik-llama-bench PATH]
        [--shapes 1b,3b,moe] [--quants Q4_K_M,Q4_0] [--rounds 3] [--threads 2] [--moe-layers 16] [--cache-dir DIR]

Weights are random (speed does not depend on their values). 1B and 3B are written once as F16 GGUFs under
--cache-dir (not the repository), quantized there by llama.cpp (its llama-quantize in --llama-bin, or when that
is not built, the same llama_model_quantize through llama-cpp-python), and the F16 file is deleted once every
quantization exists. The MoE keeps Qwen3-30B-A3B's per-layer shape (d 2048, 32/4 heads of 128, 128 experts of
width 768, 8 used, vocab 151936, untied LM head) with --moe-layers of its 48 layers (default 16: all 48 are
~18 GB at Q4_K_M, and our engine's repacked copy needs as much again, on a 24 GiB machine; the F16
intermediate of 48 layers is 61 GB), and is written already quantized (--write-quantized): every tensor
gets the type llama-quantize gives it for that file type (file_type; equal on a small MoE file), with
random blocks whose scales are small and finite.

Per round, for each file: ours through lanes.Model (runtime_bench.ours: 128-token prompt in one batch,
then 128 decoded tokens), llama.cpp's `llama-bench -p 128 -n 128 -t T -r 1` (when --llama-bin has none:
llama-cpp-python on that build's libllama.so, LLAMA_CPP_LIB_PATH, runtime_bench.theirs), then ik_llama.cpp's
llama-bench if given (llama-bench with its default options). Medians over rounds. Copy bandwidth is
measured in the same run before and after the rounds: numpy copies of a 1 GiB array split over T threads (numpy releases the GIL while
copying), counted as bytes read + bytes written per second (STREAM "copy" convention); the best of 5.
Decode bytes/token = the bytes of every weight a token reads (all tensors except the embedding table, which
is read one row per token unless it is also the LM head; MoE experts at n_used/n_expert of their bytes).
Prints the table, then ONE summary line starting with "shapes_bench:".
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_bench import N_PROMPT, llama_bench, ours, prompt_ids, theirs  # noqa: E402

from lanes import Model  # noqa: E402

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Shape:
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    tied: bool
    rope_base: float
    llama3_rope: bool = False
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0


def shapes(moe_layers: int) -> dict[str, Shape]:
    return {
        "1b": Shape("llama", 16, 2048, 8192, 32, 8, 64, 128256, True, 500000.0, llama3_rope=True),
        "3b": Shape("llama", 28, 3072, 8192, 24, 8, 128, 128256, True, 500000.0, llama3_rope=True),
        "moe": Shape("qwen3moe", moe_layers, 2048, 6144, 32, 4, 128, 151936, False, 1000000.0,
                     n_expert=128, n_expert_used=8, n_ff_exp=768),
    }


def llama3_rope_factors(head_dim: int, base: float) -> np.ndarray:
    """rope_freqs.weight for Llama 3.2's rope_scaling (factor 32, low 1, high 4, original context 8192)."""
    factor, low, high, old_ctx = 32.0, 1.0, 4.0, 8192
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    wavelen = 2 * np.pi / freqs
    smooth = np.clip((old_ctx / wavelen - low) / (high - low), 0.0, 1.0)
    return (1.0 / ((1 - smooth) / factor + smooth)).astype(np.float32)


def tensor_specs(s: Shape) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, numpy shape (outer first), type) of every tensor, in file order."""
    E, qd, kvd = s.n_embd, s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    out = [("token_embd.weight", (s.n_vocab, E), Q.F16), ("output_norm.weight", (E,), Q.F32)]
    if not s.tied:
        out.append(("output.weight", (s.n_vocab, E), Q.F16))
    if s.llama3_rope:
        out.append(("rope_freqs.weight", (s.head_dim // 2,), Q.F32))
    for il in range(s.n_layer):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", (E,), Q.F32), (p + "ffn_norm.weight", (E,), Q.F32),
                (p + "attn_q.weight", (qd, E), Q.F16), (p + "attn_k.weight", (kvd, E), Q.F16),
                (p + "attn_v.weight", (kvd, E), Q.F16), (p + "attn_output.weight", (E, qd), Q.F16)]
        if s.arch == "qwen3moe":
            X, F = s.n_expert, s.n_ff_exp
            out += [(p + "attn_q_norm.weight", (s.head_dim,), Q.F32), (p + "attn_k_norm.weight", (s.head_dim,), Q.F32),
                    (p + "ffn_gate_inp.weight", (X, E), Q.F32), (p + "ffn_gate_exps.weight", (X, F, E), Q.F16),
                    (p + "ffn_up_exps.weight", (X, F, E), Q.F16), (p + "ffn_down_exps.weight", (X, E, F), Q.F16)]
        else:
            out += [(p + "ffn_gate.weight", (s.n_ff, E), Q.F16), (p + "ffn_up.weight", (s.n_ff, E), Q.F16),
                    (p + "ffn_down.weight", (E, s.n_ff), Q.F16)]
    return out


def add_keys(w: gguf.GGUFWriter, s: Shape) -> None:
    w.add_block_count(s.n_layer)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.head_dim)
    w.add_context_length(131072 if s.llama3_rope else 40960)
    w.add_layer_norm_rms_eps(1e-5 if s.arch == "llama" else 1e-6)
    w.add_rope_freq_base(s.rope_base)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        w.add_expert_feed_forward_length(s.n_ff_exp)
    # A byte-level BPE vocabulary padded to the model's size with ordinary tokens.
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>"]
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra, byte_tokens = 0, []
    for b in range(256):
        byte_tokens.append(chr(b) if b in printable else chr(0x100 + extra))
        extra += b not in printable
    fill = s.n_vocab - 256 - len(specials) - 3
    tokens = byte_tokens + ["Ġt", "he", "Ġthe"] + [f"w{i}" for i in range(fill)] + specials
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe" if s.arch == "llama" else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - len(specials)) + [3] * len(specials))
    w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(len(tokens) - 3)
    w.add_eos_token_id(len(tokens) - 2)
    w.add_add_bos_token(False)


def use_more_bits(il: int, n_layer: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v / ffn_down get Q6_K in a Q4_K_M file."""
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def file_type(name: str, ftype: str, s: Shape) -> Q:
    """The type llama-quantize gives tensor `name` of a float file quantized to `ftype` (F16: the float file)."""
    if name.endswith("norm.weight") or name in ("rope_freqs.weight",) or "gate_inp" in name:
        return Q.F32
    if ftype == "F16":
        return Q.F16
    if name == "output.weight" or (name == "token_embd.weight" and s.tied):
        return Q.Q6_K
    if ftype == "Q4_0":
        return Q.Q4_0
    il = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if ("attn_v." in name or "ffn_down" in name) and use_more_bits(il, s.n_layer):
        return Q.Q6_K
    return Q.Q4_K


# Random blocks with a small finite scale: (block bytes, offset of the f16 scale(s)) per type.
_BLOCKS = {Q.Q4_0: (18, (0,)), Q.Q4_K: (144, (0, 2)), Q.Q6_K: (210, (208,))}


def block_pool(rng: np.random.Generator, qtype: Q, num_blocks: int = 1 << 16) -> np.ndarray:
    size, scale_offsets = _BLOCKS[qtype]
    pool = rng.integers(0, 256, (num_blocks, size), dtype=np.uint8)
    for off in scale_offsets:
        pool[:, off:off + 2] = np.frombuffer(np.float16(0.001).tobytes(), dtype=np.uint8)
    return pool.reshape(-1)


def write_gguf(path: Path, s: Shape, ftype: str) -> None:
    """The shape's file with random weights, streamed out one tensor at a time. ftype F16: a float file for
    llama-quantize; Q4_K_M / Q4_0: written already quantized, with llama-quantize's per-tensor types and
    random blocks (the MoE at a size whose F16 intermediate would not fit or take too long to quantize)."""
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(1 << 24, dtype=np.float32) * 0.02).astype(np.float16)  # 16 Mi values, tiled
    pools = {q: block_pool(rng, q) for q in _BLOCKS} if ftype != "F16" else {}
    specs = [(name, shape, file_type(name, ftype, s)) for name, shape, _ in tensor_specs(s)]
    w = gguf.GGUFWriter(str(path), s.arch)
    add_keys(w, s)
    for name, shape, qtype in specs:
        if qtype in _BLOCKS:
            block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            byte_shape = (*shape[:-1], shape[-1] // block_values * block_bytes)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype)
        else:
            dtype = np.dtype(np.float16 if qtype == Q.F16 else np.float32)
            w.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, qtype) in enumerate(specs):
        n = int(np.prod(shape))
        if name == "rope_freqs.weight":
            arr = llama3_rope_factors(s.head_dim, s.rope_base)
        elif "gate_inp" in name:
            arr = pool[:n].astype(np.float32) * 50.0
        elif qtype == Q.F32:
            arr = np.ones(n, dtype=np.float32)
        elif qtype == Q.F16:
            arr = np.resize(np.roll(pool, 977 * i), n)
        else:
            block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            nbytes = n // block_values * block_bytes
            offset = (i * 7919 % 1024) * block_bytes  # whole blocks, a different start per tensor
            arr = np.resize(np.roll(pools[qtype], -offset), nbytes)
        w.write_tensor_data(arr)
    w.close()


def model_files(s: Shape, name: str, quants: list[str], cache: Path, llama_bin: Path, direct: bool) -> dict[str, Path]:
    cache.mkdir(parents=True, exist_ok=True)
    outs = {q: cache / f"{name}-{s.n_layer}L-{q}{'-direct' if direct else ''}.gguf" for q in quants}
    missing = [q for q, p in outs.items() if not p.exists()]
    for q in missing if direct else ():
        print(f"writing {outs[q]}", flush=True)
        write_gguf(outs[q].with_suffix(".tmp"), s, q)
        outs[q].with_suffix(".tmp").rename(outs[q])
    if missing and not direct:
        f16 = cache / f"{name}-{s.n_layer}L-F16.gguf"
        if not f16.exists():
            print(f"writing {f16}", flush=True)
            write_gguf(f16.with_suffix(".tmp"), s, "F16")
            f16.with_suffix(".tmp").rename(f16)
        for q in missing:
            print(f"quantizing {outs[q].name}", flush=True)
            tmp = outs[q].with_suffix(".tmp")
            quantize(f16, tmp, q, llama_bin)
            tmp.rename(outs[q])
        f16.unlink()
    return outs


def quantize(src: Path, dst: Path, qtype: str, llama_bin: Path) -> None:
    tool = llama_bin / "llama-quantize"
    if tool.exists():
        subprocess.run([str(tool), str(src), str(dst), qtype, "2"], check=True, stdout=subprocess.DEVNULL, timeout=3600)
        return
    import ctypes

    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {dst} failed")


def decode_bytes_per_token(path: Path) -> int:
    r = gguf.GGUFReader(str(path))
    n_expert = int(r.fields[f"{r.fields['general.architecture'].contents()}.expert_count"].contents()) \
        if any(k.endswith(".expert_count") for k in r.fields) else 0
    n_used = int(next(f.contents() for k, f in r.fields.items() if k.endswith(".expert_used_count"))) \
        if n_expert else 0
    tied = not any(t.name == "output.weight" for t in r.tensors)
    total = 0
    for t in r.tensors:
        nbytes = int(t.n_bytes)
        if t.name == "token_embd.weight" and not tied:
            nbytes //= int(t.shape[-1])  # one row of the table (gguf-py lists ne[0] first)
        elif "_exps." in t.name:
            nbytes = nbytes * n_used // n_expert
        total += nbytes
    return total


def copy_bandwidth(threads: int, nbytes: int = 1 << 30, reps: int = 5) -> float:
    """Best bytes (read + written) per second of a numpy copy of nbytes split over `threads` threads."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
    best = 0.0
    for _ in range(reps):
        workers = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, 2 * nbytes / (time.perf_counter() - t0))
    return best


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", type=Path, default=Path("/work/llama-build/build/bin"),
                    help="llama.cpp's build output: llama-quantize, llama-bench, or libllama.so for llama-cpp-python")
    ap.add_argument("--ik-llama-bench", metavar="PATH", help="ik_llama.cpp's built llama-bench")
    ap.add_argument("--shapes", default="1b,3b,moe")
    ap.add_argument("--quants", default="Q4_K_M,Q4_0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--moe-layers", type=int, default=16)
    ap.add_argument("--write-quantized", default="moe",
                    help="shapes written already quantized (llama-quantize's tensor types, random blocks) instead of "
                         "F16 + llama-quantize; empty for none")
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/laneserve-shapes-bench"))
    args = ap.parse_args()
    os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(args.llama_bin))
    all_shapes = shapes(args.moe_layers)
    quants = args.quants.split(",")
    files = {}
    for name in args.shapes.split(","):
        direct = name in args.write_quantized.split(",")
        for q, path in model_files(all_shapes[name], name, quants, args.cache_dir, args.llama_bin, direct).items():
            files[f"{name} {q}"] = path
    bw = [copy_bandwidth(args.threads)]
    loads = [load_average()]
    rows = []
    for label, path in files.items():
        rows.append(measure(label, path, args))
        loads.append(load_average())
    bw.append(copy_bandwidth(args.threads))
    print_table(rows, max(bw), args.threads, loads)


def measure(label: str, path: Path, args) -> dict:
    m = Model(path, threads=args.threads, ctx_size=1024)
    ids = prompt_ids(m.n_vocab)
    engines = {"ours": lambda: ours(m, ids)}
    if (args.llama_bin / "llama-bench").exists():
        engines["llama.cpp"] = lambda: llama_bench(str(args.llama_bin / "llama-bench"), str(path), args.threads)
    else:
        import llama_cpp
        llm = llama_cpp.Llama(str(path), n_threads=args.threads, n_threads_batch=args.threads, n_ctx=1024,
                              n_batch=512, verbose=False)
        theirs(llm, ids)  # warm-up
        engines["llama.cpp"] = lambda: theirs(llm, ids)
    if args.ik_llama_bench:
        engines["ik_llama"] = lambda: llama_bench(args.ik_llama_bench, str(path), args.threads)
    ours(m, ids)  # warm-up: page the weights in
    res: dict[str, list[tuple[float, float]]] = {who: [] for who in engines}
    for rnd in range(args.rounds):  # alternate so machine noise hits every engine alike
        for who, run in engines.items():
            res[who].append(run())
            print(f"{label:12s} round {rnd + 1} {who:9s} pp{N_PROMPT} {res[who][-1][0]:.1f} tok/s, "
                  f"tg {res[who][-1][1]:.2f} tok/s, load average {load_average()}", flush=True)
    del m, engines
    med = {who: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
           for who, runs in res.items()}
    for who, runs in res.items():
        print(f"{label:12s} {who:9s} pp{N_PROMPT} " + ", ".join(f"{r[0]:.1f}" for r in runs)
              + "  tg " + ", ".join(f"{r[1]:.2f}" for r in runs), flush=True)
    return {"label": label, "med": med, "bytes": decode_bytes_per_token(path), "size": path.stat().st_size}


def print_table(rows: list[dict], bw: float, threads: int, loads: list[str]) -> None:
    print(f"\ncopy bandwidth ({threads} threads, read+write): {bw / 1e9:.1f} GB/s; load average during run: "
          + " | ".join(loads))
    print("| model | file GB | engine | pp128 tok/s | tg128 tok/s | decode GB/s | of copy bw | ours/it pp | ours/it tg |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = []
    for row in rows:
        ours_pp, ours_tg = row["med"]["ours"]
        part = [row["label"].replace(" ", ":")]
        for who, (pp, tg) in row["med"].items():
            gbs = row["bytes"] * tg / 1e9
            ratio = "" if who == "ours" else f"{ours_pp / pp:.2f}× | {ours_tg / tg:.2f}×"
            print(f"| {row['label']} | {row['size'] / 1e9:.2f} | {who} | {pp:.1f} | {tg:.2f} | {gbs:.1f} | "
                  f"{100 * row['bytes'] * tg / bw:.0f}% | {ratio or '— | —'} |")
            if who != "ours":
                part.append(f"{who}:pp={ours_pp / pp:.2f}x,tg={ours_tg / tg:.2f}x")
        part.append(f"ours_bw={100 * row['bytes'] * ours_tg / bw:.0f}%")
        summary.append(" ".join(part))
    print(f"shapes_bench: threads={threads} copy_bw={bw / 1e9:.1f}GB/s " + " | ".join(summary))


if __name__ == "__main__":
    main()
