"""Per-model text handling in the gateway: prompt → token ids, chat messages → token ids,
token ids → text (for /detokenize). Lanes receive token ids, so context checks and usage
counts are exact before any lane work starts."""
from __future__ import annotations

from gateway.text.chat_template import ChatTemplate, template_source
from gateway.http.errors import invalid
from gateway.text.gguf_meta import read_model_meta
from gateway.features.reasoning import thinking_markers
from gateway.features.tools import HARMONY, HARMONY_CONTROL, template_tool_format


def _control_ids(tokenizer) -> dict[str, tuple[int, ...]]:
    """harmony's control token texts → every id with that text (a vocabulary may hold copies, as the
    scripted test models do)."""
    from lanes._runtime import TokenType

    out: dict[str, list[int]] = {}
    for token in range(tokenizer.n_vocab):
        if tokenizer.token_type(token) == TokenType.CONTROL:
            text = bytes(tokenizer.piece(token, True)).decode("utf-8", errors="replace")
            if text in HARMONY_CONTROL:
                out.setdefault(text, []).append(token)
    return {text: tuple(ids) for text, ids in out.items()}


class ModelText:
    def __init__(self, path: str) -> None:
        from lanes._runtime import Tokenizer  # native; imported here so unit tests need no build

        meta = read_model_meta(path)
        self.architecture = meta.architecture
        self.context_length_trained = meta.context_length
        self.tokenizer = Tokenizer(path)
        self.n_vocab: int = self.tokenizer.n_vocab
        source = template_source(meta.chat_template, meta.architecture)
        self.chat_template = (
            ChatTemplate(source, bos_token=meta.bos_token, eos_token=meta.eos_token) if source else None
        )
        # (open, close) reasoning markers of the template, or None: the model does not think.
        self.thinking_markers: tuple[str, str] | None = thinking_markers(source)
        # The call format the template renders `tools` and tool turns for (Qwen/Hermes, Llama 3); None:
        # it does not, and gateway.features.tools' generic mode describes the functions in a system turn.
        self.tool_format = template_tool_format(source)
        # harmony: the ids of its control tokens by text (gateway.features.tools.tool_grammar names them by id).
        self.control_ids = _control_ids(self.tokenizer) if self.tool_format is HARMONY else {}

    @property
    def supports_tools(self) -> bool:
        return self.tool_format is not None

    @property
    def supports_chat(self) -> bool:
        return self.chat_template is not None

    @property
    def supports_thinking(self) -> bool:
        return self.thinking_markers is not None

    def encode_prompt(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        # A prompt's control-token texts ("<|im_start|>") become those tokens, as llama-server, vLLM and
        # Ollama's raw mode tokenize prompts: hand-formatted chat prompts then mean what they say.
        return list(self.tokenizer.encode(text, add_special, parse_special))

    def encode_chat(self, messages: list[dict], template_kwargs: dict | None = None) -> list[int]:
        return self.encode_rendered(self.render_chat(messages, template_kwargs))

    def render_chat(self, messages: list[dict], template_kwargs: dict | None = None) -> str:
        if self.chat_template is None:
            raise invalid("this model has no chat template; use /v1/completions", param="messages",
                          code="chat_not_supported")
        return self.chat_template.render(messages, template_kwargs)

    def encode_rendered(self, rendered: str) -> list[int]:
        ids = list(self.tokenizer.encode(rendered, True, True))
        bos = self.tokenizer.bos_id
        # A template that writes BOS itself plus a tokenizer that adds one would double it.
        if self.tokenizer.add_bos and len(ids) >= 2 and ids[0] == bos and ids[1] == bos:
            del ids[0]
        return ids

    def check_token_ids(self, ids, param: str) -> None:
        for token in ids:
            if not 0 <= token < self.n_vocab:
                raise invalid(f"token id {token} is outside the vocabulary (0..{self.n_vocab - 1})", param=param)

    def decode(self, ids: list[int]) -> str:
        return bytes(self.tokenizer.decode(ids, False)).decode("utf-8", errors="replace")

    def piece(self, token: int) -> str:
        return bytes(self.tokenizer.piece(token)).decode("utf-8", errors="replace")
