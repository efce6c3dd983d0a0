"""Process logging: text or JSON lines (config.logging.log_format), with the request id of the request being
served (a contextvar set by api/access_log.py) on every line logged while serving it.

Leaf module (config only). uvicorn's own loggers go through the same handler, so a JSON deployment gets only
JSON lines on stderr.
"""

from __future__ import annotations

import contextvars
import json
import logging
import logging.config
import time
from typing import Any

from realtime_tts.config import Config

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

# LogRecord attributes that are not extra fields (color_message: uvicorn's ANSI copy of msg)
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id (when serving one), extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = request_id.get()
        if rid is not None:
            out["request_id"] = rid
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """Human lines; a request line's fields follow its message as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        rid = request_id.get()
        if rid is not None and "request_id" not in extra:
            extra = {"request_id": rid, **extra}
        if extra:
            line += " " + " ".join(f"{k}={json.dumps(v, default=str, separators=(',', ':'))}" for k, v in extra.items())
        return line


def setup(cfg: Config) -> dict[str, Any]:
    """Configure the root logger; returns the dictConfig uvicorn gets, so its loggers use the same format."""
    fmt = "json" if cfg.logging.log_format == "json" else "text"
    formatter = f"realtime_tts.logs.{'JsonFormatter' if fmt == 'json' else 'TextFormatter'}"
    level = cfg.server.log_level.upper()
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": {"()": formatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {name: {"handlers": [], "propagate": True, "level": level}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }
    logging.config.dictConfig(config)
    return config
