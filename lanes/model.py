"""In-process model API: the same engine a lane runs, callable directly from Python."""
from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from typing import Iterator, Sequence

import numpy as np

from lanes import _runtime, grammar
from lanes.model_files import find_model_file


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length" | "cancelled"
    prefill_ns: int
    decode_ns: int
    cached_tokens: int = 0  # prompt tokens whose K/V were reused from the previous generation


class Generation:
    """Iterates str deltas (complete UTF-8, stop strings removed); `stats` once exhausted."""

    def __init__(self, model: "Model", prompt_ids: list[int], max_tokens: int, stop: Sequence[str], sampling: dict):
        self._engine = model._engine
        self._engine.start(prompt_ids, max_tokens, list(stop), **sampling)
        self._owner = model
        model._current = self
        self.stats: GenerationStats | None = None
        self.token_ids: list[int] = []  # every sampled id, including a final end-of-generation id

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        while self.stats is None:
            if self._owner._current is not self:
                raise RuntimeError("another generation was started on this model")
            text, token, finished, reason = self._engine.step()
            if token >= 0:
                self.token_ids.append(token)
            if finished:
                s = self._engine.stats()
                self.stats = GenerationStats(
                    s["prompt_tokens"], s["completion_tokens"], reason, s["prefill_ns"], s["decode_ns"],
                    s["cached_tokens"],
                )
                self._owner.last_stats = self.stats
            if text:
                return text
        raise StopIteration

    def close(self) -> None:
        """Abandon the generation early (finish reason "cancelled")."""
        if self.stats is None and self._owner._current is self:
            self._engine.cancel()
            s = self._engine.stats()
            self.stats = GenerationStats(
                s["prompt_tokens"], s["completion_tokens"], "cancelled", s["prefill_ns"], s["decode_ns"],
                s["cached_tokens"],
            )


def _pooled(hidden: np.ndarray) -> np.ndarray:
    """The embedding of final hidden rows [n, n_embd], with the lane's arithmetic (BatchEngine's
    embed_chunks) so the vector equals the server's bit for bit: float64 sums in position order,
    the squared norm summed in element order (cumsum: strictly sequential), then scaled."""
    total = np.cumsum(hidden.astype(np.float64), axis=0)[-1]
    norm2 = float(np.cumsum(total * total)[-1])
    return (total * (1.0 / np.sqrt(norm2) if norm2 > 0.0 else 0.0)).astype(np.float32)


class Model:
    """A GGUF model loaded in this process.

    `model`: what the server's --model takes: a known model's alias ("smollm2", "gemma3"; see
    `laneserve models`) or a path to a .gguf file.
    threads=0 uses every core; ctx_size=0 uses the model's context (capped at 8192);
    repack_cache_dir: share the repacked weights through a cache file there ("" = private memory).
    lora: LoRA adapters (GGUF path, scale) applied to everything this model runs (set_lora changes them).
    """

    def __init__(self, model: str | PathLike, threads: int = 0, ctx_size: int = 0, max_batch: int = 512,
                 repack_cache_dir: str = "", lora: Sequence[tuple[str | PathLike, float]] = ()):
        path = find_model_file(str(model))
        if not path.is_file():
            raise ValueError(f"{model!s} is an audio model; Model loads GGUF text models")
        self.path = str(path)
        grammar.load()
        self._engine = _runtime.Engine(self.path, threads, ctx_size, max_batch, repack_cache_dir)
        if lora:
            self.set_lora(lora)
        self._current: Generation | None = None
        self._template = None  # the compiled chat template, on the first chat()
        self.last_stats: GenerationStats | None = None

    n_vocab = property(lambda self: self._engine.n_vocab)
    n_ctx = property(lambda self: self._engine.n_ctx)
    n_ctx_train = property(lambda self: self._engine.n_ctx_train)
    chat_template = property(lambda self: self._engine.chat_template)
    eog_ids = property(lambda self: list(self._engine.eog_ids))
    bos_id = property(lambda self: self._engine.bos_id)
    arch = property(lambda self: self._engine.arch)
    threads = property(lambda self: self._engine.threads)
    repack_status = property(lambda self: self._engine.repack_status)  # "mapped FILE", "built FILE", "private (...)"

    def set_lora(self, lora: Sequence[tuple[str | PathLike, float]]) -> None:
        """Apply these LoRA adapters [(GGUF path, scale)] from now on ([] = the base model); scale 0
        leaves one out. Every file is loaded and checked first (ValueError naming the file and the
        problem); an open generation ends."""
        self._current = None
        self._engine.set_adapters([(str(p), float(s)) for p, s in lora])

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self._engine.tokenize(text, add_special, parse_special)

    def detokenize(self, ids: Sequence[int], special: bool = False) -> str:
        return self._engine.detokenize(list(ids), special)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """float32 [len(ids), n_vocab]: teacher-forced next-token logits, one batch.

        Reuses the KV cache, so an open generation on this model ends (its next step raises)."""
        self._current = None
        return self._engine.logits(list(ids))

    def embed(self, texts: str | Sequence[str | Sequence[int]]) -> np.ndarray:
        """float32 [len(texts), n_embd]: one embedding per text (or token id list), as the server's
        /v1/embeddings computes it — the mean of the final hidden states (after the output norm)
        over the input's tokens, L2-normalised; a text is tokenized with the model's add_bos and no
        special-token parsing. ValueError for an empty input or one longer than the context.
        Reuses the KV cache, so an open generation on this model ends."""
        self._current = None
        if isinstance(texts, str):
            texts = [texts]
        out = np.empty((len(texts), self._engine.n_embd), np.float32)
        for i, x in enumerate(texts):
            ids = self.tokenize(x, True, False) if isinstance(x, str) else [int(t) for t in x]
            if not ids:
                raise ValueError(f"input {i} is empty after tokenization")
            if len(ids) > self.n_ctx:
                raise ValueError(f"input {i} has {len(ids)} tokens; this model's context is {self.n_ctx} tokens")
            out[i] = _pooled(self._engine.hidden_states(ids))
        return out

    def generate(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        ignore_eos: bool = False,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        logit_bias: dict[int, float] | None = None,
        min_tokens: int = 0,
        parse_special: bool = True,
        grammar: str | None = None,
    ) -> Generation:
        """Yields str deltas; the returned Generation carries `stats` when done.

        A str prompt is tokenized with the model's add_bos and parse_special (as llama-server does).
        `grammar`: an llguidance grammar (gateway.features.structured builds one from a JSON schema, regex,
        Lark or GBNF) the output must follow.
        """
        ids = self.tokenize(prompt, True, parse_special) if isinstance(prompt, str) else list(prompt)
        if isinstance(stop, str):
            stop = (stop,)
        if seed is not None and (type(seed) is not int or not 0 <= seed < 2**64):
            raise ValueError("seed must be an integer in [0, 2**64)")
        sampling = dict(
            temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed,
            ignore_eos=ignore_eos, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            repetition_penalty=repetition_penalty, logit_bias=dict(logit_bias or {}), min_tokens=min_tokens,
            grammar=grammar,
        )
        return Generation(self, ids, max_tokens, stop, sampling)

    def render_chat(self, messages: Sequence[dict], **template_kwargs) -> str:
        """The prompt the model's chat template makes of `messages` (with the assistant turn
        opened), as the server renders it: the GGUF's own template, or ours for a known
        architecture without one (Gemma 3). ValueError if the model has none or the template
        rejects the messages."""
        # The server's own template code (jinja2 sandbox, HF conventions) and metadata reader;
        # they need jinja2 and the gateway's small error module, never the HTTP server.
        from gateway.http.errors import APIError
        from gateway.text.chat_template import ChatTemplate, template_source
        from gateway.text.gguf_meta import read_model_meta

        if self._template is None:
            meta = read_model_meta(self.path)
            source = template_source(meta.chat_template, meta.architecture)
            if source is None:
                raise ValueError(f"{self.path} has no chat template; use generate() with a prompt")
            self._template = ChatTemplate(source, bos_token=meta.bos_token, eos_token=meta.eos_token)
        try:
            return self._template.render([dict(m) for m in messages], template_kwargs)
        except APIError as exc:
            raise ValueError(exc.message) from None

    def chat(self, messages: Sequence[dict], *, max_tokens: int, **sampling) -> Generation:
        """generate() on the rendered chat: `messages` as OpenAI's [{"role", "content"}, ...];
        sampling keywords as generate() takes them."""
        ids = self.tokenize(self.render_chat(messages), add_special=True, parse_special=True)
        # A template that writes BOS itself plus a tokenizer that adds one would double it.
        if len(ids) >= 2 and ids[0] == ids[1] == self.bos_id:
            del ids[0]
        return self.generate(ids, max_tokens=max_tokens, **sampling)
