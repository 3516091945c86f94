"""--drain-delay-s: SIGTERM withdraws readiness at once, keeps serving new requests for the delay,
then refuses them (503 or a closed listener) and exits 0 once drained."""
from __future__ import annotations

import signal
import time

import httpx
import pytest

from gateway.server.config import ConfigError, GatewayConfig

SYNTHETIC = "fake=synthetic:step_us=1000,n_ctx=256"
BODY = {"model": "fake", "prompt": "x", "max_tokens": 2}


@pytest.mark.parametrize("value", [-1.0, 301.0])
def test_drain_delay_is_bounded(value):
    with pytest.raises(ConfigError, match="drain_delay_s"):
        GatewayConfig(drain_delay_s=value)


def test_sigterm_withdraws_readiness_then_refuses_after_the_delay(own_server):
    delay_s = 2.0
    srv = own_server("--model", SYNTHETIC, "--ctx-size", "256", "--drain-delay-s", str(delay_s), real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=10) as client:
        assert client.post("/v1/completions", json=BODY).status_code == 200
        t_term = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        deadline = t_term + 1.0
        while client.get("/health/ready").status_code == 200:
            assert time.monotonic() < deadline, "readiness still 200 a second after SIGTERM"
            time.sleep(0.02)
        ready = client.get("/health/ready")
        assert ready.json()["status"] == "draining" and ready.headers["retry-after"]
        llama = client.get("/health")  # llama-server's check: 503 in its error shape
        assert llama.status_code == 503 and llama.json()["error"]["type"] == "unavailable_error"
        served = 0
        while time.monotonic() - t_term < delay_s - 0.7:  # well inside the delay: still served
            assert client.post("/v1/completions", json=BODY).status_code == 200
            served += 1
        assert served > 0
        time.sleep(max(0.0, t_term + delay_s + 0.5 - time.monotonic()))
        try:
            late = client.post("/v1/completions", json=BODY)
            assert late.status_code == 503 and late.json()["error"]["code"] == "server_shutting_down"
        except httpx.TransportError:
            pass  # drained already and the listener closed: refused is fine too
    assert srv.proc.wait(15) == 0
    assert "drain_delay" in srv.log_text()
