"""Optional API key (gateway/http/auth.py): config forms, the check, which routes it guards, real
openai and ollama clients, and that the key never reaches logs, records, bodies or metrics."""
from __future__ import annotations

import importlib.util
import sys
import time

import httpx
import pytest

from gateway.http.auth import INVALID, MISSING, PUBLIC_PATHS, KeyCheck
from gateway.server.config import ConfigError, GatewayConfig, config_from_strings

from ..conftest import serving_stack_missing, start_server

KEY = "ls-test-4f1c9b2e7a0d4c65"
WRONG_KEYS = ("ls-test-4f1c9b2e7a0d4c66", "ls-test-4f1c9b2e", "wrong-key-5d2e")
SYNTHETIC = "fake=synthetic:step_us=1000,n_ctx=512"
ORIGIN = "http://localhost:3000"
PROTECTED = [("GET", "/v1/models"), ("GET", "/v1/models/fake"), ("GET", "/metrics"),
             ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("POST", "/tokenize"),
             ("POST", "/detokenize"), ("POST", "/stop"), ("DELETE", "/v1/requests/abc"),
             ("POST", "/api/chat"), ("POST", "/api/generate"), ("GET", "/api/tags"), ("POST", "/api/show"),
             ("GET", "/api/ps"), ("GET", "/api/version")]


# --- configuration ------------------------------------------------------------------------------

def test_key_from_flag_env_and_file(tmp_path):
    assert GatewayConfig().resolved_api_key() is None
    assert config_from_strings({"api_key": KEY}).resolved_api_key() == KEY
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")  # `echo KEY > file`
    assert config_from_strings({"api_key_file": str(key_file)}).resolved_api_key() == KEY


@pytest.mark.parametrize("values, needle", [
    ({"api_key": ""}, "api_key"),
    ({"api_key": "has space"}, "api_key"),
    ({"api_key": "tab\tkey"}, "api_key"),
    ({"api_key": "caf\u00e9"}, "api_key"),
    ({"api_key": "x" * 4097}, "api_key"),
    ({"api_key_file": "/nonexistent/key"}, "api_key_file"),
    ({"api_key_file": ""}, "api_key_file"),
])
def test_bad_key_settings_fail_at_start(values, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        config_from_strings(values)
    if values.get("api_key"):
        assert values["api_key"] not in str(info.value)


def test_key_and_key_file_together_are_refused(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    with pytest.raises(ConfigError, match="only one"):
        config_from_strings({"api_key": KEY, "api_key_file": str(key_file)})


def test_key_file_content_is_never_in_messages(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("two words")
    with pytest.raises(ConfigError) as info:
        config_from_strings({"api_key_file": str(key_file)})
    assert "two" not in str(info.value) and str(key_file) in str(info.value)


def test_key_is_not_in_the_config_repr():
    assert KEY not in repr(GatewayConfig(api_key=KEY)) and KEY not in str(GatewayConfig(api_key=KEY))


# --- the check ----------------------------------------------------------------------------------

@pytest.mark.parametrize("headers, expected", [
    ([f"Bearer {KEY}"], None),
    ([f"bearer {KEY}"], None),          # the scheme is case-insensitive (RFC 7235)
    ([f"  Bearer   {KEY}  "], None),
    ([], MISSING),
    (["Bearer"], INVALID),
    (["Bearer "], INVALID),
    ([f"Basic {KEY}"], INVALID),
    ([KEY], INVALID),
    ([f"Bearer {KEY[:-1]}"], INVALID),
    ([f"Bearer {KEY}x"], INVALID),
    ([f"Bearer {KEY.upper()}"], INVALID),
    ([f"Bearer {KEY}", f"Bearer {KEY}"], INVALID),  # one Authorization header, not two
    (["Bearer caf\udce9"], INVALID),                   # undecodable bytes still just fail
])
def test_key_check(headers, expected):
    assert KeyCheck(KEY).failure(headers) == expected


@pytest.fixture
def app_routes(monkeypatch):
    """The routes of a built (not started) app; Sanic's registry forgets it afterwards."""
    if importlib.util.find_spec("lanes.pool") is None or serving_stack_missing(real_model=False):
        pytest.skip("the gateway app needs the lanes' native runtime")
    from sanic import Sanic

    from gateway.app import APP_NAME, create_app

    monkeypatch.setattr(Sanic, "test_mode", True)

    def routes(config):
        app = create_app(config=config)
        Sanic._app_registry.pop(APP_NAME, None)
        return [r for r in app.router.routes if r.methods != {"OPTIONS"}]

    return routes


def test_every_route_but_the_public_ones_needs_the_key(app_routes):
    """Routes added later through app.py's route() are guarded by default; this fails if one is
    registered around it."""
    routes = app_routes(GatewayConfig(api_key=KEY, cors_origins=(ORIGIN,)))
    assert routes
    for route in routes:
        path = "/" + route.path.lstrip("/")
        protected = getattr(route.handler, "laneserve_protected", False)
        assert protected == (path not in PUBLIC_PATHS), (path, route.methods)


def test_without_a_key_no_route_is_wrapped(app_routes):
    assert not any(getattr(r.handler, "laneserve_protected", False) for r in app_routes(GatewayConfig()))


# --- a real server with a key ------------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """Synthetic model, key from LANESERVE_API_KEY, lenient (unknown fields are logged), CORS on."""
    reason = serving_stack_missing(real_model=False)
    if reason:
        pytest.skip(reason)
    srv = start_server(tmp_path_factory.mktemp("keyed"), "--model", SYNTHETIC, "--lenient",
                       "--cors-origins", ORIGIN, env={"LANESERVE_API_KEY": KEY})
    srv.wait_ready()
    yield srv
    code = srv.terminate()
    assert code == 0, srv.log_text()[-4000:]


def _openai(base_url, key):
    from openai import OpenAI

    return OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=30.0)


def test_openai_client_with_the_key(keyed):
    with _openai(keyed.base_url, KEY) as client:
        assert [m.id for m in client.models.list()] == ["fake"]
        reply = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=4)
        assert reply.choices[0].message.content
        stream = client.completions.create(model="fake", prompt="x", max_tokens=3, stream=True)
        assert "".join(chunk.choices[0].text for chunk in stream if chunk.choices)


@pytest.mark.parametrize("key", WRONG_KEYS[:2])
def test_openai_client_with_a_wrong_key(keyed, key):
    import openai

    with _openai(keyed.base_url, key) as client:
        with pytest.raises(openai.AuthenticationError) as info:
            client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client.models.list()


def test_401_envelopes_and_headers(keyed):
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        missing = http.post("/v1/completions", json={"model": "fake", "prompt": "x"},
                            headers={"X-Request-ID": "auth-test-1"})
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        # a fresh id: nothing an unauthenticated client sends reaches the log
        assert missing.headers["x-request-id"] not in ("auth-test-1", "")
        assert missing.json() == {"error": {"message": missing.json()["error"]["message"],
                                            "type": "authentication_error", "param": None,
                                            "code": "invalid_api_key"}}
        wrong = http.get("/v1/models", headers={"Authorization": f"Bearer {WRONG_KEYS[0]}"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
        assert wrong.headers["x-request-id"]
        assert WRONG_KEYS[0] not in wrong.text and KEY not in wrong.text
        ollama = http.post("/api/chat", json={"model": "fake", "messages": []})
        assert ollama.status_code == 401 and ollama.headers["www-authenticate"] == "Bearer"
        assert list(ollama.json()) == ["error"] and isinstance(ollama.json()["error"], str)


@pytest.mark.parametrize("method, path", PROTECTED)
def test_every_route_refuses_without_the_key(keyed, method, path):
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        assert http.request(method, path).status_code == 401
        assert http.request(method, path, headers={"Authorization": f"Bearer {WRONG_KEYS[1]}"}).status_code == 401
        assert http.request(method, path, headers={"Authorization": f"Bearer {KEY}"}).status_code != 401


def test_the_key_is_checked_before_the_body_is_read(keyed):
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        for body in (b"{not json", b'{"model": "nope", "prompt": 1}'):
            response = http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
            assert response.status_code == 401  # not 400/404: nothing was parsed or looked up
        response = http.post("/v1/completions", content=b"{not json",
                             headers={"content-type": "application/json", "Authorization": f"Bearer {KEY}"})
        assert response.status_code == 400


def test_health_and_ollama_root_stay_public(keyed):
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        assert http.get("/health/live").status_code == 200
        assert http.get("/health/ready").status_code == 200
        assert http.get("/health").status_code == 200 and http.get("/v1/health").status_code == 200
        root = http.get("/")
        assert root.status_code == 200 and root.text == "Ollama is running"
        assert http.head("/").status_code == 200


def test_metrics_with_the_key(keyed):
    response = httpx.get(keyed.base_url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert response.status_code == 200 and "laneserve_requests_total" in response.text
    assert KEY not in response.text


def test_ollama_client_with_and_without_the_key(keyed, monkeypatch):
    import ollama

    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    client = ollama.Client(host=keyed.base_url, headers={"Authorization": f"Bearer {KEY}"})
    reply = client.chat(model="fake", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 3})
    assert reply.message.content
    parts = list(client.generate(model="fake", prompt="x", stream=True, options={"num_predict": 3}))
    assert parts[-1].done
    assert [m.model for m in client.list().models] == ["fake"]
    for anonymous in (ollama.Client(host=keyed.base_url),
                      ollama.Client(host=keyed.base_url, headers={"Authorization": f"Bearer {WRONG_KEYS[2]}"})):
        with pytest.raises(ollama.ResponseError) as info:
            anonymous.chat(model="fake", messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 401
    monkeypatch.setenv("OLLAMA_API_KEY", KEY)  # the client's own way to send a bearer key
    assert ollama.Client(host=keyed.base_url).generate(model="fake", prompt="x",
                                                       options={"num_predict": 2}).done


def test_cors_preflight_is_not_blocked_by_auth(keyed):
    with httpx.Client(base_url=keyed.base_url, timeout=10) as http:
        preflight = http.options("/v1/chat/completions", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == ORIGIN
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        refused = http.post("/v1/chat/completions", json={}, headers={"Origin": ORIGIN})
        # the browser may read the 401 (the page can tell its user the key is wrong)
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ORIGIN


def test_the_key_never_reaches_logs_records_or_metrics(keyed):
    auth = {"Authorization": f"Bearer {KEY}"}
    elsewhere = {"X-Api-Key": KEY, "User-Agent": KEY, "Cookie": f"k={KEY}", "X-Forwarded-For": KEY}
    with httpx.Client(base_url=keyed.base_url, timeout=30) as http:
        for wrong in WRONG_KEYS:
            assert http.post("/v1/completions", json={"model": KEY, "prompt": KEY},
                             headers={"Authorization": f"Bearer {wrong}", "X-Request-ID": "auth-leak-id",
                                      **elsewhere}).status_code == 401
            assert http.post("/api/generate", json={"model": "fake", "prompt": wrong},
                             headers={"Authorization": wrong}).status_code == 401
        unknown = http.post("/v1/completions", json={"model": KEY, "prompt": "x"}, headers={**auth, **elsewhere})
        assert unknown.status_code == 404
        ok = http.post("/v1/completions", json={"model": "fake", "prompt": KEY, "max_tokens": 2, "user": KEY},
                       headers={**auth, **elsewhere})
        assert ok.status_code == 200
        ollama_ok = http.post("/api/generate", json={"model": "fake", "prompt": KEY, "stream": False,
                                                     "options": {"num_predict": 2}}, headers={**auth, **elsewhere})
        assert ollama_ok.status_code == 200
        metrics = http.get("/metrics", headers=auth).text
    log = keyed.log_text()
    records = keyed.records_path.read_text()
    assert '"unauthorized"' in log and '"request_finished"' in log and records
    assert "auth-leak-id" not in log
    for secret in (KEY, *WRONG_KEYS):
        assert secret not in log
        assert secret not in records
        assert secret not in metrics


# --- other ways to give the key -----------------------------------------------------------------

@pytest.mark.parametrize("form", ["file", "flag"])
def test_key_from_file_and_flag(own_server, tmp_path, form):
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    key_args = ("--api-key-file", str(key_file)) if form == "file" else ("--api-key", KEY)
    srv = own_server("--model", SYNTHETIC, *key_args, real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=10) as http:
        assert http.get("/v1/models").status_code == 401
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert srv.terminate() == 0
    assert KEY not in srv.log_text()


def test_key_file_through_the_sanic_cli(own_server, tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY)
    sanic = [sys.executable, "-m", "sanic", "gateway.app:create_app", "--factory", "--host", "127.0.0.1",
             "--port", "{port}", "--model", SYNTHETIC, "--api-key-file", str(key_file)]
    srv = own_server(command=sanic, records=False, real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=10) as http:
        assert http.get("/v1/models").status_code == 401
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    time.sleep(1.0)  # Sanic's manager may still be collecting startup acks (see server/test_launch.py)
    assert srv.terminate() == 0


def test_unreadable_key_file_stops_the_start(own_server, tmp_path):
    srv = own_server("--model", SYNTHETIC, "--api-key-file", str(tmp_path / "missing"), real_model=False)
    assert srv.proc.wait(30) == 2
    assert "api_key_file" in srv.log_text()


# --- without a key ------------------------------------------------------------------------------

def test_no_key_no_cors_by_default(own_server):
    srv = own_server("--model", SYNTHETIC, real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=10) as http:
        responses = [
            http.get("/v1/models", headers={"Origin": ORIGIN}),
            http.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 2},
                      headers={"Origin": ORIGIN}),
            http.options("/v1/completions", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}),
        ]
        assert [r.status_code for r in responses[:2]] == [200, 200]  # open without a key
        assert responses[2].status_code != 204
        for response in responses:
            assert not [h for h in response.headers if h.lower().startswith("access-control-")]
    assert srv.terminate() == 0
