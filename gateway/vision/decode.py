"""Image payloads of chat requests → RGB Pillow images, before any preprocessing (gateway.vision.preprocess).

Accepted: PNG, JPEG, WebP and GIF (its first frame), as OpenAI `data:image/...;base64,` URIs or Ollama's raw
base64. Remote URLs are refused, never fetched (no network at run time, and no server-side fetching of user
URLs). Conversion to RGB drops alpha without compositing, as llama.cpp's stb_image load does.

Errors: ImageDecodeError (→ 400, naming the request part) for a URL, bad base64 or anything Pillow cannot
decode as one of the formats; ImageTooLarge (→ 413) beyond the byte or pixel limit — pixels are checked from the
header before the image is decoded.
"""
from __future__ import annotations

import base64
import binascii
import io
import re

from PIL import Image

FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGE_PIXELS = 50_000_000

_DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,", re.IGNORECASE)


class ImageDecodeError(ValueError):
    """The payload is not an image we accept (message is ours, never Pillow's)."""


class ImageTooLarge(ValueError):
    pass


def payload_bytes(value: str, where: str, max_bytes: int = MAX_IMAGE_BYTES) -> bytes:
    """The image bytes of a data URI (OpenAI image_url) or of raw base64 (Ollama images)."""
    if not isinstance(value, str) or not value:
        raise ImageDecodeError(f"{where}: expected a base64 image or a data: URI")
    if re.match(r"^[a-z][a-z0-9+.-]*://", value, re.IGNORECASE):
        raise ImageDecodeError(f"{where}: image URLs are not fetched; send the image as a data: URI (base64)")
    m = _DATA_URI.match(value)
    if value[:5].lower() == "data:" and not m:
        raise ImageDecodeError(f"{where}: only base64 data: URIs are accepted")
    b64 = value[m.end():] if m else value
    if len(b64) * 3 // 4 > max_bytes + 3:
        raise ImageTooLarge(f"{where}: the image is larger than the limit of {max_bytes} bytes")
    try:
        data = base64.b64decode("".join(b64.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ImageDecodeError(f"{where}: the image is not valid base64") from None
    if not data:
        raise ImageDecodeError(f"{where}: the image is empty")
    if len(data) > max_bytes:
        raise ImageTooLarge(f"{where}: the image is larger than the limit of {max_bytes} bytes")
    return data


def decode_image(data: bytes, where: str, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """Bytes → RGB image (GIF: first frame)."""
    try:
        with Image.open(io.BytesIO(data), formats=list(FORMATS)) as img:
            if img.width * img.height > max_pixels:
                raise ImageTooLarge(f"{where}: {img.width}×{img.height} is more than the limit of {max_pixels} pixels")
            img.seek(0)
            img.load()
            return img.convert("RGB")
    except ImageTooLarge:
        raise
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        raise ImageDecodeError(f"{where}: the data is not a PNG, JPEG, WebP or GIF image") from None
