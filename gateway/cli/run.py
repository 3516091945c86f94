"""`laneserve run MODEL`: an interactive chat in the terminal against a running server.

Each line is sent with the whole conversation so far to /v1/chat/completions (stream: true) and
the answer is printed as it arrives. Ctrl-C while an answer streams closes the HTTP connection
(the server cancels the generation at once) and keeps what was shown as the assistant's turn;
Ctrl-C at the prompt clears the line; `/bye` or Ctrl-D quits, `/clear` forgets the conversation.
Standard library only (http.client), so the command needs nothing beyond the server's packages.
"""
from __future__ import annotations

import http.client
import json
import sys
import urllib.parse

HELP = "Type a message; /clear forgets the conversation, /bye (or Ctrl-D) quits, Ctrl-C stops an answer."


class ChatError(RuntimeError):
    """The server refused the request (message from its error body)."""


def _connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url must be http(s)://host[:port] (got {url!r})")
    return cls(parts.hostname, parts.port, timeout=timeout_s), parts.path.rstrip("/")


def stream_chat(url: str, model: str, messages: list[dict], api_key: str | None = None,
                timeout_s: float = 600.0):
    """Yield the answer's text pieces; closing the generator (or an exception inside the consumer,
    e.g. KeyboardInterrupt) closes the connection, which cancels the generation on the server."""
    conn, prefix = _connection(url, timeout_s)
    try:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        body = json.dumps({"model": model, "messages": messages, "stream": True})
        conn.request("POST", prefix + "/v1/chat/completions", body=body, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raw = resp.read()
            try:
                message = json.loads(raw)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = raw.decode(errors="replace")[:200]
            raise ChatError(f"HTTP {resp.status}: {message}")
        while True:
            line = resp.readline()
            if not line:
                return
            line = line.strip()
            if not line.startswith(b"data: "):
                continue  # blank separators and ": keep-alive" comments
            payload = line[len(b"data: "):]
            if payload == b"[DONE]":
                return
            event = json.loads(payload)
            if "error" in event:
                raise ChatError(str(event["error"].get("message", event["error"])))
            for choice in event.get("choices", []):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text
    finally:
        conn.close()


def run(model: str, url: str, api_key: str | None = None, prompt: str = ">>> ") -> int:
    history: list[dict] = []
    out = sys.stdout
    print(HELP, file=out, flush=True)
    while True:
        try:
            line = input(prompt)
        except EOFError:
            print(file=out)
            return 0
        except KeyboardInterrupt:
            print(file=out)
            continue
        command = line.strip()
        if command in ("/bye", "/exit", "/quit"):
            return 0
        if command == "/clear":
            history.clear()
            print("(conversation cleared)", file=out, flush=True)
            continue
        if not command:
            continue
        history.append({"role": "user", "content": line})
        answer: list[str] = []
        pieces = stream_chat(url, model, history, api_key)
        try:
            for text in pieces:
                answer.append(text)
                out.write(text)
                out.flush()
            print(file=out, flush=True)
        except KeyboardInterrupt:
            pieces.close()  # closes the connection now: the server cancels the generation
            print("\n(stopped)", file=out, flush=True)
        except (ChatError, OSError, ValueError) as exc:
            print(f"\nerror: {exc}", file=sys.stderr, flush=True)
            history.pop()
            continue
        history.append({"role": "assistant", "content": "".join(answer)})
