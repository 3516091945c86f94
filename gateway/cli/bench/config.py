"""Settings of one `laneserve bench` run: a frozen dataclass validated at construction; the
command line flags map 1:1 to its fields (gateway/cli/bench/args.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
PROMPT_FORMATS = ("text", "ids")
DEFAULT_CONCURRENCY = (1, 2, 4, 8)


class BenchConfigError(ValueError):
    """A setting the run cannot use; the message names the flag."""


@dataclass(frozen=True)
class BenchConfig:
    url: str | None = None                 # None: start laneserve for the run
    url2: str | None = None                # a second server, run after the first
    model: str | None = None               # request model name; None: first id of /v1/models
    model2: str | None = None
    label: str | None = None               # name in tables and plot; None: "laneserve" or host:port
    label2: str | None = None
    serve_model: str = "smollm2"           # what a started laneserve serves (NAME=PATH_OR_ALIAS or alias)
    serve_args: str = ""                   # extra `laneserve serve` flags for a started server
    tokenizer: str | None = None           # model whose tokenizer sizes prompts; None: serve_model's file
    endpoint: str = "chat"
    prompt_format: str = "text"            # ids: token-id prompts (completions only)
    input_tokens: int = 128
    output_tokens: int = 64
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    request_rate: tuple[float, ...] = ()   # open loop (Poisson, req/s) instead of the concurrency sweep
    max_concurrency: int = 64              # cap on requests in flight in open loop
    num_requests: int = 32                 # measured requests per level
    warmup: int = 2                        # uncounted requests per server before its first level
    seed: int = 0
    slo_ttft_ms: float | None = None
    slo_itl_ms: float | None = None
    timeout_s: float = 300.0               # per request
    json_path: str = "laneserve-bench.json"
    plot_path: str = "laneserve-bench.png"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise BenchConfigError(f"--endpoint: {self.endpoint!r} is not one of {', '.join(ENDPOINTS)}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise BenchConfigError(f"--prompt-format: {self.prompt_format!r} is not one of text, ids")
        if self.prompt_format == "ids" and self.endpoint != "completions":
            raise BenchConfigError("--prompt-format ids needs --endpoint completions (chat messages are text)")
        for name in ("input_tokens", "output_tokens", "num_requests", "max_concurrency"):
            if getattr(self, name) < 1:
                raise BenchConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.warmup < 0:
            raise BenchConfigError("--warmup must be 0 or more")
        if self.request_rate:
            if self.concurrency != DEFAULT_CONCURRENCY:
                raise BenchConfigError("give --concurrency (closed loop) or --request-rate (open loop), not both")
            if any(r <= 0 for r in self.request_rate):
                raise BenchConfigError("--request-rate values must be positive (requests per second)")
        elif not self.concurrency or any(c < 1 for c in self.concurrency):
            raise BenchConfigError("--concurrency needs positive integers, e.g. 1,2,4,8")
        for name in ("slo_ttft_ms", "slo_itl_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise BenchConfigError(f"--{name.replace('_', '-')} must be positive")
        if self.timeout_s <= 0:
            raise BenchConfigError("--timeout-s must be positive")
        for name in ("url", "url2"):
            value = getattr(self, name)
            if value is not None and not value.startswith("http://"):
                raise BenchConfigError(f"--{name}: only http:// URLs are supported, got {value!r}")
        if self.url2 is None and (self.model2 or self.label2):
            raise BenchConfigError("--model2/--label2 need --url2")

    @property
    def open_loop(self) -> bool:
        return bool(self.request_rate)

    @property
    def levels(self) -> tuple:
        """The sweep: request rates (open loop) or concurrencies (closed loop)."""
        return self.request_rate if self.open_loop else self.concurrency

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(BenchConfig)}
