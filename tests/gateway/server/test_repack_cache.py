"""--repack-cache-dir: the replicas of a model map one shared file of repacked weights (one copy in
memory for all of them); a lane restarted after a crash maps it again; "off" keeps them private."""
import os
import signal
import time

import httpx
import pytest

from ..conftest import serving_stack_missing, start_server


def lane_pids(base_url: str, n: int, not_in: tuple[int, ...] = ()) -> list[int]:
    """The pids of n serving lanes, waiting (bounded) for every lane to be up."""
    deadline = time.monotonic() + 60
    while True:
        try:
            body = httpx.get(base_url + "/health/ready", timeout=5.0).json()
            pids = [lane["pid"] for m in body["models"].values() for lane in m["lanes"] if lane["state"] == "ready"]
            if len(pids) == n and all(pids) and not set(pids) & set(not_in):
                return pids
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "lanes did not come up"
        time.sleep(0.2)


def mapped_cache_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if line.rstrip().endswith(".lsrp")}


def chat(base_url: str) -> str:
    r = httpx.post(base_url + "/v1/chat/completions", timeout=60.0, json={
        "model": "smollm2", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hi"}]})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


@pytest.fixture(autouse=True)
def _needs_stack():
    reason = serving_stack_missing()
    if reason:
        pytest.skip(reason)


def test_replicas_share_one_cache_file_and_a_restarted_lane_maps_it_again(tmp_path):
    cache = tmp_path / "repack"
    srv = start_server(tmp_path, "--replicas", "2", "--parallel", "2", "--repack-cache-dir", str(cache))
    try:
        srv.wait_ready()
        files = sorted(str(p) for p in cache.glob("*.lsrp"))
        assert len(files) == 1, files
        pids = lane_pids(srv.base_url, 2)
        assert all(mapped_cache_files(pid) == set(files) for pid in pids)
        text = chat(srv.base_url)

        os.kill(pids[0], signal.SIGKILL)
        now = lane_pids(srv.base_url, 2, not_in=(pids[0],))
        assert all(mapped_cache_files(pid) == set(files) for pid in now)
        assert sorted(str(p) for p in cache.glob("*.lsrp")) == files
        assert chat(srv.base_url) == text
    finally:
        srv.terminate()


def test_off_keeps_the_repacked_weights_private(tmp_path):
    srv = start_server(tmp_path, "--parallel", "2", "--repack-cache-dir", "off")
    try:
        srv.wait_ready()
        (pid,) = lane_pids(srv.base_url, 1)
        assert mapped_cache_files(pid) == set()
        chat(srv.base_url)
    finally:
        srv.terminate()
