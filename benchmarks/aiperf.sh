#!/usr/bin/env bash
# AIPerf (NVIDIA's LLM profiler, aiperf 0.13.0) against a running laneserve, offline: a chat
# streaming profile at concurrency 1 and 8, with the served model's tokenizer exported from its
# GGUF by `laneserve tokenizer export` (no Hugging Face download). Fails if any request failed.
#
#   laneserve serve --port 8000 &            # or any running laneserve
#   benchmarks/aiperf.sh [URL] [MODEL]       # defaults: http://127.0.0.1:8000 smollm2
#
# Settings (environment): AIPERF_VENV (default benchmarks/.aiperf-venv, created on first use),
# AIPERF_PYTHON (python 3.11-3.13 for that venv, default python3), LANESERVE_PYTHON (a python that
# imports laneserve, default python3), TOKENIZER_MODEL (alias or .gguf path, default MODEL),
# AIPERF_REQUESTS (per concurrency, default 40), AIPERF_INPUT_TOKENS (256), AIPERF_OUTPUT_TOKENS (128),
# AIPERF_CONCURRENCY ("1 8"), AIPERF_ARTIFACTS (default benchmarks/.aiperf-artifacts).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
URL="${1:-http://127.0.0.1:8000}"
MODEL="${2:-smollm2}"
VENV="${AIPERF_VENV:-$HERE/.aiperf-venv}"
AIPERF_PYTHON="${AIPERF_PYTHON:-python3}"
LANESERVE_PYTHON="${LANESERVE_PYTHON:-python3}"
TOKENIZER_MODEL="${TOKENIZER_MODEL:-$MODEL}"
REQUESTS="${AIPERF_REQUESTS:-40}"
INPUT_TOKENS="${AIPERF_INPUT_TOKENS:-256}"
OUTPUT_TOKENS="${AIPERF_OUTPUT_TOKENS:-128}"
CONCURRENCY="${AIPERF_CONCURRENCY:-1 8}"
ARTIFACTS="${AIPERF_ARTIFACTS:-$HERE/.aiperf-artifacts}"

# 1. Its own venv: aiperf pins versions (pandas, orjson, prometheus-client, ...) that clash with
#    the server's environment.
if ! "$VENV/bin/aiperf" --version 2>/dev/null | grep -qx "0.13.0"; then
    "$AIPERF_PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "aiperf==0.13.0"
fi

# 2. The tokenizer, from the GGUF (tokenizer.json + tokenizer_config.json).
TOKENIZER_DIR="$ARTIFACTS/tokenizer-$(basename "$TOKENIZER_MODEL" .gguf)"
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$LANESERVE_PYTHON" -m gateway.cli tokenizer export \
    "$TOKENIZER_MODEL" "$TOKENIZER_DIR" >/dev/null

# 3. One closed-loop profile per concurrency. HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE must NOT be set:
#    with them aiperf 0.13.0 hands the local directory to huggingface_hub's snapshot_download,
#    which rejects it as a repo id; without them a local directory loads with no network access.
#    On a 2-core machine one worker and one record processor keep aiperf from crowding the server.
for C in $CONCURRENCY; do
    OUT="$ARTIFACTS/c$C"
    rm -rf "$OUT"
    env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE "$VENV/bin/aiperf" profile \
        --model "$MODEL" --tokenizer "$TOKENIZER_DIR" --url "$URL" \
        --endpoint-type chat --streaming \
        --synthetic-input-tokens-mean "$INPUT_TOKENS" --synthetic-input-tokens-stddev 0 \
        --output-tokens-mean "$OUTPUT_TOKENS" --output-tokens-stddev 0 \
        --extra-inputs '{"ignore_eos": true}' --use-server-token-count \
        --concurrency "$C" --request-count "$REQUESTS" --warmup-request-count 2 \
        --goodput "time_to_first_token:500 inter_token_latency:50" \
        --random-seed 42 --workers-max 1 --record-processor-service-count 1 \
        --ui-type none --artifact-dir "$OUT"
done

# 4. One summary table (AIPerf's own numbers, from its JSON export); zero errors, or fail.
"$VENV/bin/python" - "$ARTIFACTS" "$REQUESTS" $CONCURRENCY <<'PY'
import json, sys
root, expected, levels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
failed = False
print("| concurrency | requests | errors | TTFT p50 / p99 ms | ITL p50 / p99 ms | latency p50 ms "
      "| output tok/s | req/s | goodput req/s |")
print("|---|---|---|---|---|---|---|---|---|")
for c in levels:
    with open(f"{root}/c{c}/profile_export_aiperf.json") as f:
        d = json.load(f)
    done = int(d["request_count"]["avg"])
    errors = sum(int(e.get("count", 1)) for e in d.get("error_summary") or [])
    errors += int(round(d.get("request_error_rate", {}).get("avg", 0) * done / 100)) if not errors else 0
    m = lambda key, stat: d.get(key, {}).get(stat)  # noqa: E731
    print(f"| {c} | {done} | {errors} | {m('time_to_first_token', 'p50'):.1f} / {m('time_to_first_token', 'p99'):.1f} "
          f"| {m('inter_token_latency', 'p50'):.2f} / {m('inter_token_latency', 'p99'):.2f} "
          f"| {m('request_latency', 'p50'):.0f} | {m('output_token_throughput', 'avg'):.1f} "
          f"| {m('request_throughput', 'avg'):.2f} | {(m('goodput', 'avg') or 0):.2f} |")
    failed |= bool(errors) or done != expected or bool(d.get("was_cancelled"))
sys.exit(1 if failed else 0)
PY
