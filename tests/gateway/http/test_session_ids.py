"""X-Session-ID (gateway/http/session_ids.py): kept when valid, None when absent, 400 otherwise; a real
server writes it into the request's record and its `request_finished` log line, escaped."""
from __future__ import annotations


import httpx
import orjson
import pytest

from gateway.http.errors import APIError
from gateway.http.session_ids import MAX_SESSION_ID_CHARS, resolve_session_id


def test_absent_is_none_and_valid_is_kept():
    assert resolve_session_id([]) is None
    for value in ("3f2a9c1e-7b4d-4c1a-9e55-0d3c2b1a0f9e", 'chat"42\\x', "x" * MAX_SESSION_ID_CHARS):
        assert resolve_session_id([value]) == value


@pytest.mark.parametrize("values", [[""], ["has space"], ["x" * (MAX_SESSION_ID_CHARS + 1)], ["tab\tin"],
                                    ["new\nline"], ["\x1b[31m"], ["ünï"], ["a", "b"], ["a", "a"]])
def test_invalid_or_repeated_header_is_400(values):
    with pytest.raises(APIError) as info:
        resolve_session_id(values)
    assert info.value.status == 400 and info.value.param == "X-Session-ID"
    assert info.value.code == "invalid_session_id"


def test_server_records_and_logs_the_session_id(synthetic_server):
    session = 'chat"42\\x{}'  # quotes, a backslash and braces: the JSON log must escape them
    with httpx.Client(base_url=synthetic_server.base_url, timeout=30) as client:
        for route, body in (("/v1/completions", {"model": "fake", "prompt": "x", "max_tokens": 2}),
                            ("/api/generate", {"model": "fake", "prompt": "x", "stream": False,
                                               "options": {"num_predict": 2}})):
            request_id = "session-" + route.strip("/").replace("/", "-")
            r = client.post(route, json=body, headers={"X-Session-ID": session, "X-Request-ID": request_id})
            assert r.status_code == 200, r.text
            [record] = synthetic_server.records(request_id)
            assert record["session_id"] == session
            logged = [orjson.loads(line) for line in synthetic_server.log_text().splitlines()
                      if request_id in line and "request_finished" in line]
            assert logged and logged[0]["session_id"] == session
        plain = client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1},
                            headers={"X-Request-ID": "session-none"})
        assert plain.status_code == 200
        [record] = synthetic_server.records("session-none")
        assert record["session_id"] is None
        bad = client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 1},
                          headers={"X-Session-ID": "x" * (MAX_SESSION_ID_CHARS + 1)})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_session_id"
        assert bad.headers["x-request-id"]
