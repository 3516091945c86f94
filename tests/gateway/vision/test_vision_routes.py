"""Images through a real server (`--mmproj`): Gemma 3 270M with the random-weight gemma3 projector of
tests/csrc/vision/mmproj_gguf.py, beside a text-only model. The openai client (stream and not), the ollama
client (/api/chat and /api/generate) and Anthropic's /v1/messages give the same text for the same image, with the image's tokens in the prompt
count; ten images in one request; 8 concurrent requests with different images mixed with text-only ones each equal the same request alone
(seeded); every bad input is a 400 (413 beyond the pixel limit) in the protocol's error shape, and an image URL is
never fetched (a local server records whether it was hit); `vision` is listed only for the projector's model."""
from __future__ import annotations

import asyncio
import base64

import httpx
import ollama
import openai
import pytest

from .pictures import (QUESTION, UrlRecorder, huge_png_header_b64, mmproj_gguf, noise_image, openai_image_message,
                       png_b64, url_of)
from image_prompts import image_prompt  # noqa: E402  (tests/csrc/vision, on the path through .pictures)

pytestmark = pytest.mark.real_model
MAX_TOKENS = 12
# Seeded sampling at temperature 1 with every filter off, the same through both protocols (Ollama's own defaults
# differ: top_k 40, top_p 0.9, repeat_penalty 1.1; Ollama has no ignore_eos, which changes the distribution):
# a random-weight projector moves the logits, rarely the argmax.
OPENAI_SAMPLING = dict(temperature=1.0, top_p=1.0, seed=7, max_tokens=MAX_TOKENS, extra_body={"top_k": 0})
LONG_SAMPLING = {**OPENAI_SAMPLING, "extra_body": {"top_k": 0, "ignore_eos": True}}
OLLAMA_OPTIONS = dict(temperature=1.0, top_p=1.0, top_k=0, repeat_penalty=1.0, seed=7, num_predict=MAX_TOKENS)


def test_same_text_through_both_clients_and_image_tokens_counted(clients, mmproj):
    oai, oll = clients
    img = mmproj_gguf.IMAGES["gemma3"][0]
    b64 = png_b64(mmproj_gguf.image_pixels(img))
    reply = oai.chat.completions.create(model="g", messages=openai_image_message(b64), **OPENAI_SAMPLING)
    text = reply.choices[0].message.content
    assert text and reply.usage.completion_tokens <= MAX_TOKENS
    from lanes import _runtime, gemma3_path
    want_ids, _ = image_prompt("gemma3", _runtime.Tokenizer(str(gemma3_path())).encode,
                               _runtime.VisionEncoder(str(mmproj)), img, QUESTION)
    assert reply.usage.prompt_tokens == len(want_ids)  # the image's 36 tokens and its two markers included
    stream = oai.chat.completions.create(model="g", messages=openai_image_message(b64), stream=True,
                                         stream_options={"include_usage": True}, **OPENAI_SAMPLING)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.prompt_tokens == len(want_ids)
    chat = oll.chat(model="g", messages=[{"role": "user", "content": QUESTION, "images": [b64]}],
                    options=OLLAMA_OPTIONS)
    assert chat.message.content == text and chat.prompt_eval_count == len(want_ids)
    streamed = "".join(p.message.content for p in oll.chat(
        model="g", messages=[{"role": "user", "content": QUESTION, "images": [b64]}], options=OLLAMA_OPTIONS,
        stream=True))
    assert streamed == text
    generated = oll.generate(model="g", prompt=QUESTION, images=[b64], options=OLLAMA_OPTIONS)
    assert generated.response == text
    # Anthropic's Messages API has no seed: compared greedy.
    greedy = oai.chat.completions.create(model="g", messages=openai_image_message(b64), temperature=0,
                                         max_tokens=MAX_TOKENS)
    anthropic_reply = httpx.post(url_of(oai) + "/v1/messages", timeout=120, json={
        "model": "g", "max_tokens": MAX_TOKENS, "temperature": 0, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
            {"type": "text", "text": QUESTION}]}]}).json()
    assert anthropic_reply["content"][0]["text"] == greedy.choices[0].message.content
    usage = anthropic_reply["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == len(want_ids), usage
    assert usage["cache_read_input_tokens"] > 36  # the same image's K/V were reused from the earlier requests
    count = httpx.post(url_of(oai) + "/v1/messages/count_tokens", timeout=120, json={
        "model": "g", "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
            {"type": "text", "text": QUESTION}]}]}).json()
    assert count == {"input_tokens": len(want_ids)}
    plain = oai.chat.completions.create(model="g", messages=[{"role": "user", "content": QUESTION}],
                                        **OPENAI_SAMPLING)
    assert plain.choices[0].message.content != text  # the image is in the prompt, not ignored
    other = png_b64(mmproj_gguf.image_pixels(mmproj_gguf.IMAGES["gemma3"][1]))
    again = oai.chat.completions.create(model="g", messages=openai_image_message(other), **OPENAI_SAMPLING)
    assert again.usage.prompt_tokens == len(want_ids) and again.choices[0].message.content != text  # its pixels count


def test_concurrent_images_and_text_each_equal_alone(vision_server):
    url = vision_server.base_url + "/v1"
    requests = [openai_image_message(png_b64(noise_image(k)), f"Picture {k}: what is in it?") for k in range(8)]
    requests += [[{"role": "user", "content": f"Tell me about {topic}."}] for topic in ("the sea", "bread", "snow", "owls")]

    async def run(messages):
        async with openai.AsyncOpenAI(base_url=url, api_key="x", timeout=300, max_retries=0) as client:
            reply = await client.chat.completions.create(model="g", messages=messages, **LONG_SAMPLING)
            return reply.choices[0].message.content

    async def alone_then_together():
        alone = [await run(m) for m in requests]
        together = await asyncio.gather(*(run(m) for m in requests))
        return alone, together

    alone, together = asyncio.run(alone_then_together())
    assert len(set(alone[:8])) == 8  # each image its own text
    assert together == alone


def test_many_images_in_one_request(clients):
    """Ten images in one message (380 of the 512 context positions are image rows) cross the request ring."""
    oai, oll = clients
    pictures = [png_b64(noise_image(k)) for k in range(10)]
    content = [{"type": "text", "text": "Compare these:"}]
    content += [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b}"}} for b in pictures]
    reply = oai.chat.completions.create(model="g", messages=[{"role": "user", "content": content}], **OPENAI_SAMPLING)
    one = oai.chat.completions.create(model="g", messages=[{"role": "user", "content": content[:2]}], **OPENAI_SAMPLING)
    assert reply.usage.prompt_tokens - one.usage.prompt_tokens == 9 * 38  # 36 image tokens and 2 markers each
    chat = oll.chat(model="g", messages=[{"role": "user", "content": "Compare these:", "images": pictures}],
                    options=OLLAMA_OPTIONS)
    assert chat.prompt_eval_count == reply.usage.prompt_tokens


def test_bad_inputs_openai_and_anthropic(vision_server, url_server):
    post = lambda body: httpx.post(vision_server.base_url + "/v1/chat/completions", timeout=60,  # noqa: E731
                                   json={"model": "g", "max_tokens": 2, **body})
    good = png_b64(noise_image(2))

    def parts(url):
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                          {"type": "image_url", "image_url": {"url": url}}]}]}
    cases = [
        (parts(url_server), 400, "messages[0].content[1]: image URLs are not fetched"),
        (parts("data:image/png;base64," + base64.b64encode(b"not an image at all").decode()), 400,
         "messages[0].content[1]: the data is not a PNG, JPEG, WebP or GIF image"),
        (parts("data:image/png;base64,@@@"), 400, "messages[0].content[1]: the image is not valid base64"),
        (parts("data:image/png;base64," + huge_png_header_b64()), 413, "messages[0].content[1]: 10000×10000"),
        ({**parts("data:image/png;base64," + good), "model": "plain"}, 400, "does not take images"),
    ]
    for body, status, message in cases:
        r = post(body)
        assert r.status_code == status, (message, r.text)
        error = r.json()["error"]
        assert message in error["message"] and error["type"] == "invalid_request_error", error
    r = httpx.post(vision_server.base_url + "/v1/messages", timeout=60, json={
        "model": "g", "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": url_server}}]}]})
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    assert "messages[0].content[0]: image URLs are not fetched" in r.json()["error"]["message"]
    assert UrlRecorder.hits == []


def test_bad_inputs_ollama(vision_server, url_server):
    url = vision_server.base_url
    good = png_b64(noise_image(3))
    cases = [
        ("/api/chat", {"messages": [{"role": "user", "content": "hi", "images": [url_server]}]}, 400,
         "messages[0].images[0]: image URLs are not fetched"),
        ("/api/generate", {"prompt": "hi", "images": [base64.b64encode(b"GIF89a broken").decode()]}, 400,
         "images[0]: the data is not a PNG, JPEG, WebP or GIF image"),
        ("/api/chat", {"messages": [{"role": "user", "content": "hi", "images": [huge_png_header_b64()]}]}, 413,
         "messages[0].images[0]: 10000×10000"),
        ("/api/generate", {"prompt": "hi", "images": [good], "raw": True}, 400, "raw: false"),
        ("/api/chat", {"model": "plain", "messages": [{"role": "user", "content": "hi", "images": [good]}]}, 400,
         "does not take images"),
    ]
    for path, body, status, message in cases:
        r = httpx.post(url + path, json={"model": "g", "stream": False, **body}, timeout=60)
        assert r.status_code == status, (message, r.text)
        assert set(r.json()) == {"error"} and message in r.json()["error"], r.text
    with pytest.raises(ollama.ResponseError) as err:  # the client sends base64 as is (a URL it takes for a file)
        ollama.Client(host=url).chat(model="g", messages=[{"role": "user", "content": "hi", "images": [
            base64.b64encode(b"not an image at all").decode()]}])
    assert err.value.status_code == 400 and "messages[0].images[0]" in str(err.value)
    assert UrlRecorder.hits == []


def test_vision_capability_only_with_a_projector(vision_server, clients):
    oai, oll = clients
    models = {m["id"]: m for m in httpx.get(vision_server.base_url + "/v1/models").json()["data"]}
    caps = {name: m["laneserve"]["capabilities"] for name, m in models.items()}
    assert "vision" in caps["g"] and "vision" not in caps["plain"]
    assert "vision" in oll.show("g").capabilities and "vision" not in oll.show("plain").capabilities
