"""structlog logging: JSON lines, or human-readable coloured lines when stderr is a terminal.

Callers pass only ids, names, numbers and codes — never prompt or output text; values from users
(model names, header values) are escaped by either renderer (JSON escaping, or repr() on the
console), so CR/LF or ANSI escapes cannot forge log lines (CWE-117)."""
from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
LOG_FORMATS = ("auto", "json", "console")


def _wants_console(log_format: str, stream) -> bool:
    if log_format == "auto":
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())
    return log_format == "console"


def configure_logging(level: str = "info", log_format: str = "auto") -> None:
    stream = sys.stderr
    if _wants_console(log_format, stream):
        # repr_native_str: string values are shown as repr(), so control characters stay escaped
        # (the console renderer formats exceptions itself)
        tail = [structlog.dev.ConsoleRenderer(colors=stream.isatty(), repr_native_str=True)]
        stamper = structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=False)
    else:
        tail = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        stamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[structlog.processors.add_log_level, stamper, *tail],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "laneserve"):
    return structlog.get_logger(name)
