"""Text tables (one per server, then the ratio between two servers) and the JSON result file."""
from __future__ import annotations

import json


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _grid(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def level_name(open_loop: bool) -> str:
    return "rate" if open_loop else "conc"


def server_table(server: dict, open_loop: bool) -> str:
    rows = [[level_name(open_loop), "ok/req", "out tok/s", "req/s", "goodput",
             "TTFT p50", "p90", "p99", "ITL p50", "p90", "p99", "E2E p50", "p90", "p99", "in tok", "errors"]]
    for s in server["levels"]:
        errors = ", ".join(f"{k}={v}" for k, v in sorted(s["errors_by_kind"].items())) or "0"
        level = _fmt(s["level"], 2) if open_loop else str(int(s["level"]))
        rows.append([level, f"{s['ok']}/{s['requests']}", _fmt(s["output_tok_s"]), _fmt(s["requests_s"], 2),
                     _fmt(s["goodput_requests_s"], 2),
                     *(_fmt(s["ttft_ms"][p]) for p in ("p50", "p90", "p99")),
                     *(_fmt(s["itl_ms"][p], 2) for p in ("p50", "p90", "p99")),
                     *(_fmt(s["e2e_ms"][p], 0) for p in ("p50", "p90", "p99")),
                     _fmt(s["mean_prompt_tokens"], 0), errors])
    title = f"{server['label']}  ({server['base_url']}, model {server['model']})"
    return "\n".join([title] + _grid(rows))


def ratios(a: dict, b: dict) -> list[dict]:
    """a/b per level both ran: throughput (> 1: a is faster) and latencies (< 1: a is faster)."""
    by_level = {s["level"]: s for s in b["levels"]}
    out = []
    for sa in a["levels"]:
        sb = by_level.get(sa["level"])
        if sb is None:
            continue

        def div(x, y):
            return x / y if x is not None and y else None

        out.append({"level": sa["level"], "output_tok_s": div(sa["output_tok_s"], sb["output_tok_s"]),
                    "requests_s": div(sa["requests_s"], sb["requests_s"]),
                    "ttft_p50": div(sa["ttft_ms"]["p50"], sb["ttft_ms"]["p50"]),
                    "itl_p50": div(sa["itl_ms"]["p50"], sb["itl_ms"]["p50"]),
                    "e2e_p50": div(sa["e2e_ms"]["p50"], sb["e2e_ms"]["p50"])})
    return out


def ratio_table(a: dict, b: dict, rows_in: list[dict], open_loop: bool) -> str:
    rows = [[level_name(open_loop), "out tok/s", "req/s", "TTFT p50", "ITL p50", "E2E p50"]]
    for r in rows_in:
        level = _fmt(r["level"], 2) if open_loop else str(int(r["level"]))
        rows.append([level] + [("-" if r[k] is None else f"{r[k]:.2f}x")
                               for k in ("output_tok_s", "requests_s", "ttft_p50", "itl_p50", "e2e_p50")])
    title = (f"ratio {a['label']} / {b['label']}  (throughput > 1x: {a['label']} faster; "
             f"latency < 1x: {a['label']} faster)")
    return "\n".join([title] + _grid(rows))


FOOTNOTE = ("times in ms; TTFT = send -> first text; ITL = (E2E - TTFT) / (output tokens - 1) per request; "
            "tokens from the server's usage; in tok = mean prompt tokens (usage)")


def render(result: dict) -> str:
    open_loop = result["config"]["open_loop"]
    parts = [server_table(s, open_loop) for s in result["servers"]]
    if result.get("ratios"):
        a, b = result["servers"][:2]
        parts.append(ratio_table(a, b, result["ratios"], open_loop))
    parts.append(FOOTNOTE)
    return "\n\n".join(parts)


def write_json(result: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
