"""Logprobs against the real server with the real SmolLM2, through the openai client: prompt
scores (`echo` + `max_tokens: 0`) equal the in-process engine's teacher-forced logits and agree
with llama.cpp's golden top-20 within the golden fidelity tolerances; stream and non-stream
agree; `bytes` concatenate to the text, chunk by chunk; a sequence's logprobs do not depend on
its batchmates; bad values are 400s naming the field."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest

pytestmark = pytest.mark.real_model

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden" / "smollm2-135m-instruct-q4_1" / "dev"
# The golden fidelity tolerances of tests/csrc/model/test_llama_golden.py (never looser here).
GOLDEN_TOP1 = 0.96
GOLDEN_KL = 0.006
# API values are float32 log-softmax of the same logits the in-process engine produces.
EXACT = 2e-5
CHAT = [{"role": "user", "content": "Write one sentence about Paris in French."}]


def golden(kind: str) -> list[dict]:
    with open(GOLDEN / f"{kind}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


@pytest.fixture(scope="module")
def reference():
    import lanes
    from lanes import Model

    return Model(lanes.smollm2_path(), threads=1)


def score(client, ids, logprobs=5):
    return client.completions.create(model="smollm2", prompt=ids, echo=True, max_tokens=0, logprobs=logprobs,
                                     temperature=0)


def test_echo_max_tokens_0_scores_equal_teacher_forced_logits(openai_client, reference):
    for rec in golden("logits")[:7]:
        ids = rec["ids"]
        reply = score(openai_client, ids)
        choice = reply.choices[0]
        assert choice.text == reference.detokenize(ids) and choice.finish_reason == "length"
        assert reply.usage.completion_tokens == 0 and reply.usage.prompt_tokens == len(ids)
        lp = choice.logprobs
        assert len(lp.tokens) == len(ids) and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        ref = log_softmax(reference.logits(ids))
        for p in range(1, len(ids)):
            assert abs(lp.token_logprobs[p] - ref[p - 1, ids[p]]) <= EXACT, (rec["name"], p)
            # {token text: logprob} of the 5 most likely tokens plus the prompt's own (tokens with the
            # same text, e.g. partial UTF-8 shown as U+FFFD, share a key: the likelier one stays).
            expected = {}
            for t in [*np.argsort(-ref[p - 1], kind="stable")[:5], ids[p]]:
                expected.setdefault(reference.detokenize([int(t)]), ref[p - 1, t])
            got = lp.top_logprobs[p]
            assert got.keys() == expected.keys(), (rec["name"], p)
            assert all(abs(got[k] - expected[k]) <= EXACT for k in got), (rec["name"], p)
        assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(ids))]


def test_scores_agree_with_golden_top1(openai_client, reference):
    """Every golden position: our most likely next token (top_logprobs) is golden's top-1."""
    agree = total = 0
    for rec in golden("logits"):
        ids = rec["ids"]
        lp = score(openai_client, ids).choices[0].logprobs
        for pos in rec["positions"][:-1]:  # the last position scores a token that is not in the prompt
            top = lp.top_logprobs[pos["pos"] + 1]
            best = max(top, key=top.get)
            agree += int(best == reference.detokenize([pos["top"][0][0]]))
            total += 1
    assert total > 1000
    assert agree / total >= GOLDEN_TOP1, agree / total


def test_scores_agree_with_golden_top20_kl(openai_client, reference):
    """KL(golden ‖ ours) over golden's top-20 at every position of the first short golden records,
    each candidate's value read through the API: the candidate forced as the one generated token
    by logit_bias +100 (logprobs are taken before logit_bias, so the bias does not show), or, for an
    end-of-generation candidate (never scored as generated text), scored with echo."""
    records = golden("logits")[:3]
    eog = set(reference.eog_ids)

    def candidate_logprob(prefix, token):
        if token in eog:
            return score(openai_client, prefix + [token], logprobs=0).choices[0].logprobs.token_logprobs[-1]
        reply = openai_client.completions.create(model="smollm2", prompt=prefix, max_tokens=1, temperature=0,
                                                 logprobs=0, logit_bias={str(token): 100})
        assert reply.choices[0].logprobs.tokens == [reference.detokenize([token])]
        return reply.choices[0].logprobs.token_logprobs[0]

    jobs = [(rec["ids"][:pos["pos"] + 1], t) for rec in records for pos in rec["positions"] for t, _ in pos["top"]]
    with ThreadPoolExecutor(8) as pool:
        ours = list(pool.map(lambda job: candidate_logprob(*job), jobs))
    kls, k = [], 0
    for rec in records:
        for pos in rec["positions"]:
            gold = np.array([lp for _, lp in pos["top"]])
            mine = np.array(ours[k:k + len(gold)])
            k += len(gold)
            kls.append(float(np.sum(np.exp(gold) * (gold - mine))))
    assert len(kls) == 31
    assert float(np.mean(kls)) <= GOLDEN_KL, float(np.mean(kls))


def entries_bytes(entries) -> bytes:
    return bytes(b for e in entries for b in e.bytes)


def test_chat_logprobs_stream_and_non_stream_agree_and_bytes_make_the_text(openai_client):
    kwargs = dict(model="smollm2", messages=CHAT, temperature=0, max_tokens=40, logprobs=True, top_logprobs=20)
    reply = openai_client.chat.completions.create(**kwargs)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert entries_bytes(content).decode("utf-8") == reply.choices[0].message.content
    for e in content:
        assert len(e.top_logprobs) == 20
        values = [t.logprob for t in e.top_logprobs]
        assert values == sorted(values, reverse=True) and values[0] <= 0.0
        # Greedy: the chosen token is the most likely one (values are before temperature).
        assert e.logprob == e.top_logprobs[0].logprob and e.bytes == e.top_logprobs[0].bytes
    chunks = list(openai_client.chat.completions.create(stream=True, **kwargs))
    streamed = []
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        entries = choice.logprobs.content if choice.logprobs else []
        # A chunk's text and its tokens' logprobs travel together.
        assert entries_bytes(entries).decode("utf-8") == (choice.delta.content or "")
        streamed += entries
    assert [(e.token, e.logprob, e.bytes) for e in streamed] == [(e.token, e.logprob, e.bytes) for e in content]
    assert [[t.logprob for t in e.top_logprobs] for e in streamed] == [[t.logprob for t in e.top_logprobs]
                                                                         for e in content]


def test_partial_utf8_tokens_keep_their_own_bytes(openai_client):
    """Emoji take several byte-level tokens each: each token's bytes are its own, the text whole."""
    reply = openai_client.completions.create(model="smollm2", prompt="Emoji: 🙂🚀🌍🎉 and more: ", max_tokens=0,
                                             echo=True, logprobs=1)
    lp = reply.choices[0].logprobs
    assert "\ufffd" in "".join(lp.tokens)  # some token holds part of a character
    chat = openai_client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Reply with three emoji only: 🙂🚀🌍"}],
        temperature=0, max_tokens=12, logprobs=True)
    content = chat.choices[0].logprobs.content
    assert entries_bytes(content).decode("utf-8") == chat.choices[0].message.content


def test_completions_logprobs_stream_and_non_stream_agree_with_echo(openai_client):
    kwargs = dict(model="smollm2", prompt="The three primary colors are", temperature=0, max_tokens=12,
                  logprobs=5, echo=True)
    reply = openai_client.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.text.startswith("The three primary colors are")
    lp = choice.logprobs
    num_prompt = reply.usage.prompt_tokens
    assert len(lp.tokens) == num_prompt + reply.usage.completion_tokens
    assert lp.token_logprobs[0] is None and all(v is not None for v in lp.token_logprobs[1:])
    assert all(len(t) <= 6 for t in lp.top_logprobs[1:])
    assert lp.text_offset[num_prompt] == len("The three primary colors are")
    chunks = [c for c in openai_client.completions.create(stream=True, **kwargs) if c.choices]
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[0].choices[0].text == "The three primary colors are"  # the echo first
    tokens, values, offsets = [], [], []
    for c in chunks:
        if c.choices[0].logprobs is not None:
            tokens += c.choices[0].logprobs.tokens
            values += c.choices[0].logprobs.token_logprobs
            offsets += c.choices[0].logprobs.text_offset
    assert (tokens, values, offsets) == (lp.tokens, lp.token_logprobs, lp.text_offset)


def test_stop_strings_with_logprobs(openai_client):
    """Text held back as a possible stop-string prefix brings its tokens' logprobs when released;
    the tokens of the stop string itself still count (they were generated) and come last."""
    base = openai_client.completions.create(model="smollm2", prompt="The three primary colors are", temperature=0,
                                            max_tokens=24)
    words = base.choices[0].text.split()
    stop = " " + words[2]
    kwargs = dict(model="smollm2", prompt="The three primary colors are", temperature=0, max_tokens=24,
                  logprobs=2, stop=[stop])
    reply = openai_client.completions.create(**kwargs)
    assert reply.choices[0].finish_reason == "stop" and stop not in reply.choices[0].text
    lp = reply.choices[0].logprobs
    assert len(lp.tokens) == reply.usage.completion_tokens
    assert "".join(lp.tokens).startswith(reply.choices[0].text)
    chunks = [c for c in openai_client.completions.create(stream=True, **kwargs) if c.choices]
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text
    assert [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens] == lp.tokens


def test_logprobs_do_not_depend_on_batchmates(openai_client):
    kwargs = dict(model="smollm2", messages=CHAT, temperature=0, max_tokens=24, logprobs=True, top_logprobs=5)

    def values(reply):
        return [(e.token, e.logprob, [t.logprob for t in e.top_logprobs]) for e in reply.choices[0].logprobs.content]

    alone = values(openai_client.chat.completions.create(**kwargs))
    others = [dict(model="smollm2", messages=[{"role": "user", "content": f"Count to {k}."}], temperature=0.7,
                   seed=k, max_tokens=30) for k in range(3)]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(openai_client.chat.completions.create, **o) for o in others]
        together = values(openai_client.chat.completions.create(**kwargs))
        [f.result() for f in futures]
    echo_alone = score(openai_client, golden("logits")[2]["ids"]).choices[0].logprobs.token_logprobs
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(openai_client.chat.completions.create, **o) for o in others]
        echo_together = score(openai_client, golden("logits")[2]["ids"]).choices[0].logprobs.token_logprobs
        [f.result() for f in futures]
    assert together == alone and echo_together == echo_alone


@pytest.mark.parametrize("route, body, param", [
    ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("chat", {"top_logprobs": 2}, "top_logprobs"),
    ("completions", {"logprobs": 6}, "logprobs"),
    ("completions", {"max_tokens": 0}, "max_tokens"),
])
def test_bad_values_are_400_naming_the_field(openai_client, route, body, param):
    with pytest.raises(openai.BadRequestError) as info:
        if route == "chat":
            openai_client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=2, extra_body=body)
        else:
            openai_client.completions.create(model="smollm2", prompt="Hi", extra_body={"max_tokens": 2, **body})
    assert info.value.body["param"] == param


def test_ollama_logprobs_stream_and_non_stream_agree(base_url):
    import ollama

    client = ollama.Client(host=base_url, timeout=60)  # (its types keep token and logprob, not bytes)
    kwargs = dict(model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
                  options={"temperature": 0, "num_predict": 16, "repeat_penalty": 1.0},
                  logprobs=True, top_logprobs=3)  # no penalty: greedy picks the raw argmax
    reply = client.chat(**kwargs)
    entries = reply.logprobs
    assert len(entries) == reply.eval_count
    assert "".join(e.token for e in entries) == reply.message.content  # ASCII reply: whole-character tokens
    assert all(len(e.top_logprobs) == 3 and e.logprob == e.top_logprobs[0].logprob for e in entries)
    streamed = []
    for part in client.chat(stream=True, **kwargs):
        got = part.logprobs or []
        assert "".join(e.token for e in got) == part.message.content
        streamed += got
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries]
    with pytest.raises(ollama.ResponseError) as info:
        client.generate(model="smollm2", prompt="Hi", logprobs=True, top_logprobs=21)
    assert info.value.status_code == 400 and "top_logprobs" in str(info.value)
