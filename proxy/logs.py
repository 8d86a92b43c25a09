"""Structured logs: one JSON object per line, secrets redacted before anything is written."""

from __future__ import annotations

import json
import logging
import re
import sys
import time

_SECRET = re.compile(
    r"(?i)(bearer\s+|api[_-]?key[\"'=:\s]+|authorization[\"'=:\s]+)([A-Za-z0-9._\-]{6,})"
)
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{8,})")


def redact(text: str) -> str:
    """Mask credentials that slipped into a log line (keep a 4-char hint)."""
    text = _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)[:4]}…[redacted]", text)
    return _KEYLIKE.sub(lambda m: m.group(1)[:5] + "…[redacted]", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for field in ("request_id", "session_id"):
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname.lower():7} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


def configure_logging(level: str, as_json: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if as_json else PlainFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel("WARNING")
