"""The PNG: throughput vs the sweep's level, and latency vs throughput, every server on one figure."""
from __future__ import annotations


def write_plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    open_loop = result["config"]["open_loop"]
    fig, (ax_tp, ax_itl, ax_ttft) = plt.subplots(1, 3, figsize=(15, 4.6))
    for server in result["servers"]:
        levels = [s for s in server["levels"] if s["ok"]]
        x = [s["level"] for s in levels]
        tok_s = [s["output_tok_s"] for s in levels]
        ax_tp.plot(x, tok_s, marker="o", label=server["label"])
        for ax, key in ((ax_itl, "itl_ms"), (ax_ttft, "ttft_ms")):
            ax.plot(tok_s, [s[key]["p50"] for s in levels], marker="o", label=server["label"])
            for s, t in zip(levels, tok_s):
                level = f"{s['level']:g}"
                ax.annotate(level, (t, s[key]["p50"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax_tp.set_xlabel("request rate (req/s)" if open_loop else "concurrency")
    if not open_loop:
        ax_tp.set_xscale("log", base=2)
        ax_tp.set_xticks(list(result["config"]["concurrency"]))
        ax_tp.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax_tp.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax_tp.set_ylabel("output tokens/s")
    ax_tp.set_title("throughput")
    ax_itl.set_xlabel("output tokens/s")
    ax_itl.set_ylabel("ITL p50 (ms)")
    ax_itl.set_title("inter-token latency vs throughput")
    ax_ttft.set_xlabel("output tokens/s")
    ax_ttft.set_ylabel("TTFT p50 (ms)")
    ax_ttft.set_title("time to first token vs throughput")
    for ax in (ax_tp, ax_itl, ax_ttft):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    c = result["config"]
    fig.suptitle(f"laneserve bench: {c['endpoint']}, {c['input_tokens']} in / {c['output_tokens']} out tokens, "
                 f"{c['num_requests']} requests per level ({result['started_at']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
