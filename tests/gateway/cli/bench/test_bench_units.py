"""laneserve bench parts that need no server: settings, metrics, ratios, table, plot, /proc readings."""
import json
import os
import subprocess
import sys

import pytest

from gateway.cli.bench.args import add_bench_arguments, config_from_args
from gateway.cli.bench.config import BenchConfig, BenchConfigError
from gateway.cli.bench.metrics import meets_slo, percentile, summarize
from gateway.cli.bench.proc import cpu_seconds
from gateway.cli.bench.report import ratios, render


def _record(ttft_s, e2e_s, output_tokens, prompt_tokens=10, index=0):
    return {"ttfr_s": ttft_s, "ttft_s": ttft_s, "e2e_s": e2e_s, "output_tokens": output_tokens, "usage": True,
            "prompt_tokens": prompt_tokens, "index": index, "sent_s": 0.0,
            "itl_s": (e2e_s - ttft_s) / (output_tokens - 1) if output_tokens > 1 else None}


def test_percentile_interpolates_linearly_between_closest_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert percentile([], 50) is None
    assert percentile([0, 100], 90) == pytest.approx(90)


def test_summary_counts_server_tokens_itl_per_request_and_goodput_under_slos():
    records = [_record(0.1, 1.1, 11, index=0), _record(0.5, 2.5, 11, index=1), {"error": "http_429", "index": 2}]
    s = summarize(records, wall_s=2.0, level=2, output_tokens=11, slo_ttft_ms=200, slo_itl_ms=150)
    assert (s["requests"], s["ok"], s["errors"], s["errors_by_kind"]) == (3, 2, 1, {"http_429": 1})
    assert s["output_tokens"] == 22 and s["output_tok_s"] == 11.0 and s["requests_s"] == 1.0
    assert s["prompt_tokens"] == 20 and s["total_tok_s"] == 21.0
    assert s["itl_ms"]["p50"] == pytest.approx(150.0)  # (100 ms + 200 ms) / 2 per-request ITLs
    assert s["ttft_ms"]["max"] == pytest.approx(500.0)
    assert s["goodput_requests_s"] == 0.5  # only the first meets TTFT ≤ 200 ms and ITL ≤ 150 ms
    assert summarize(records, 2.0, 2, 11)["goodput_requests_s"] is None  # no SLO given


def test_a_failed_request_never_meets_an_slo():
    assert not meets_slo({"error": "timeout"}, None, None)
    assert meets_slo(_record(0.1, 1.1, 11), None, None)


@pytest.mark.parametrize("kwargs, flag", [
    ({"endpoint": "embeddings"}, "--endpoint"),
    ({"prompt_format": "ids"}, "--prompt-format ids"),
    ({"concurrency": (0,)}, "--concurrency"),
    ({"request_rate": (-1.0,)}, "--request-rate"),
    ({"input_tokens": 0}, "--input-tokens"),
    ({"url": "https://example.org"}, "--url"),
    ({"model2": "x"}, "--model2"),
    ({"slo_ttft_ms": 0}, "--slo-ttft-ms"),
    ({"request_rate": (1.0,), "concurrency": (4,)}, "not both"),
])
def test_bad_settings_name_their_flag(kwargs, flag):
    with pytest.raises(BenchConfigError, match=flag):
        BenchConfig(**kwargs)


def test_flags_map_one_to_one_to_config_fields():
    import argparse

    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--url", "http://127.0.0.1:1", "--request-rate", "0.5,2", "--num-requests", "3",
                              "--slo-itl-ms", "50", "--endpoint", "completions", "--prompt-format", "ids",
                              "--no-progress"])
    config = config_from_args(args)
    assert config.request_rate == (0.5, 2.0) and config.open_loop and config.levels == (0.5, 2.0)
    assert (config.num_requests, config.slo_itl_ms, config.progress) == (3, 50.0, False)
    assert config_from_args(parser.parse_args([])) == BenchConfig()


def _fake_result(open_loop=False):
    def server(label, scale):
        levels = [summarize([_record(0.1 * scale, 1.0 * scale, 9, index=i) for i in range(4)], 2.0 * scale, c, 9)
                  for c in (1, 2)]
        return {"label": label, "base_url": "http://127.0.0.1:1", "model": "m", "levels": levels}

    a, b = server("a", 1.0), server("b", 2.0)
    config = {**BenchConfig().as_dict(), "open_loop": open_loop, "concurrency": (1, 2)}
    return {"started_at": "now", "config": config, "servers": [a, b], "ratios": ratios(a, b)}


def test_ratio_table_puts_both_servers_and_their_ratio():
    result = _fake_result()
    assert result["ratios"][0]["output_tok_s"] == pytest.approx(2.0)
    assert result["ratios"][0]["ttft_p50"] == pytest.approx(0.5)
    text = render(result)
    assert "ratio a / b" in text and "2.00x" in text and "0.50x" in text
    json.dumps(result)  # the result file is plain JSON


def test_plot_is_a_png_with_every_server(tmp_path):
    pytest.importorskip("matplotlib")
    from gateway.cli.bench.plot import write_plot

    path = tmp_path / "p.png"
    write_plot(_fake_result(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


_BURNER = """
import threading, time
def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
worker = threading.Thread(target=burn, args=(0.3,))
worker.start()
worker.join()
burn(0.1)
print("done", flush=True)
time.sleep(30)
"""


def test_cpu_seconds_counts_ended_threads_and_agrees_with_proc_stat():
    child = subprocess.Popen([sys.executable, "-c", _BURNER], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"  # the burning thread has ended
        cpu = cpu_seconds(child.pid)
        with open(f"/proc/{child.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        child.kill()
        child.wait(10)
    assert cpu >= 0.4  # 0.3 s in the thread that ended + 0.1 s in the main thread (+ start-up)
    assert abs(cpu - ticks_s) <= 0.02  # utime + stime, in 10 ms ticks
    assert cpu_seconds(os.getpid()) > 0
