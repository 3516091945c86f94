"""gateway.vision.decode: accepted formats, and the 400 / 413 cases (no model)."""
import base64
import io

import numpy as np
import pytest
from PIL import Image

from gateway.vision.decode import ImageDecodeError, ImageTooLarge, decode_image, payload_bytes

PIXELS = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 3


def encoded(fmt: str, mode: str = "RGB", **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(PIXELS).convert(mode).save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "GIF"])
def test_lossless_formats_decode_to_the_same_rgb(fmt):
    kw = {"lossless": True} if fmt == "WEBP" else {}
    img = decode_image(encoded(fmt, **kw), "image 1")
    assert img.mode == "RGB" and img.size == (6, 4)
    if fmt != "GIF":  # GIF is palettised
        assert np.array_equal(np.asarray(img), PIXELS)


def test_jpeg_and_alpha_dropped_without_compositing():
    assert decode_image(encoded("JPEG"), "x").size == (6, 4)
    rgba = np.dstack([PIXELS, np.zeros((4, 6), np.uint8)])
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, format="PNG")
    assert np.array_equal(np.asarray(decode_image(buf.getvalue(), "x")), PIXELS)


def test_gif_first_frame():
    frames = [Image.new("RGB", (2, 2), (255, 0, 0)), Image.new("RGB", (2, 2), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    assert decode_image(buf.getvalue(), "x").getpixel((0, 0)) == (255, 0, 0)


def test_data_uri_and_raw_base64():
    raw = encoded("PNG")
    b64 = base64.b64encode(raw).decode()
    assert payload_bytes(f"data:image/png;base64,{b64}", "x") == raw
    assert payload_bytes(b64, "x") == raw


@pytest.mark.parametrize("value, match", [
    ("http://127.0.0.1:1/cat.png", "not fetched"),
    ("https://example.com/cat.png", "not fetched"),
    ("data:image/png,rawbytes", "only base64"),
    ("data:image/png;base64,@@@@", "not valid base64"),
    ("", "expected a base64 image"),
])
def test_bad_payloads_name_the_part(value, match):
    with pytest.raises(ImageDecodeError, match=f"messages\\[0\\].content\\[1\\]: .*{match}"):
        payload_bytes(value, "messages[0].content[1]")


def test_not_an_image_is_a_decode_error():
    with pytest.raises(ImageDecodeError, match="image 2: the data is not a PNG"):
        decode_image(b"GIF89a-but-not-really" * 4, "image 2")
    with pytest.raises(ImageDecodeError):
        decode_image(encoded("BMP"), "image 2")  # a real image, but not a format we accept


def test_limits():
    with pytest.raises(ImageTooLarge, match="bytes"):
        payload_bytes(base64.b64encode(b"x" * 2000).decode(), "x", max_bytes=1000)
    with pytest.raises(ImageTooLarge, match="pixels"):
        decode_image(encoded("PNG"), "x", max_pixels=23)
