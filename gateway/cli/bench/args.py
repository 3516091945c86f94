"""`laneserve bench` flags: one per BenchConfig field (same name, dashes for underscores)."""
from __future__ import annotations

import argparse

from gateway.cli.bench.config import FIELDS, BenchConfig, BenchConfigError
from lanes.registry import TEXT_MODELS

_HELP = {
    "url": "OpenAI-compatible server to measure (http://HOST:PORT); default: start laneserve for the run "
           "on a free 127.0.0.1 port and stop it after",
    "url2": "a second server, measured after the first with the same prompts; tables show the ratio",
    "model": "model name sent in requests (default: the first id of the server's /v1/models)",
    "model2": "model name for --url2 (default: the first id of its /v1/models)",
    "label": "name of the first server in tables and plot (default: laneserve, or HOST:PORT)",
    "label2": "name of the second server",
    "serve_model": f"what a started laneserve serves: alias ({', '.join(TEXT_MODELS)}), .gguf path or "
                   "NAME=PATH_OR_ALIAS (default smollm2)",
    "serve_args": "extra `laneserve serve` flags for a started server, e.g. --serve-args='--threads 2'",
    "tokenizer": "model whose tokenizer sizes the prompts: alias or .gguf path (default: --serve-model); "
                 "give the GGUF the servers run so prompt lengths are exact",
    "endpoint": "chat (/v1/chat/completions, default) or completions (/v1/completions)",
    "prompt_format": "text (default) or ids: token-id prompts (with --endpoint completions)",
    "input_tokens": "prompt length in tokens (default 128; the chat template adds its own: see 'in tok' in "
                    "the table)",
    "output_tokens": "tokens generated per request (max_tokens with ignore_eos; default 64)",
    "concurrency": "closed-loop sweep: requests in flight, comma-separated (default 1,2,4,8)",
    "request_rate": "open-loop sweep instead: Poisson arrival rates in requests/s, comma-separated",
    "max_concurrency": "open loop: cap on requests in flight (default 64)",
    "num_requests": "measured requests per level (default 32)",
    "warmup": "uncounted requests per server before its first level (default 2)",
    "seed": "seed of prompts and Poisson arrivals (default 0)",
    "slo_ttft_ms": "goodput SLO: time to first token at most this many ms",
    "slo_itl_ms": "goodput SLO: inter-token latency at most this many ms",
    "timeout_s": "seconds per request before it counts as a timeout error (default 300)",
    "json_path": "result file: config, per-level metrics and per-request records (default laneserve-bench.json)",
    "plot_path": "PNG: throughput vs level and latency vs throughput (default laneserve-bench.png)",
    "progress": "progress bar on stderr (default on; --no-progress turns it off)",
}


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated integers: {text!r}") from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated numbers: {text!r}") from None


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    for name, f in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        help_text = _HELP[name]
        if name == "progress":
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif name == "concurrency":
            parser.add_argument(flag, dest=name, type=_ints, metavar="C,C,...", help=help_text)
        elif name == "request_rate":
            parser.add_argument(flag, dest=name, type=_floats, metavar="R,R,...", help=help_text)
        elif f.type in ("int", int):
            parser.add_argument(flag, dest=name, type=int, metavar="N", help=help_text)
        elif f.type in ("float", float, "float | None"):
            parser.add_argument(flag, dest=name, type=float, metavar="X", help=help_text)
        else:
            parser.add_argument(flag, dest=name, metavar=name.upper(), help=help_text)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    values = {name: getattr(args, name) for name in FIELDS if getattr(args, name, None) is not None}
    return BenchConfig(**values)


__all__ = ["BenchConfigError", "add_bench_arguments", "config_from_args"]
