"""The prompt cache's figures of a running server: /metrics samples and /health/ready, once the
lanes have reported them (a lane sends its STATS when it goes idle, just after the last DONE)."""
from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

PREFIXES = ("laneserve_prompt_cache_", "laneserve_kv_pages")


def cache_metrics(base_url: str, model: str = "smollm2") -> dict:
    """laneserve_prompt_cache_* and laneserve_kv_pages* samples of one model."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith(PREFIXES) and s.labels.get("model") == model}


def settled_figures(base_url: str, settled, timeout_s: float = 10.0) -> tuple[dict, dict]:
    """(cache_metrics, /health/ready body) once settled(samples) holds or timeout_s passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = cache_metrics(base_url)
        if settled(samples) or time.monotonic() > deadline:
            return samples, httpx.get(base_url + "/health/ready", timeout=10).json()
        time.sleep(0.05)
