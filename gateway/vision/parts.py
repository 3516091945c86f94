"""Images in chat requests → (message text with an image marker where each image sits, the images' bytes).

Called by the request parsers (gateway/openai/messages.py, gateway/ollama/requests.py); the images are decoded
later, off the event loop, when the prompt is built (gateway.vision.request).
- OpenAI chat: content parts `{"type": "text"}` and `{"type": "image_url", "image_url": {"url": "data:...",
  "detail": ...}}` (`detail` accepted and ignored; a bare string `image_url` is accepted too); the marker replaces
  each image in the concatenated text.
- Responses API: input message parts `{"type": "input_image", "image_url": "data:...", "detail": ...}` (`detail`
  accepted and ignored; an object `{"url": ...}` accepted too); `file_id` is refused (no Files API here).
- Ollama: `messages[].images` (/api/chat) and top-level `images` (/api/generate), raw base64; the markers go
  before the message text, one per image.
Errors are gateway.vision.decode's: ImageDecodeError (400, naming the part), ImageTooLarge (413); FileIdImage
(400) for a Responses image given by `file_id`.
"""
from __future__ import annotations

from typing import NamedTuple

from gateway.vision.decode import ImageDecodeError, payload_bytes

IMAGE_MARKER = "<__media__>"  # llama.cpp's default media marker; a chat template renders it like any text


class RequestImage(NamedTuple):
    """One image of a request, still encoded: `where` names its part in errors (e.g. messages[0].content[1])."""
    where: str
    data: bytes


def openai_content(content: list, where: str) -> tuple[str, list[RequestImage]]:
    """An OpenAI message's content parts → (text with IMAGE_MARKER per image, the images in order)."""
    texts: list[str] = []
    images: list[RequestImage] = []
    for k, part in enumerate(content):
        here = f"{where}[{k}]"
        kind = part.get("type") if type(part) is dict else None
        if kind == "text" and type(part.get("text")) is str:
            texts.append(part["text"])
        elif kind == "image_url":
            url = _url_string(part.get("image_url"), here, "image_url.url")
            images.append(RequestImage(here, payload_bytes(url, here)))
            texts.append(IMAGE_MARKER)
        else:
            raise ImageDecodeError(f"{here}: content parts must be text or image_url")
    return "".join(texts), images


class FileIdImage(ValueError):
    """A Responses `input_image` that names an uploaded file: this server has no Files API."""


def _url_string(url: object, here: str, field: str) -> str:
    if type(url) is dict:
        url = url.get("url")
    if type(url) is not str:
        raise ImageDecodeError(f"{here}: {field} must be a string")
    return url


def responses_image(part: dict, where: str) -> RequestImage:
    """A Responses API `input_image` part → its image (the caller places IMAGE_MARKER where it sits)."""
    if part.get("file_id") is not None and part.get("image_url") is None:
        raise FileIdImage(f"{where}: images by file_id are not supported (this server has no Files API); "
                          "send image_url as a data: URI (base64)")
    url = _url_string(part.get("image_url"), where, "image_url")
    return RequestImage(where, payload_bytes(url, where))


def ollama_images(images: object, where: str) -> list[RequestImage]:
    """Ollama's `images` list (raw base64 strings) → the images, in order."""
    if images is None:
        return []
    if type(images) is not list:
        raise ImageDecodeError(f"{where}: images must be an array of base64 strings")
    return [RequestImage(f"{where}[{k}]", payload_bytes(v, f"{where}[{k}]")) for k, v in enumerate(images)]


def with_markers(text: str, n_images: int) -> str:
    """The images' markers first, then the message text."""
    return IMAGE_MARKER * n_images + text
