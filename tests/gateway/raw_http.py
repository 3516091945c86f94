"""A raw-socket HTTP/1.1 client for tests that check the bytes of a response, not what a client
library makes of them: the response must begin with its status line, and a chunked body must be
well-formed up to its terminating chunk with nothing after it."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson

MAX_HEAD_BYTES = 64 * 1024


@dataclass
class RawResponse:
    status: int
    headers: dict  # lower-cased names
    body: bytes
    chunked: bool


class BadFraming(AssertionError):
    pass


def request_bytes(method: str, path: str, body: bytes = b"", headers: dict | None = None) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line[:-2], 16)
        except ValueError:
            raise BadFraming(f"bad chunk size line {size_line[:40]!r} after {bytes(body[-80:])!r}") from None
        data = await reader.readexactly(size + 2)
        if data[-2:] != b"\r\n":
            raise BadFraming(f"chunk of {size} bytes not followed by CRLF: {data[-20:]!r}")
        if size == 0:
            return bytes(body)  # the terminating chunk (no trailers are sent)
        body += data[:-2]


async def exchange(port: int, raw_request: bytes, timeout_s: float = 60.0) -> RawResponse:
    """Send one request on a new connection and read its response byte-exactly."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=MAX_HEAD_BYTES)
    try:
        writer.write(raw_request)
        await writer.drain()

        async def read() -> RawResponse:
            start = await reader.readexactly(9)
            if start != b"HTTP/1.1 ":
                rest = await reader.read(200)
                raise BadFraming(f"response does not begin with its status line: {start + rest!r}")
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head[:-4].decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 1)[0])
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            chunked = headers.get("transfer-encoding", "").lower() == "chunked"
            if raw_request.startswith(b"HEAD "):
                body = b""  # the headers describe the GET's body, which a HEAD answer never has
            elif chunked:
                body = await _read_chunked(reader)
            else:
                body = await reader.readexactly(int(headers.get("content-length", "0")))
            extra = await reader.read()  # Connection: close — the server closes after the response
            if extra:
                raise BadFraming(f"{len(extra)} bytes after the end of the response: {extra[:80]!r}")
            return RawResponse(status, headers, body, chunked)

        return await asyncio.wait_for(read(), timeout_s)
    finally:
        writer.close()


def sse_frames(body: bytes) -> list[tuple[str | None, object]]:
    """(event name or None, data) of every SSE event: data as JSON (or the string "[DONE]"),
    comments skipped; a named event's data must carry its name as "type". Raises when any
    event is not a whole, valid frame (bytes of two writers interleaved)."""
    if not body.endswith(b"\n\n"):
        raise BadFraming(f"SSE body does not end with a blank line: {body[-80:]!r}")
    frames = []
    for frame in body[:-2].split(b"\n\n"):
        if frame.startswith(b":"):
            continue
        lines = frame.split(b"\n")
        name = lines.pop(0)[len(b"event: "):].decode() if lines[0].startswith(b"event: ") else None
        if len(lines) != 1 or not lines[0].startswith(b"data: "):
            raise BadFraming(f"not an SSE event: {frame[:80]!r}")
        payload = lines[0][len(b"data: "):]
        data = "[DONE]" if payload == b"[DONE]" else orjson.loads(payload)
        if name is not None and data["type"] != name:
            raise BadFraming(f"event {name!r} with data of type {data['type']!r}")
        frames.append((name, data))
    return frames


def sse_events(body: bytes) -> list:
    """The data of every SSE event (see sse_frames)."""
    return [data for _, data in sse_frames(body)]


def ndjson_lines(body: bytes) -> list:
    if not body.endswith(b"\n"):
        raise BadFraming(f"NDJSON body does not end with a newline: {body[-80:]!r}")
    return [orjson.loads(line) for line in body[:-1].split(b"\n")]
