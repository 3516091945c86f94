"""Embeddings: OpenAI POST /v1/embeddings and Ollama POST /api/embed, /api/embeddings.

Unit tests of gateway/embeddings/requests.py (no lanes); the whole path on the synthetic backend
(deterministic 8-dimensional vectors, exact values); the real SmolLM2 through the real `openai`
and `ollama` clients; error shapes through httpx."""
from __future__ import annotations

import base64
import concurrent.futures
import math
import struct
import time

import httpx
import pytest

from gateway.embeddings import requests as E
from gateway.http.errors import APIError

# --- unit: parsing, shaping, grouping ---------------------------------------------------------


def test_openai_input_forms():
    assert E.parse_openai({"model": "m", "input": "hi"}, lenient=False).inputs == ("hi",)
    assert E.parse_openai({"model": "m", "input": ["a", "b"]}, lenient=False).inputs == ("a", "b")
    assert E.parse_openai({"model": "m", "input": [1, 2]}, lenient=False).inputs == ((1, 2),)
    assert E.parse_openai({"model": "m", "input": [[1], [2, 3]]}, lenient=False).inputs == ((1,), (2, 3))
    r = E.parse_openai({"model": "m", "input": "x", "encoding_format": "base64", "dimensions": 4, "user": "u"},
                       lenient=False)
    assert (r.encoding_format, r.dimensions, r.truncate) == ("base64", 4, False)


@pytest.mark.parametrize("body, param", [
    ({"input": "x"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": ""}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": ["a", ""]}, "input"),
    ({"model": "m", "input": [[1], []]}, "input"),
    ({"model": "m", "input": ["a", 1]}, "input"),
    ({"model": "m", "input": [True]}, "input"),
    ({"model": "m", "input": {"a": 1}}, "input"),
    ({"model": "m", "input": ["a"] * (E.MAX_INPUTS + 1)}, "input"),
    ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
    ({"model": "m", "input": "x", "dimensions": 1.5}, "dimensions"),
    ({"model": "m", "input": "x", "user": 3}, "user"),
    ({"model": "m", "input": "x", "temperature": 1}, "temperature"),
])
def test_openai_rejects(body, param):
    with pytest.raises(APIError) as err:
        E.parse_openai(body, lenient=False)
    assert err.value.status == 400 and err.value.param == param


def test_openai_lenient_lists_unknown_fields():
    assert E.parse_openai({"model": "m", "input": "x", "extra": 1}, lenient=True).ignored_fields == ("extra",)


def test_ollama_forms():
    assert E.parse_ollama({"model": "m", "input": "hi"}, legacy=False).inputs == ("hi",)
    assert E.parse_ollama({"model": "m", "input": ["a", "b"], "keep_alive": "5m", "options": {"num_ctx": 8},
                           "whatever": 1}, legacy=False).inputs == ("a", "b")
    assert E.parse_ollama({"model": "m"}, legacy=False).inputs == ()
    assert E.parse_ollama({"model": "m", "input": ""}, legacy=False).inputs == ()
    assert E.parse_ollama({"model": "m", "input": "x"}, legacy=False).truncate is True
    assert E.parse_ollama({"model": "m", "input": "x", "truncate": False}, legacy=False).truncate is False
    assert E.parse_ollama({"model": "m", "prompt": "p"}, legacy=True).inputs == ("p",)
    assert E.parse_ollama({"model": "m", "prompt": ""}, legacy=True).inputs == ()
    for body in ({"input": "x"}, {"model": "m", "input": [1]}, {"model": "m", "input": ["a", ""]},
                 {"model": "m", "input": "x", "truncate": "no"}, {"model": "m", "input": "x", "options": 3}):
        with pytest.raises(APIError):
            E.parse_ollama(body, legacy=False)


def test_shaped_truncates_and_renormalises():
    v = struct.pack("<4f", 0.5, 0.5, 0.5, 0.5)
    assert list(E.shaped(v, None)) == [0.5] * 4
    assert list(E.shaped(v, 4)) == [0.5] * 4
    head = E.shaped(v, 2)
    assert len(head) == 2 and abs(head[0] - 1 / math.sqrt(2)) < 1e-7 and head[0] == head[1]
    body = E.openai_body("m", [head], "base64", 3)
    assert struct.unpack("<2f", base64.b64decode(body["data"][0]["embedding"])) == tuple(head)
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3} and body["object"] == "list"


def test_pack_groups():
    inputs = [[1] * n for n in (3, 3, 5, 1, 10, 2)]
    groups = E.pack_groups(inputs, token_budget=10, max_per_group=3)
    assert [(first, [len(x) for x in g]) for first, g in groups] == [(0, [3, 3]), (2, [5, 1]), (4, [10]), (5, [2])]
    assert E.pack_groups([[1]] * 5, 100, 2)[-1] == (4, [[1]])


# --- the synthetic backend: exact vectors through the whole path -------------------------------


def synthetic_vector(ids: list[int]) -> list[float]:
    """What csrc/lane/synthetic_backend.cpp answers for an input's token ids (rounded to float32)."""
    raw = [sum(float((i + 1) * (j + 1) % 13 + 1) for i in ids) for j in range(8)]
    norm = math.sqrt(sum(x * x for x in raw))
    return list(struct.unpack("<8f", struct.pack("<8f", *(x / norm for x in raw))))


def renormalised(v: list[float], d: int) -> list[float]:
    head = [float(x) for x in v[:d]]
    norm = math.sqrt(math.fsum(x * x for x in head))
    return list(struct.unpack(f"<{d}f", struct.pack(f"<{d}f", *(x / norm for x in head))))


@pytest.fixture
def fake(synthetic_server):
    with httpx.Client(base_url=synthetic_server.base_url, timeout=60) as c:
        yield c


def tokens(client, text: str) -> list[int]:
    return client.post("/tokenize", json={"model": "fake", "prompt": text}).json()["tokens"]


def test_synthetic_openai_shapes(fake):
    texts = ["Hello world", "Second input", "x"]
    r = fake.post("/v1/embeddings", json={"model": "fake", "input": texts})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = [tokens(fake, t) for t in texts]
    assert body["object"] == "list" and body["model"] == "fake"
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and {d["object"] for d in body["data"]} == {"embedding"}
    assert [d["embedding"] for d in body["data"]] == [synthetic_vector(x) for x in ids]
    n = sum(map(len, ids))
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}
    b64 = fake.post("/v1/embeddings", json={"model": "fake", "input": [[5, 6, 7]], "encoding_format": "base64",
                                            "dimensions": 3}).json()
    assert list(struct.unpack("<3f", base64.b64decode(b64["data"][0]["embedding"]))) == \
        renormalised(synthetic_vector([5, 6, 7]), 3)
    assert b64["usage"]["prompt_tokens"] == 3


def test_synthetic_many_inputs_are_grouped_and_ordered(fake, synthetic_server):
    # 200 inputs > 128 per lane request, and 3 × 400 tokens > n_ctx (1024) per group
    inputs = [[i % 50 + 1, i % 7 + 1] for i in range(200)] + [[9] * 400] * 3
    r = fake.post("/v1/embeddings", json={"model": "fake", "input": inputs})
    assert r.status_code == 200, r.text
    assert [d["embedding"] for d in r.json()["data"]] == [synthetic_vector(x) for x in inputs]
    assert r.json()["usage"]["prompt_tokens"] == 400 + 1200


def test_synthetic_ollama_shapes(fake):
    ids = tokens(fake, "Hello world")
    r = fake.post("/api/embed", json={"model": "fake:latest", "input": ["Hello world", "Hello world"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "fake:latest" and body["embeddings"] == [synthetic_vector(ids)] * 2
    assert body["prompt_eval_count"] == 2 * len(ids) and body["total_duration"] > 0 and body["load_duration"] == 0
    assert fake.post("/api/embed", json={"model": "fake", "input": []}).json()["embeddings"] == []
    assert fake.post("/api/embeddings", json={"model": "fake", "prompt": "Hello world"}).json() == \
        {"embedding": synthetic_vector(ids)}
    assert fake.post("/api/embeddings", json={"model": "fake", "prompt": ""}).json() == {"embedding": []}
    long = " ".join(["word"] * 1500)  # > 1024 tokens
    cut = fake.post("/api/embed", json={"model": "fake", "input": long}).json()
    assert cut["prompt_eval_count"] == 1024 and cut["embeddings"] == [synthetic_vector(tokens(fake, long)[:1024])]
    refused = fake.post("/api/embed", json={"model": "fake", "input": long, "truncate": False})
    assert refused.status_code == 400 and refused.json() == {"error": E.CONTEXT_EXCEEDED_OLLAMA}


def test_synthetic_errors(fake):
    def err(path, body, status):
        r = fake.post(path, json=body)
        assert r.status_code == status, r.text
        return r.json()["error"]
    e = err("/v1/embeddings", {"model": "nope", "input": "x"}, 404)
    assert e["code"] == "model_not_found" and e["type"] == "invalid_request_error"
    assert err("/v1/embeddings", {"model": "fake", "input": "x", "dimensions": 9}, 400)["param"] == "dimensions"
    assert err("/v1/embeddings", {"model": "fake", "input": [[1, 10**6]]}, 400)["param"] == "input"
    assert err("/v1/embeddings", {"model": "fake", "input": "x", "foo": 1}, 400)["code"] == "unknown_parameter"
    assert err("/v1/embeddings", {"model": "fake", "input": [[1] * 1025]}, 400)["code"] == "context_length_exceeded"
    assert err("/v1/embeddings", {"model": "fake", "input": ""}, 400)["param"] == "input"
    assert err("/api/embed", {"model": "nope", "input": "x"}, 404) == "model 'nope' not found"
    assert err("/api/embed", {"model": "fake", "input": [1]}, 400) == "invalid input type"
    assert err("/api/embed", {"model": "fake", "input": "x", "dimensions": 9}, 400).startswith("'dimensions'")
    assert err("/api/embeddings", {"prompt": "x"}, 400) == "model is required"
    assert fake.post("/v1/embeddings", content=b"{", headers={"content-type": "application/json"}).status_code == 400
    form = {"content-type": "application/x-www-form-urlencoded"}  # what `curl -d` sends
    assert fake.post("/v1/embeddings", content=b'{"model":"fake","input":"x"}', headers=form).status_code == 415
    ollama_form = fake.post("/api/embed", content=b'{"model":"fake","input":"x"}', headers=form)
    assert ollama_form.status_code == 200 and len(ollama_form.json()["embeddings"][0]) == 8
    assert fake.post("/api/embed", content=b"{", headers=form).json()["error"].startswith("request body is not valid")


def test_synthetic_concurrent_requests(fake, synthetic_server):
    def one(i):
        with httpx.Client(base_url=synthetic_server.base_url, timeout=60) as c:
            return c.post("/v1/embeddings", json={"model": "fake", "input": [[i + 1, 2], [3, i + 1]]})
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        replies = list(pool.map(one, range(24)))
    for i, r in enumerate(replies):
        assert r.status_code == 200, r.text
        assert [d["embedding"] for d in r.json()["data"]] == [synthetic_vector([i + 1, 2]), synthetic_vector([3, i + 1])]


def test_synthetic_disconnect_frees_the_lane(fake, synthetic_server):
    # 32 inputs × 100 tokens at 1 ms per token, 8 slots: ~0.8 s per step, ~3.2 s in all
    body = {"model": "fake", "input": [[i + 1] * 100 for i in range(32)]}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(synthetic_server.base_url + "/v1/embeddings", json=body, timeout=0.3)
    started = time.monotonic()
    while sum(lane["slots_in_use"] for lane in fake.get("/health/ready").json()["models"]["fake"]["lanes"]):
        assert time.monotonic() - started < 2.0, "the lane did not drop the cancelled embedding request"
        time.sleep(0.01)
    assert fake.post("/v1/embeddings", json={"model": "fake", "input": [[1, 2]]}).json()["data"][0]["embedding"] == \
        synthetic_vector([1, 2])


# --- the real SmolLM2 through real clients -----------------------------------------------------


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_openai_client(openai_client):
    one = openai_client.embeddings.create(model="smollm2", input="The cat sat on the mat.", encoding_format="float")
    v = one.data[0].embedding
    assert len(v) == 576 and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5
    assert one.usage.prompt_tokens == one.usage.total_tokens > 0 and one.model == "smollm2"
    # the client's default asks for base64 and decodes it: same floats
    default = openai_client.embeddings.create(model="smollm2", input="The cat sat on the mat.")
    assert default.data[0].embedding == v
    many = openai_client.embeddings.create(model="smollm2", input=["The cat sat on the mat.", "Stock prices fell."])
    assert [d.index for d in many.data] == [0, 1] and many.data[0].embedding == v
    short = openai_client.embeddings.create(model="smollm2", input="The cat sat on the mat.", dimensions=64)
    w = short.data[0].embedding
    assert len(w) == 64 and abs(math.sqrt(sum(x * x for x in w)) - 1) < 1e-5
    assert cosine(w, v[:64]) > 0.99999
    import openai
    with pytest.raises(openai.BadRequestError):
        openai_client.embeddings.create(model="smollm2", input="x", dimensions=577)


def test_ollama_client(base_url):
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=base_url)
    r = client.embed(model="smollm2", input=["The cat sat on the mat.", "A cat is sitting on a rug."])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 576 and r.prompt_eval_count > 0
    legacy = client.embeddings(model="smollm2", prompt="The cat sat on the mat.")
    assert legacy.embedding == pytest.approx(r.embeddings[0], abs=1e-7)
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model="missing", input="x")
    assert err.value.status_code == 404


def test_same_text_same_vector_while_generation_runs(http, base_url):
    body = {"model": "smollm2", "input": "Embeddings are batched with generation."}
    alone = http.post("/v1/embeddings", json=body).json()["data"][0]["embedding"]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        gens = [pool.submit(httpx.post, base_url + "/v1/completions", timeout=60,
                            json={"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 24,
                                  "temperature": 0, "ignore_eos": True}) for _ in range(2)]
        amid = pool.submit(httpx.post, base_url + "/v1/embeddings", json=body, timeout=60)
        assert amid.result().json()["data"][0]["embedding"] == alone
        assert all(g.result().status_code == 200 for g in gens)
