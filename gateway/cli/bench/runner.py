"""One `laneserve bench` run: prompts once, then each server in turn (a started laneserve lives
for its own sweep only), warm-up, every level with a progress bar, then table, JSON and PNG."""
from __future__ import annotations

import asyncio
import datetime
import os
import sys
from urllib.parse import urlsplit

from gateway.cli.bench.config import BenchConfig
from gateway.cli.bench.loadgen import LevelRun, Target
from gateway.cli.bench.metrics import summarize
from gateway.cli.bench.prompts import PromptMaker, make_prompts, model_file
from gateway.cli.bench.report import ratios, render, write_json
from gateway.cli.bench.server import StartedServer, first_model_id

MISSING_EXTRA = "laneserve bench needs matplotlib and tqdm: pip install 'laneserve[bench]'"


class BenchError(RuntimeError):
    """A run that cannot go on; the message is for the user."""


def _check_extras() -> None:
    try:
        import matplotlib  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError:
        raise BenchError(MISSING_EXTRA) from None


def _prompt_sets(config: BenchConfig) -> tuple[list[dict], list[list[dict]]]:
    source = config.tokenizer or config.serve_model
    try:
        maker = PromptMaker(model_file(source))
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        raise BenchError(f"--tokenizer: {exc}") from None
    warm = make_prompts(maker, config.warmup, config.input_tokens, config.seed, first_index=0)
    levels = [make_prompts(maker, config.num_requests, config.input_tokens, config.seed,
                           first_index=(i + 1) * 1_000_000) for i in range(len(config.levels))]
    return warm, levels


def _default_label(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 80}"


async def _sweep(config: BenchConfig, run: LevelRun, warm: list[dict], level_prompts: list[list[dict]],
                 bar) -> tuple[list[dict], list[dict]]:
    """Warm-up and every level in one event loop (kept-alive connections belong to their loop)."""
    try:
        return await _levels(config, run, warm, level_prompts, bar)
    finally:
        run.close()


async def _levels(config: BenchConfig, run: LevelRun, warm: list[dict], level_prompts: list[list[dict]],
                  bar) -> tuple[list[dict], list[dict]]:
    warm_records = await run.warmup(warm) if warm else []
    levels = []
    for level, prompts in zip(config.levels, level_prompts):
        bar.set_postfix_str(f"{'rate' if config.open_loop else 'c'}={level:g}")
        load_1m = os.getloadavg()[0]  # other work on the machine skews every figure
        if config.open_loop:
            records, wall_s = await run.open(level, prompts, config.seed)
        else:
            records, wall_s = await run.closed(int(level), prompts)
        summary = summarize(records, wall_s, level, config.output_tokens, config.slo_ttft_ms, config.slo_itl_ms)
        summary["loadavg_1m_before"] = load_1m
        summary["records"] = sorted(records, key=lambda r: r["index"])
        levels.append(summary)
    return warm_records, levels


def _bench_one(config: BenchConfig, target: Target, warm: list[dict], level_prompts: list[list[dict]],
               api_key: str | None) -> dict:
    from tqdm import tqdm

    total = sum(len(p) for p in level_prompts)
    bar = tqdm(total=total, desc=target.label, unit="req", disable=not config.progress, file=sys.stderr,
               dynamic_ncols=True)
    with bar:
        run = LevelRun(config, target, on_done=lambda record: bar.update(1), api_key=api_key)
        warm_records, levels = asyncio.run(_sweep(config, run, warm, level_prompts, bar))
    warm_ok = [r for r in warm_records if "error" not in r]
    return {"label": target.label, "base_url": target.base_url, "model": target.model,
            "warmup_requests": len(warm_records), "warmup_errors": len(warm_records) - len(warm_ok),
            "warmup_output_tokens": sum(r["output_tokens"] for r in warm_ok),
            "warmup_prompt_tokens": sum(r["prompt_tokens"] or 0 for r in warm_ok), "levels": levels}


def _resolve(config: BenchConfig, which: int) -> tuple[str | None, str | None, str]:
    url, model, label = ((config.url, config.model, config.label) if which == 1
                         else (config.url2, config.model2, config.label2))
    return url, model, label


def run_bench(config: BenchConfig, out=sys.stdout) -> dict:
    from gateway.server.env import settings_from_env

    _check_extras()
    # Sent to every server when set (a laneserve started here inherits it and requires it).
    api_key = settings_from_env().get("api_key") or None
    warm, level_prompts = _prompt_sets(config)
    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    servers = []
    for which in (1, 2):
        url, model, label = _resolve(config, which)
        if which == 2 and url is None:
            break
        started = None
        if url is None:
            started = StartedServer(config.serve_model, config.serve_args)
            print(f"starting laneserve ({' '.join(started.cmd[1:])}) ...", file=sys.stderr, flush=True)
            try:
                started.start()
            except RuntimeError as exc:
                raise BenchError(str(exc)) from None
            base_url, label = started.base_url, label or "laneserve"
        else:
            base_url = url.rstrip("/").removesuffix("/v1")
            label = label or _default_label(base_url)
        try:
            model = model or first_model_id(base_url, api_key)
            if model is None:
                raise BenchError(f"{base_url}: no --model given and no model id from its /v1/models "
                                 "(is the server up?)")
            servers.append(_bench_one(config, Target(label, base_url, model), warm, level_prompts, api_key))
        finally:
            if started is not None:
                started.stop()
        # after each server: a long run stopped during the second keeps the first one's results
        write_json({"started_at": started_at, "config": {**config.as_dict(), "open_loop": config.open_loop},
                    "servers": servers, "ratios": [], "partial": which == 1 and config.url2 is not None},
                   config.json_path)
    if len(servers) == 2 and servers[0]["label"] == servers[1]["label"]:
        servers[1]["label"] += " (2)"
    result = {"started_at": started_at, "config": {**config.as_dict(), "open_loop": config.open_loop},
              "servers": servers, "ratios": ratios(servers[0], servers[1]) if len(servers) == 2 else []}
    print(render(result), file=out, flush=True)
    write_json(result, config.json_path)
    from gateway.cli.bench.plot import write_plot

    write_plot(result, config.plot_path)
    print(f"\nwrote {config.json_path} and {config.plot_path}", file=out, flush=True)
    return result
