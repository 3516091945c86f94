"""One level's numbers from its per-request records (definitions as AIPerf / `vllm bench serve`).

  TTFT   send → first non-empty text; TTFR beside it (first event with choices, role-only included)
  ITL    per request (e2e − TTFT) / (output_tokens − 1): AIPerf's ITL, vLLM bench's TPOT
  E2E    send → end of the stream
  output tok/s   output tokens of the successful requests (server usage) / the level's wall time
  req/s          successful requests / wall time
  goodput        requests meeting every given SLO (TTFT ≤ --slo-ttft-ms, ITL ≤ --slo-itl-ms) / wall time
Percentiles interpolate linearly between closest ranks (numpy's default, as both tools use).
"""
from __future__ import annotations

PERCENTILES = (50, 90, 99)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def distribution(values_ms: list[float]) -> dict:
    out = {f"p{q}": percentile(values_ms, q) for q in PERCENTILES}
    out["mean"] = sum(values_ms) / len(values_ms) if values_ms else None
    out["max"] = max(values_ms) if values_ms else None
    return out


def meets_slo(record: dict, slo_ttft_ms: float | None, slo_itl_ms: float | None) -> bool:
    if "error" in record:
        return False
    if slo_ttft_ms is not None and record["ttft_s"] * 1e3 > slo_ttft_ms:
        return False
    if slo_itl_ms is not None and (record["itl_s"] is None or record["itl_s"] * 1e3 > slo_itl_ms):
        return False
    return True


def summarize(records: list[dict], wall_s: float, level: float, output_tokens: int,
              slo_ttft_ms: float | None = None, slo_itl_ms: float | None = None) -> dict:
    ok = [r for r in records if "error" not in r]
    errors_by_kind: dict[str, int] = {}
    for r in records:
        if "error" in r:
            errors_by_kind[r["error"]] = errors_by_kind.get(r["error"], 0) + 1

    def ms(key: str) -> list[float]:
        return [r[key] * 1e3 for r in ok if r.get(key) is not None]

    out_tokens = sum(r["output_tokens"] for r in ok)
    prompt_tokens = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens")]
    per_s = (lambda n: n / wall_s) if wall_s > 0 else (lambda n: 0.0)
    has_slo = slo_ttft_ms is not None or slo_itl_ms is not None
    return {
        "level": level, "requests": len(records), "ok": len(ok), "errors": sum(errors_by_kind.values()),
        "errors_by_kind": errors_by_kind, "wall_s": wall_s,
        "output_tokens": out_tokens, "prompt_tokens": sum(prompt_tokens),
        "mean_prompt_tokens": sum(prompt_tokens) / len(prompt_tokens) if prompt_tokens else None,
        "output_tok_s": per_s(out_tokens), "total_tok_s": per_s(out_tokens + sum(prompt_tokens)),
        "requests_s": per_s(len(ok)),
        "goodput_requests_s": per_s(sum(meets_slo(r, slo_ttft_ms, slo_itl_ms) for r in ok)) if has_slo else None,
        "ttft_ms": distribution(ms("ttft_s")), "ttfr_ms": distribution(ms("ttfr_s")),
        "itl_ms": distribution(ms("itl_s")), "e2e_ms": distribution(ms("e2e_s")),
        "short_outputs": sum(1 for r in ok if r["output_tokens"] < output_tokens),
        "without_usage": sum(1 for r in ok if not r["usage"]),
    }
