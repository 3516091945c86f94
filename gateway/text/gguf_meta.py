"""GGUF metadata the gateway needs (chat template, architecture, trained context, BOS/EOS text),
read through the runtime's own mmap reader (`lanes._runtime.GgufFile`). Broken files raise its
GgufError (a ValueError) naming the file and the problem."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelMeta:
    architecture: str | None
    chat_template: str | None
    context_length: int | None
    bos_token: str
    eos_token: str
    kv_bytes_per_token: int = 0  # fp16 K and V over all layers (0: unknown)
    n_embd: int = 0  # hidden size (0: unknown); a vision projector's output must match it


def read_model_meta(path: str) -> ModelMeta:
    from lanes._runtime import GgufFile  # native; imported here so other gateway modules need no build

    f = GgufFile(str(path))
    arch = f.get("general.architecture")
    tokens = f.get("tokenizer.ggml.tokens") or []

    def token_text(key: str) -> str:
        token_id = f.get(key)
        if not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
            return ""
        text = tokens[token_id]
        return text if isinstance(text, str) else ""

    context_length = f.get(f"{arch}.context_length") if arch else None

    def arch_int(key: str) -> int:
        value = f.get(f"{arch}.{key}") if arch else None
        return value if isinstance(value, int) and value > 0 else 0

    n_head = arch_int("attention.head_count")
    head_dim = arch_int("attention.key_length") or (arch_int("embedding_length") // n_head if n_head else 0)
    kv_bytes = arch_int("block_count") * (arch_int("attention.head_count_kv") or n_head) * head_dim * 2 * 2
    template = f.get("tokenizer.chat_template")
    return ModelMeta(
        architecture=arch if isinstance(arch, str) else None,
        chat_template=template if isinstance(template, str) and template else None,
        context_length=int(context_length) if isinstance(context_length, int) else None,
        bos_token=token_text("tokenizer.ggml.bos_token_id"),
        eos_token=token_text("tokenizer.ggml.eos_token_id"),
        kv_bytes_per_token=kv_bytes,
        n_embd=arch_int("embedding_length"),
    )
