"""Assistant prefill against a real server (gateway/text/prefill.py): a conversation ending in an assistant
turn is continued, as llama-server, Ollama's /api/chat and Anthropic's Messages API do, and the reply is
only the new text. SmolLM2 at temperature 0 continues "1, 2, 3, 4," with " 5, 6, 7, 8, 9, 10" (without
the prefill it answers "1, 2, 3, 4, 5, …" from the start; with the turn closed it answered something else)."""
from __future__ import annotations

import httpx

MODEL = "smollm2"
PREFILL = "1, 2, 3, 4,"
MESSAGES = [{"role": "user", "content": "Count from 1 to 10 separated by commas."},
            {"role": "assistant", "content": PREFILL}]


def continues_count(text: str) -> bool:
    # Only the continuation comes back: the next number first, never the prefill again.
    return text.lstrip().startswith("5, 6") and not text.lstrip().startswith("1")


def test_openai_chat_continues_the_assistant_turn(openai_client):
    reply = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=12)
    assert continues_count(reply.choices[0].message.content), reply.choices[0].message.content


def test_openai_chat_stream_sends_only_the_continuation(openai_client):
    stream = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=12,
                                                   stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert continues_count(text), text


def test_anthropic_messages_continue_the_prefill(http):
    reply = http.post("/v1/messages", json={"model": MODEL, "max_tokens": 12, "temperature": 0,
                                            "messages": MESSAGES})
    assert reply.status_code == 200, reply.text
    text = "".join(block["text"] for block in reply.json()["content"] if block["type"] == "text")
    assert continues_count(text), text


def test_ollama_chat_continues_the_assistant_turn(http):
    reply = http.post("/api/chat", json={"model": MODEL, "stream": False, "messages": MESSAGES,
                                         "options": {"temperature": 0, "num_predict": 12}})
    assert reply.status_code == 200, reply.text
    assert continues_count(reply.json()["message"]["content"]), reply.json()


def test_the_prompt_ends_with_the_prefill_text(http):
    # /tokenize renders chat messages as the chat routes do: the opened turn, then the prefill's tokens last.
    reply = http.post("/tokenize", json={"model": MODEL, "messages": MESSAGES, "with_pieces": True})
    assert reply.status_code == 200, reply.text
    pieces = "".join(token["piece"] for token in reply.json()["tokens"])
    assert pieces.endswith("assistant\n" + PREFILL)


def test_empty_final_assistant_turn_is_the_plain_generation_prompt(http):
    def ids(messages):
        return http.post("/tokenize", json={"model": MODEL, "messages": messages}).json()["tokens"]

    assert ids(MESSAGES[:1] + [{"role": "assistant", "content": ""}]) == ids(MESSAGES[:1])


def test_thinking_model_prefilled_inside_its_reasoning_block(think_server):
    # The scripted Qwen3 model (thinking_gguf.py) continues "," with " thinking</think>\n\nThe answer is 42.":
    # a prefill that opened the block leaves generation inside it, so the lane splits there.
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>Hmm,"}]
    with httpx.Client(base_url=think_server.base_url, timeout=60.0) as http:
        ollama = http.post("/api/chat", json={"model": "think", "stream": False, "messages": messages,
                                              "options": {"temperature": 0}}).json()
        openai = http.post("/v1/chat/completions", json={"model": "think", "temperature": 0, "max_tokens": 20,
                                                         "messages": messages}).json()
    assert ollama["message"]["thinking"] == "thinking" and ollama["message"]["content"] == "The answer is 42."
    message = openai["choices"][0]["message"]
    assert message["reasoning_content"] == "thinking" and message["content"] == "The answer is 42."
