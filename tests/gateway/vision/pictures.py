"""Pictures and helpers for the image tests through a real server (tests/gateway/vision, the Responses tests there
and tests/gateway/ui): PNGs of noise of different sizes, a PNG header claiming too many pixels, the OpenAI chat
message around an image, and a local HTTP server that records whether an image URL was fetched."""
from __future__ import annotations

import base64
import io
import struct
import sys
import zlib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import openai
from PIL import Image

# importlib import mode: the projector generator lives beside the golden tests (tests/csrc/vision).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "csrc" / "vision"))
import mmproj_gguf  # noqa: E402,F401  (re-exported)

QUESTION = "Describe this image."


def png_bytes(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def png_b64(pixels: np.ndarray) -> str:
    return base64.b64encode(png_bytes(pixels)).decode()


def noise_image(seed: int) -> np.ndarray:
    """A different picture per seed, of a different size and aspect ratio."""
    rng = np.random.default_rng(seed)
    h, w = 40 + 17 * seed, 120 - 9 * seed
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def huge_png_header_b64(width: int = 10_000, height: int = 10_000) -> str:
    """A PNG whose header claims width × height pixels (its data is not there: the limit is checked first)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    return base64.b64encode(raw).decode()


def url_of(client: openai.OpenAI) -> str:
    return str(client.base_url).rstrip("/").removesuffix("/v1")


def openai_image_message(b64: str, question: str = QUESTION) -> list[dict]:
    """Image first, then the question: the same text as Ollama's (its images' markers go before the text)."""
    return [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}", "detail": "low"}},
        {"type": "text", "text": question}]}]


class UrlRecorder(BaseHTTPRequestHandler):
    """Serves a picture and records every path asked for (the `url_server` fixture clears it)."""
    hits: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        UrlRecorder.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(png_bytes(noise_image(1)))

    def log_message(self, *args):
        pass
