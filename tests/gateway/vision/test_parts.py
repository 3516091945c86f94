"""gateway.vision.parts: images in OpenAI content parts and Ollama `images` (no model)."""
import base64

import pytest

from gateway.vision.decode import ImageDecodeError
from gateway.vision.parts import IMAGE_MARKER, FileIdImage, ollama_images, openai_content, responses_image, with_markers

PNG = base64.b64encode(b"\x89PNG fake bytes").decode()


def test_openai_parts_place_markers_in_order():
    text, images = openai_content([
        {"type": "text", "text": "A "},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "high"}},
        {"type": "text", "text": " and B "},
        {"type": "image_url", "image_url": f"data:image/jpeg;base64,{PNG}"},
    ], "messages[0].content")
    assert text == f"A {IMAGE_MARKER} and B {IMAGE_MARKER}"
    assert images == [("messages[0].content[1]", base64.b64decode(PNG)), ("messages[0].content[3]", base64.b64decode(PNG))]


@pytest.mark.parametrize("part, match", [
    ({"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}, r"content\[0\]: image URLs are not fetched"),
    ({"type": "image_url", "image_url": {}}, r"content\[0\]: image_url.url must be a string"),
    ({"type": "input_audio"}, r"content\[0\]: content parts must be text or image_url"),
])
def test_openai_bad_parts(part, match):
    with pytest.raises(ImageDecodeError, match=match):
        openai_content([part], "messages[0].content")


def test_ollama_images():
    assert ollama_images(None, "images") == []
    assert [im.data for im in ollama_images([PNG, PNG], "messages[1].images")] == [base64.b64decode(PNG)] * 2
    assert ollama_images([PNG], "images")[0].where == "images[0]"
    assert with_markers("what is this?", 2) == IMAGE_MARKER * 2 + "what is this?"
    with pytest.raises(ImageDecodeError, match=r"messages\[1\].images\[0\]: image URLs"):
        ollama_images(["https://example.com/a.png"], "messages[1].images")
    with pytest.raises(ImageDecodeError, match="must be an array"):
        ollama_images(PNG, "images")


def test_responses_input_image():
    uri = f"data:image/png;base64,{PNG}"
    assert responses_image({"type": "input_image", "image_url": uri, "detail": "high"}, "input[0].content[1]") == \
        ("input[0].content[1]", base64.b64decode(PNG))
    assert responses_image({"type": "input_image", "image_url": {"url": uri}}, "p").data == base64.b64decode(PNG)
    with pytest.raises(FileIdImage, match=r"input\[0\].content\[0\]: images by file_id are not supported"):
        responses_image({"type": "input_image", "file_id": "file-abc"}, "input[0].content[0]")
    with pytest.raises(ImageDecodeError, match=r"p: image URLs are not fetched"):
        responses_image({"type": "input_image", "image_url": "http://127.0.0.1:9/a.png"}, "p")
    with pytest.raises(ImageDecodeError, match=r"p: image_url must be a string"):
        responses_image({"type": "input_image"}, "p")
