"""tests/gateway/vision: the real-server fixtures (`mmproj`, `vision_server` are in tests/gateway/conftest.py)."""
from __future__ import annotations

import threading
from http.server import HTTPServer

import ollama
import openai
import pytest

from .pictures import UrlRecorder


@pytest.fixture(scope="module")
def clients(vision_server):
    url = vision_server.base_url
    return (openai.OpenAI(base_url=url + "/v1", api_key="x", timeout=120, max_retries=0),
            ollama.Client(host=url, timeout=120))


@pytest.fixture
def url_server():
    """An image URL on a local server; UrlRecorder.hits lists what was fetched from it."""
    srv = HTTPServer(("127.0.0.1", 0), UrlRecorder)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    UrlRecorder.hits.clear()
    yield f"http://127.0.0.1:{srv.server_port}/picture.png"
    srv.shutdown()
    srv.server_close()
