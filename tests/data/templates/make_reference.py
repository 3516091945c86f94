"""Renders every chat template in this directory with llama-server's own template engine
(`--jinja --chat-template-file`, POST /apply-template) on a few conversations, into rendered.json,
which tests/gateway/text/test_model_templates.py compares our jinja2 sandbox against. The templates of
TOOL_TEMPLATES also render TOOL_BODIES (tools, an assistant's call with its content or reasoning and its
result, a reasoning level)
into tool_turns.json, compared the same way through the gateway's request parsing.

The *.jinja files are the chat templates the models' GGUFs carry (llama.cpp keeps copies under
models/templates). llama-server needs a model for its BOS/EOS strings: the tiny qwen3moe file of
tests/data/arch; its strings are recorded too, and so is the date, for templates that print it.

    python tests/data/templates/make_reference.py --llama-server /work/llama-build/build/bin/llama-server
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
MODEL = HERE.parent / "arch" / "qwen3moe-q4_k_m.gguf"
PORT = 18777
CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Where is Lyon?"}],
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3, ça va ? ✓"}],
]

TOOL_TEMPLATES = [HERE.parent / "arch" / "gpt-oss.jinja"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {  # no description
    "type": "object", "properties": {"tz": {"type": "string", "description": "IANA zone"}}}}}
CALLED = [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": None, "tool_calls": [
              {"id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
# The call's text sent back: its content (rendered as its analysis), then its reasoning too (rendered instead).
SAID = [CALLED[0], {**CALLED[1], "content": "Let me check."}, CALLED[2]]
THOUGHT = [CALLED[0], {**SAID[1], "reasoning_content": "Need the weather."}, CALLED[2]]
TOOL_BODIES = [{"messages": CALLED, "tools": [WEATHER]}, {"messages": SAID, "tools": [WEATHER]},
               {"messages": THOUGHT, "tools": [WEATHER]},
               {"messages": CALLED + [{"role": "assistant", "content": "Sunny."},
                                      {"role": "user", "content": "And Lyon?"}],
                "tools": [WEATHER, TIME], "reasoning_effort": "low"}]


def render_all(server: str, template: Path, bodies: list[dict] | None = None) -> list[dict]:
    proc = subprocess.Popen([server, "-m", str(MODEL), "--jinja", "--chat-template-file", str(template),
                             "--host", "127.0.0.1", "--port", str(PORT), "-t", "1", "-c", "256"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{PORT}"
        for _ in range(120):
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        props = httpx.get(base + "/props", timeout=10).json()
        out = []
        for body in bodies or [{"messages": m} for m in CONVERSATIONS]:
            r = httpx.post(base + "/apply-template", json=body, timeout=30)
            r.raise_for_status()
            out.append({**({"body": body} if bodies else {"messages": body["messages"]}), "prompt": r.json()["prompt"]})
        return [{"bos_token": props.get("bos_token", ""), "eos_token": props.get("eos_token", "")}] + out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", required=True)
    args = ap.parse_args()
    result = {"date": datetime.date.today().isoformat(), "templates": {}}
    for template in sorted(HERE.glob("*.jinja")):
        tokens, *cases = render_all(args.llama_server, template)
        result["templates"][template.name] = {**tokens, "cases": cases}
        print(template.name, "ok", flush=True)
    (HERE / "rendered.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tools = {"date": result["date"], "templates": {}}
    for template in TOOL_TEMPLATES:
        tokens, *cases = render_all(args.llama_server, template, TOOL_BODIES)
        tools["templates"][template.name] = {**tokens, "cases": cases}
        print(template.name, "tools ok", flush=True)
    (HERE / "tool_turns.json").write_text(json.dumps(tools, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
