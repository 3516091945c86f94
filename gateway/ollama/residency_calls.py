"""What Ollama's requests ask of the residency (gateway.server.residency): each request's
`keep_alive` (absent: the model's default), and the load call — a chat or generate with no
messages or prompt — that loads the model, or with keep_alive 0 unloads it, before answering."""
from __future__ import annotations

from gateway.ollama.requests import OllamaError
from gateway.server.residency import FAILED, LOADED, UNLOADED, keep_alive_or_never


def apply_keep_alive(state, model: str, keep_alive_s: float | None) -> None:
    if state.residency is None:
        return
    if keep_alive_s is None:
        state.residency.set_keep_alive(model, None, default=True)
    else:
        state.residency.set_keep_alive(model, keep_alive_or_never(keep_alive_s))


async def load_or_unload(state, model: str, unload: bool) -> None:
    """Wait (up to --queue-timeout-s) until the model is loaded, or unloaded once its requests end."""
    residency = state.residency
    if residency is None:
        return
    timeout_s = state.config.queue_timeout_s
    if unload:
        residency.ask_unload(model)
        await residency.wait_status(model, (UNLOADED, FAILED), timeout_s)
        return
    residency.want(model)
    status = await residency.wait_status(model, (LOADED, FAILED), timeout_s)
    if status == FAILED:
        raise OllamaError(500, f"model '{model}' could not be loaded: {residency.residents[model].error}")
    if status != LOADED:
        raise OllamaError(503, f"model '{model}' did not load within {timeout_s:g} s")
