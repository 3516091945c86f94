"""A minimal HTTP/1.1 + SSE client on asyncio streams: one kept-alive connection per worker and
one JSON parse per event, so the client stays cheap next to a server sharing the same cores.

Per request (times in seconds from the moment the request is written):
  ttfr  first SSE event carrying `choices` (vLLM bench's TTFT; a role-only chunk counts)
  ttft  first event with non-empty text (`content`, `reasoning_content` or completion `text`) —
        AIPerf's TTFT, the one the tables report
  e2e   end of the stream
  output/prompt tokens from the server's usage chunk (`stream_options.include_usage`); when a
  server sends none, the number of text events stands in and the record says `usage: false`.
"""
from __future__ import annotations

import asyncio
import json
import socket
import time
from urllib.parse import urlsplit


class Conn:
    """One kept-alive HTTP/1.1 connection; reopened after an error or a `Connection: close`."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def body_parts(reader: asyncio.StreamReader, headers: dict):
    """The response body as it arrives (chunked, Content-Length or until close)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise ConnectionError("connection closed inside the body")
            size = int(size_line.split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if length:
            yield await reader.readexactly(length)
    else:
        while data := await reader.read(65536):
            yield data


def _text_of(choice: dict) -> str | None:
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content")
    return text


async def _send(conn: Conn, head: bytes, payload: bytes) -> tuple[bytes, float]:
    for _ in range(2):
        reused = conn.writer is not None
        await conn.open()
        t0 = time.perf_counter()
        try:
            conn.writer.write(head + payload)
            status_line = await conn.reader.readline()
        except ConnectionError:
            status_line = b""
        if status_line:
            return status_line, t0
        conn.close()
        if not reused:
            raise ConnectionError("connection closed before the status line")
        # A kept-alive connection the server had closed meanwhile (llama-server closes after
        # every streamed response): send again on a new one, clock restarted.
    raise ConnectionError("connection closed before the status line")


async def stream_request(conn: Conn, path: str, body: dict, headers_extra: str = "") -> dict:
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {conn.host}:{conn.port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\n{headers_extra}\r\n").encode()
    status_line, t0 = await _send(conn, head, payload)
    reader = conn.reader
    status = int(status_line.split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    keep = headers.get("connection", "").lower() != "close" and (
        "content-length" in headers or headers.get("transfer-encoding", "").lower() == "chunked")
    if status != 200:
        async for _ in body_parts(reader, headers):
            pass
        if not keep:
            conn.close()
        return {"error": f"http_{status}"}
    first_event = first = last = None
    text_events = 0
    max_gap = 0.0
    usage = None
    stream_error = None
    buf = b""
    loads = json.loads
    perf = time.perf_counter
    async for data in body_parts(reader, headers):
        now = perf()  # one stamp per network read, shared by the events it carries
        buf += data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while (end := buf.find(b"\n\n")) >= 0:
            event, buf = buf[:end], buf[end + 2:]
            for line in event.split(b"\n"):
                if line.startswith(b"error:"):
                    stream_error = "stream_error"
                if not line.startswith(b"data:"):
                    continue
                data_bytes = line[5:].strip()
                if data_bytes == b"[DONE]":
                    continue
                chunk = loads(data_bytes)
                if "error" in chunk:
                    stream_error = "stream_error"
                if chunk.get("usage"):
                    usage = chunk["usage"]
                choices = chunk.get("choices")
                if not choices:
                    continue
                if first_event is None:
                    first_event = now
                if _text_of(choices[0]):
                    if first is None:
                        first = now
                    elif now - last > max_gap:
                        max_gap = now - last
                    last = now
                    text_events += 1
    end_t = perf()
    if not keep:
        conn.close()
    if stream_error:
        return {"error": stream_error}
    if first is None:
        return {"error": "no_text"}
    output_tokens = usage.get("completion_tokens") if usage else None
    record = {"ttfr_s": first_event - t0, "ttft_s": first - t0, "e2e_s": end_t - t0,
              "output_tokens": output_tokens or text_events, "usage": bool(output_tokens),
              "prompt_tokens": usage.get("prompt_tokens") if usage else None,
              "text_events": text_events, "max_event_gap_s": max_gap}
    n = record["output_tokens"]
    # AIPerf's inter-token latency (vLLM bench's TPOT): the decode time per token after the first
    record["itl_s"] = (record["e2e_s"] - record["ttft_s"]) / (n - 1) if n > 1 else None
    return record


async def guarded_request(conn: Conn, path: str, body: dict, timeout_s: float, headers_extra: str = "") -> dict:
    """stream_request that never raises: every failure becomes a record with its kind."""
    try:
        return await asyncio.wait_for(stream_request(conn, path, body, headers_extra), timeout_s)
    except asyncio.TimeoutError:
        kind = "timeout"
    except ConnectionRefusedError:
        kind = "refused"
    except (ConnectionError, asyncio.IncompleteReadError):
        kind = "disconnected"
    except (ValueError, IndexError):  # an unparsable status line, chunk size or event
        kind = "bad_response"
    except OSError as exc:
        kind = f"os_{type(exc).__name__}"
    conn.close()
    return {"error": kind}
