"""Images through the Responses API (`input_image` parts) on a real server with the real `openai` client
(responses.create, stream and not): the same greedy text and prompt tokens as chat completions for the same image
and question, the image kept with the stored conversation for `previous_response_id`, and every bad input a 400
(413 beyond the pixel limit) in the OpenAI error shape, an image URL never fetched."""
from __future__ import annotations

import base64

import openai
import pytest

from .pictures import QUESTION, UrlRecorder, huge_png_header_b64, noise_image, openai_image_message, png_b64

pytestmark = pytest.mark.real_model
GREEDY = dict(temperature=0)
MAX_TOKENS = 12
IMAGE_TOKENS = 36  # the gemma3 projector's tokens per image (its two marker tokens come on top)


def image_input(b64: str, question: str = QUESTION, **part) -> list[dict]:
    """The Responses form of openai_image_message: the image, then the question, in one user message."""
    return [{"role": "user", "content": [
        {"type": "input_image", "image_url": f"data:image/png;base64,{b64}", "detail": "low", **part},
        {"type": "input_text", "text": question}]}]


@pytest.fixture(scope="module")
def client(vision_server):
    with openai.OpenAI(base_url=vision_server.base_url + "/v1", api_key="x", timeout=120, max_retries=0) as c:
        yield c


def test_same_text_and_tokens_as_chat_completions_stream_and_not(client):
    b64 = png_b64(noise_image(4))
    chat = client.chat.completions.create(model="g", messages=openai_image_message(b64), max_tokens=MAX_TOKENS,
                                          **GREEDY)
    text = chat.choices[0].message.content
    assert text and chat.usage.prompt_tokens > IMAGE_TOKENS
    r = client.responses.create(model="g", input=image_input(b64), max_output_tokens=MAX_TOKENS, **GREEDY)
    assert r.output_text == text
    assert r.usage.input_tokens == chat.usage.prompt_tokens  # the image's tokens counted as input
    events = list(client.responses.create(model="g", input=image_input(b64), max_output_tokens=MAX_TOKENS,
                                          stream=True, **GREEDY))
    final = events[-1].response  # response.completed, or .incomplete when max_output_tokens cut it
    assert events[-1].type in ("response.completed", "response.incomplete") and final.status == r.status
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text == final.output_text
    assert final.usage.input_tokens == chat.usage.prompt_tokens
    other = client.responses.create(model="g", input=image_input(png_b64(noise_image(5))),
                                    max_output_tokens=MAX_TOKENS, **GREEDY)
    assert other.usage.input_tokens == r.usage.input_tokens and other.output_text != text  # its pixels count


def test_previous_response_id_keeps_the_image(client):
    """The second turn's prompt holds the first turn's image: the same text and tokens as chat completions
    over the whole conversation (and a text-only model refuses to continue it)."""
    b64 = png_b64(noise_image(6))
    first = client.responses.create(model="g", input=image_input(b64), max_output_tokens=MAX_TOKENS, **GREEDY)
    follow = "And what colour is it mostly?"
    second = client.responses.create(model="g", input=follow, previous_response_id=first.id,
                                     max_output_tokens=MAX_TOKENS, **GREEDY)
    messages = openai_image_message(b64) + [{"role": "assistant", "content": first.output_text},
                                            {"role": "user", "content": follow}]
    chat = client.chat.completions.create(model="g", messages=messages, max_tokens=MAX_TOKENS, **GREEDY)
    assert second.output_text == chat.choices[0].message.content
    assert second.usage.input_tokens == chat.usage.prompt_tokens
    assert second.usage.input_tokens_details.cached_tokens > IMAGE_TOKENS  # the first turn's image K/V reused
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="plain", input=follow, previous_response_id=second.id, max_output_tokens=2)
    assert err.value.body["code"] == "images_not_supported"


def test_bad_inputs_in_the_openai_error_shape(client, url_server):
    good = png_b64(noise_image(2))
    corrupt = base64.b64encode(b"not an image at all").decode()
    part = "input[0].content[0]"
    cases = [  # (model, the image part, status, code, message)
        ("g", {"image_url": url_server}, 400, "invalid_image", f"{part}: image URLs are not fetched"),
        ("g", {"image_url": "data:image/png;base64," + corrupt}, 400, "invalid_image",
         f"{part}: the data is not a PNG, JPEG, WebP or GIF image"),
        ("g", {"image_url": "data:image/png;base64,@@@"}, 400, "invalid_image", f"{part}: the image is not valid base64"),
        ("g", {"image_url": "data:image/png;base64," + huge_png_header_b64()}, 413, "image_too_large",
         f"{part}: 10000×10000"),
        ("plain", {"image_url": "data:image/png;base64," + good}, 400, "images_not_supported", "does not take images"),
        ("g", {"image_url": None, "file_id": "file-abc"}, 400, "unsupported_parameter",
         f"{part}: images by file_id are not supported"),
    ]
    for model, fields, status, code, message in cases:
        content = [{"type": "input_image", "detail": "auto", **fields}, {"type": "input_text", "text": "hi"}]
        with pytest.raises(openai.APIStatusError) as err:
            client.responses.create(model=model, input=[{"role": "user", "content": content}], max_output_tokens=2)
        error = err.value.body
        assert err.value.status_code == status, (message, error)
        assert error["code"] == code and message in error["message"] and error["type"] == "invalid_request_error"
        assert error["param"] == ("input" if code == "images_not_supported" else part), error
    assert UrlRecorder.hits == []
