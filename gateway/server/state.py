"""What a serving process holds: config, the lane pool, per-model text handling, metrics,
records, in-flight request ids and the drain flags. One instance per Sanic worker, on app.ctx."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.server.config import GatewayConfig
from gateway.serve.control import RequestControl
from gateway.http.errors import APIError, model_not_found
from gateway.server.logs import get_logger
from gateway.server.metrics import Metrics
from gateway.server.records import RecordsFile
from gateway.http.request_ids import InFlightIds
from gateway.responses.store import ResponseStore
from gateway.lora.selection import LoraSettings


@dataclass
class ServedModel:
    name: str
    path: str
    text: object  # gateway.text.model_text.ModelText
    n_ctx: int
    n_vocab: int
    created_s: int
    num_slots: int = 1        # sequence slots per lane
    kv_cache_bytes: int = 0   # K/V cache reserved per lane
    n_embd: int = 0           # width of its embeddings (lane handshake)
    kind: str = "text"        # "text" (GGUF) or "audio" (speech to text: gateway/audio/)
    vision: object = None     # gateway.vision.prompt.VisionModel (--mmproj): its requests may carry images

    @property
    def is_audio(self) -> bool:
        return self.kind == "audio"

    @property
    def capabilities(self) -> list[str]:
        """What the model serves, for /v1/models and (in Ollama's names) /api/show: tools work on
        every chat model (a template without tool support gets the generic tool prompt)."""
        if self.is_audio:
            return ["transcription", "translation"]
        text = self.text
        if not text.supports_chat:
            return ["completion"]
        return ["completion", "chat", "tools"] + (["thinking"] if text.supports_thinking else []) + \
            (["vision"] if self.vision is not None else [])


@dataclass
class ServerState:
    config: GatewayConfig
    pool: object = None  # gateway.serve.lanes.LanePool once started
    admission: object = None  # gateway.serve.admission.AdmissionQueue once started
    residency: object = None  # gateway.server.residency.Residency once started: which models are loaded
    on_demand: object = None  # gateway.server.on_demand.OnDemandModels (--models-dir) once started
    models: dict[str, ServedModel] = field(default_factory=dict)
    metrics: Metrics | None = None
    records: RecordsFile | None = None
    in_flight: InFlightIds = field(default_factory=InFlightIds)
    control: RequestControl = field(default_factory=RequestControl)  # cancel by id / per model
    responses: ResponseStore | None = None  # the Responses API's stored responses (set in __post_init__)
    # SIGTERM: `stopping` withdraws readiness at once (balancers stop sending work); `draining`
    # refuses new generation requests with 503, --drain-delay-s later (gateway.app._before_stop).
    lora: LoraSettings = field(default_factory=LoraSettings)  # adapters' defaults and scales (gateway/lora/)
    stopping: bool = False
    draining: bool = False
    log: object = field(default_factory=get_logger)

    def __post_init__(self) -> None:
        if self.responses is None:
            self.responses = ResponseStore(self.config.max_stored_responses, self.config.stored_response_ttl_s)

    def statuses(self) -> list:
        return list(self.pool.statuses()) if self.pool is not None else []

    def find_model(self, requested: str) -> ServedModel | None:
        """The served model of that name; a --models-dir file that could not be read is read again
        if it changed, else its error (APIError 503 model_load_failed)."""
        served = self.models.get(requested)
        if served is None and self.on_demand is not None and requested in self.on_demand.broken:
            served = self.models[requested] = self.on_demand.retry(requested, int(time.time()))
        if served is None:  # a LoRA adapter's name: its base model (vLLM's way of naming adapters)
            found = self.lora.find(self.pool, self.models, requested)
            served = None if found is None else self.models[found.model]
        return served

    def lora_for(self, requested: str, request_lora=None) -> tuple[tuple[int, float], ...]:
        """The (adapter id, scale) pairs a request for model `requested` runs with (gateway/lora/selection.py)."""
        served = self.text_model(requested)
        return self.lora.selection(self.pool, served.name, requested, request_lora)

    def model(self, requested: str) -> ServedModel:
        served = self.find_model(requested) if isinstance(requested, str) else None
        if served is None:
            raise model_not_found(requested)
        return served

    def text_model(self, requested: str) -> ServedModel:
        """A model for a text route; an audio model → 400 naming the routes it serves."""
        served = self.model(requested)
        if served.is_audio:
            raise APIError(400, f"model {served.name!r} is a speech-to-text model: use /v1/audio/transcriptions "
                           "or /v1/audio/translations", param="model", code="model_not_supported")
        return served

    def audio_model(self, requested: str) -> ServedModel:
        """A model for an audio route; a text model → 400."""
        served = self.model(requested)
        if not served.is_audio:
            raise APIError(400, f"model {served.name!r} is a text model and cannot transcribe audio",
                           param="model", code="model_not_supported")
        return served

    def default_model(self, requested: object) -> ServedModel:
        """For routes where `model` is optional: the only model, else it must be named."""
        if requested is None:
            if len(self.models) == 1:
                return self.text_model(next(iter(self.models)))
            raise APIError(400, "'model' is required when several models are served", param="model",
                           code="missing_required_parameter")
        if type(requested) is not str:
            raise APIError(400, "'model' must be a string", param="model", code="invalid_type")
        return self.text_model(requested)

    def model_label(self, requested: object) -> str:
        """Metric label for a model: only configured names, so user input cannot add series."""
        return requested if isinstance(requested, str) and requested in self.models else "unknown"
