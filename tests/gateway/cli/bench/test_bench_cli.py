"""`laneserve bench` end to end against real SmolLM2 servers: the table, the JSON and the PNG it
writes, with token counts equal to the server's own Prometheus counters."""
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import gateway

pytestmark = pytest.mark.real_model
IMPORT_ROOT = str(Path(gateway.__file__).resolve().parent.parent)


def _counters(base_url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base_url + "/metrics", timeout=10).text
    out = {"laneserve_completion_tokens_total": 0.0, "laneserve_prompt_tokens_total": 0.0}  # no sample yet
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("laneserve_completion_tokens_total", "laneserve_prompt_tokens_total"):
                out[sample.name] += sample.value
    return out


def _bench(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    json_path, plot_path = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "bench", "--no-progress", "--json-path", str(json_path),
                           "--plot-path", str(plot_path), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"PYTHONPATH": IMPORT_ROOT, "PATH": "/usr/bin:/bin", **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return proc, json.loads(json_path.read_text())


def _tokens(server: dict) -> tuple[int, int]:
    out = server["warmup_output_tokens"] + sum(s["output_tokens"] for s in server["levels"])
    prompt = server["warmup_prompt_tokens"] + sum(s["prompt_tokens"] for s in server["levels"])
    return out, prompt


def test_bench_starts_laneserve_compares_it_with_a_second_server_and_matches_its_metrics(server, tmp_path):
    before = _counters(server.base_url)
    # LANESERVE_API_KEY: the started laneserve inherits it and requires it; bench sends it to both
    # (the second server has no key and ignores the header).
    proc, result = _bench(tmp_path, "--url2", server.base_url, "--label2", "second",
                          "--serve-args=--threads 1 --ctx-size 512", "--concurrency", "1,2", "--num-requests", "3",
                          "--input-tokens", "24", "--output-tokens", "6", "--warmup", "1",
                          env={"LANESERVE_API_KEY": "bench-test-key"})
    after = _counters(server.base_url)

    assert [s["label"] for s in result["servers"]] == ["laneserve", "second"]
    for srv in result["servers"]:
        assert [s["level"] for s in srv["levels"]] == [1, 2]
        for s in srv["levels"]:
            assert (s["ok"], s["errors"], s["without_usage"]) == (3, 0, 0)
            assert s["output_tokens"] == 3 * 6  # ignore_eos: exactly max_tokens each
            assert [r["output_tokens"] for r in s["records"]] == [6, 6, 6]
            assert s["ttft_ms"]["p50"] > 0 and s["itl_ms"]["p50"] > 0 and s["output_tok_s"] > 0
    # the second server's own counters saw exactly the tokens the bench reports for it
    out, prompt = _tokens(result["servers"][1])
    assert after["laneserve_completion_tokens_total"] - before["laneserve_completion_tokens_total"] == out
    assert after["laneserve_prompt_tokens_total"] - before["laneserve_prompt_tokens_total"] == prompt
    assert len(result["ratios"]) == 2 and result["ratios"][0]["output_tok_s"] > 0
    # the table: one per server, then the ratio
    assert "laneserve  (http://127.0.0.1:" in proc.stdout and f"second  ({server.base_url}" in proc.stdout
    assert "ratio laneserve / second" in proc.stdout
    assert proc.stdout.index("ratio") > proc.stdout.index("second  (")


def test_open_loop_token_id_prompts_on_completions(server, tmp_path):
    before = _counters(server.base_url)
    proc, result = _bench(tmp_path, "--url", server.base_url, "--endpoint", "completions", "--prompt-format", "ids",
                          "--request-rate", "4", "--num-requests", "4", "--input-tokens", "16", "--output-tokens", "5",
                          "--warmup", "0", "--slo-ttft-ms", "60000", "--slo-itl-ms", "60000")
    after = _counters(server.base_url)
    (srv,) = result["servers"]
    (level,) = srv["levels"]
    assert level["level"] == 4 and (level["ok"], level["errors"]) == (4, 0)
    assert level["mean_prompt_tokens"] == 16  # token ids go to the model as they are
    assert level["goodput_requests_s"] == pytest.approx(level["requests_s"])  # generous SLOs: all good
    out, prompt = _tokens(srv)
    assert (out, prompt) == (20, 64)
    assert after["laneserve_completion_tokens_total"] - before["laneserve_completion_tokens_total"] == out
    assert after["laneserve_prompt_tokens_total"] - before["laneserve_prompt_tokens_total"] == prompt
    assert "rate" in proc.stdout.splitlines()[1]


def test_bad_flags_are_a_message_not_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "bench", "--prompt-format", "ids"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PYTHONPATH": IMPORT_ROOT})
    assert proc.returncode == 2
    assert "laneserve bench: --prompt-format ids needs --endpoint completions" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_server_that_answers_nothing_gives_a_table_of_errors_and_exit_1(tmp_path):
    pytest.importorskip("matplotlib")
    from gateway.cli.bench.launcher import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "bench", "--url", url, "--model", "m", "--no-progress",
                           "--concurrency", "1", "--num-requests", "2", "--warmup", "0"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PYTHONPATH": IMPORT_ROOT})
    assert proc.returncode == 1
    assert "refused=2" in proc.stdout and "no request succeeded" in proc.stderr
    assert json.loads((tmp_path / "laneserve-bench.json").read_text())["servers"][0]["levels"][0]["errors"] == 2
