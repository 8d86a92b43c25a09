"""Structured logs: one JSON object per line, secrets redacted before anything is written."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable

_MASK = "[redacted]"
_VALUE = r"[^\s\"'&,;<>]{3,}"
_KEY_NAMES = (
    r"api[_-]?key|x[_-]api[_-]key|access[_-]?key(?:[_-]id)?|secret[_-]?access[_-]?key|"
    r"aws[_-]secret[_-]access[_-]key|client[_-]?secret|secret|passwd|password|pwd|passphrase|"
    r"(?:access|refresh|auth|id|session|bearer)[_-]?token|token|private[_-]?key|credentials?|"
    r"sig|signature"
)
# (pattern, replacement): each keeps the name of what it masks so the line stays readable.
_RULES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # PEM private keys, whole.
    (
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        "-----PRIVATE KEY " + _MASK + "-----",
    ),
    # Authorization headers, with or without a scheme (Bearer, Basic, Token, AWS4-HMAC…).
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
            r"(?:(bearer|basic|token|digest|aws4-hmac-sha256|negotiate)\s+)?"
            r"[^\s\"',;]+"
        ),
        lambda m: f"{m.group(1)}{m.group(2) + ' ' if m.group(2) else ''}{_MASK}",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{6,}"), r"\1 " + _MASK),
    # name=value, name: value, "name": "value" (JSON, query strings, env files, headers).
    (
        re.compile(rf"(?i)\b((?:{_KEY_NAMES})[\"']?\s*[:=]\s*[\"']?){_VALUE}"),
        r"\1" + _MASK,
    ),
    # scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+@"), r"\1" + _MASK + "@"),
    # Key shapes recognisable without a name.
    (re.compile(r"\b((?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16})\b"), _MASK),
    (re.compile(r"\b(sk-(?:ant-|proj-)?)[A-Za-z0-9_\-]{8,}"), r"\1" + _MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), _MASK),
    (re.compile(r"\b(gh[pousr]_|github_pat_)[A-Za-z0-9_]{16,}"), r"\1" + _MASK),
    (re.compile(r"\b(xox[abprs]-)[A-Za-z0-9\-]{10,}"), r"\1" + _MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+"), _MASK),
    (re.compile(r"\b(hf_)[A-Za-z0-9]{20,}"), r"\1" + _MASK),
)


def redact(text: str) -> str:
    """Mask credentials that slipped into a log line: header values, name=value pairs in any
    notation, URL passwords, and keys with a recognisable shape (OpenAI, Anthropic, AWS, Google,
    GitHub, Slack, Hugging Face, JWTs, PEM blocks)."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


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
    log_through(handler, level)


def log_through(handler: logging.Handler, level: str) -> None:
    """Every log line, uvicorn's too, goes through `handler` alone (access lines only from
    WARNING)."""
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel("WARNING")
