"""Images in chat requests → (message text with an image marker where each image sits, the images' bytes).

Called by the request parsers (gateway/openai/messages.py, gateway/ollama/requests.py); the images are decoded
later, off the event loop, when the prompt is built (gateway.vision.request).
- OpenAI chat: content parts `{"type": "text"}` and `{"type": "image_url", "image_url": {"url": "data:...",
  "detail": ...}}` (`detail` accepted and ignored; a bare string `image_url` is accepted too); the marker replaces
  each image in the concatenated text.
- Ollama: `messages[].images` (/api/chat) and top-level `images` (/api/generate), raw base64; the markers go
  before the message text, one per image.
Errors are gateway.vision.decode's: ImageDecodeError (400, naming the part), ImageTooLarge (413).
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
            url = part.get("image_url")
            if type(url) is dict:
                url = url.get("url")
            if type(url) is not str:
                raise ImageDecodeError(f"{here}: image_url.url must be a string")
            images.append(RequestImage(here, payload_bytes(url, here)))
            texts.append(IMAGE_MARKER)
        else:
            raise ImageDecodeError(f"{here}: content parts must be text or image_url")
    return "".join(texts), images


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
