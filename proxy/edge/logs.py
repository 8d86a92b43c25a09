"""Logs: one JSON object (or plain line) per record; credentials redacted before anything is
written, and no conversation content unless `logging.log_content` is on.

Content is message text, tool arguments and results, and credentials. ctxgate's own lines are
written without it (session ids, counts, triggers, reasons). Third-party libraries are not:
database drivers print the parameters of every statement at debug level, which hold archived
messages and search terms. Their records below WARNING keep their message and lose their
arguments, unless `log_content` is on; SQLAlchemy is told to hide parameters in any case
(`storage.database`).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable

from session.config.settings import LoggingSettings

_MASK = "[redacted]"
_VALUE = r"[^\s\"'&,;<>\\]{3,}"
_KEY_NAMES = (
    r"api[_-]?key|x[_-]api[_-]key|access[_-]?key(?:[_-]id)?|secret[_-]?access[_-]?key|"
    r"aws[_-]secret[_-]access[_-]key|client[_-]?secret|secret|passwd|password|pwd|passphrase|"
    r"(?:access|refresh|auth|id|session|bearer)[_-]?token|token|private[_-]?key|credentials?|"
    r"sig|signature"
)
# A name may sit inside a longer one (`DB_PASSWORD`, `x_api_key`): `_` is no boundary for it.
_BEFORE_NAME = r"(?<![A-Za-z0-9])"
# What may stand between a name and its value, JSON-escaped quotes included (`password=\"x\"`).
_ASSIGN = r"(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?"
Replacement = str | Callable[[re.Match[str]], str]
_WORD = re.compile(r"[A-Za-z0-9]+")


class Redactor:
    """Masks credentials in a line, and remembers what it masked so that copies of a secret
    made elsewhere (lower-cased, cut into search terms) are masked too."""

    _KEPT = 4096

    def __init__(self) -> None:
        # Each remembered word, lower case; a dict keeps them in the order they came, so
        # the oldest go first once there are too many.
        self._seen: dict[str, None] = {}
        self._lock = threading.Lock()
        self._rules: tuple[tuple[re.Pattern[str], Replacement], ...] = self._build_rules()

    def __call__(self, text: str) -> str:
        for pattern, replacement in self._rules:
            text = pattern.sub(replacement, text)
        # One look-up per word of the line: linear in the line, whatever was remembered.
        return _WORD.sub(self._copy, text) if self._seen else text

    def _copy(self, match: re.Match[str]) -> str:
        word = match.group()
        return _MASK if word.lower() in self._seen else word

    def remember(self, secret: str) -> None:
        """Mask each word of `secret` long or mixed enough to be its own, in any case, from now
        on: the copies the search index makes are lower case and cut at punctuation."""
        fresh = [w for w in _WORD.findall(secret.lower()) if _distinctive(w)]
        if not fresh or all(w in self._seen for w in fresh):
            return
        with self._lock:
            for word in fresh:
                self._seen[word] = None
            while len(self._seen) > self._KEPT:
                del self._seen[next(iter(self._seen))]

    def _keep(self, group: int, mask: str = _MASK) -> Callable[[re.Match[str]], str]:
        """A replacement keeping the text before group `group`, remembering the group."""

        def replace(match: re.Match[str]) -> str:
            self.remember(match.group(group))
            return match.string[match.start() : match.start(group)] + mask

        return replace

    def _whole(self, match: re.Match[str]) -> str:
        self.remember(match.group())
        return _MASK

    def _build_rules(self) -> tuple[tuple[re.Pattern[str], Replacement], ...]:
        keep, whole = self._keep, self._whole
        return (
            # PEM private keys, whole.
            (
                re.compile(
                    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S
                ),
                "-----PRIVATE KEY " + _MASK + "-----",
            ),
            # Authorization headers, with or without a scheme (Bearer, Basic, Token, AWS4-HMAC…).
            (
                re.compile(
                    r"(?i)\b(?:proxy-)?authorization"
                    + _ASSIGN
                    + r"(?:(?:bearer|basic|token|digest|aws4-hmac-sha256|negotiate)\s+)?"
                    r"([^\s\"',;\\]+)"
                ),
                keep(1),
            ),
            (re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/=\-]{6,})"), keep(1)),
            # name=value, name: value, "name": "value" (JSON, query strings, env files, headers).
            (re.compile(rf"(?i){_BEFORE_NAME}(?:{_KEY_NAMES}){_ASSIGN}({_VALUE})"), keep(1)),
            # A query string's bare `key=` (Google's API key parameter).
            (re.compile(r"(?i)[?&;]key=([^\s&\"'#]{3,})"), keep(1)),
            # scheme://user:password@host
            (re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^/\s:@]+:([^/\s@]+)@"), keep(1, _MASK + "@")),
            # Key shapes recognisable without a name, in either case (search terms are lower case).
            (re.compile(r"(?i)\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), whole),
            (re.compile(r"\bsk-(?:ant-|proj-)?([A-Za-z0-9_\-]{8,})"), keep(1)),
            (re.compile(r"(?i)\bAIza[0-9A-Za-z_\-]{30,}"), whole),
            (re.compile(r"(?i)\b(?:gh[pousr]_|github_pat_)([A-Za-z0-9_]{16,})"), keep(1)),
            (re.compile(r"(?i)\bxox[abprs]-([A-Za-z0-9\-]{10,})"), keep(1)),
            (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+"), whole),
            (re.compile(r"(?i)\bhf_([A-Za-z0-9]{20,})"), keep(1)),
        )


def _distinctive(word: str) -> bool:
    """Long, or letters mixed with digits: a word that names this secret, not a common one."""
    if len(word) >= 12:
        return True
    mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
    return len(word) >= 5 and mixed


redact = Redactor()
"""Mask credentials that slipped into a log line: header values, name=value pairs in any
notation, URL passwords, and keys with a recognisable shape (OpenAI, Anthropic, AWS, Google,
GitHub, Slack, Hugging Face, JWTs, PEM blocks); and later copies of each in any case."""

# Loggers whose lines carry no content: ctxgate's own (some modules log under their dotted
# name), the server's, and the HTTP client's (a method, a URL whose query is redacted, a
# status; never a body).
_OWN = ("ctxgate", "compression", "session", "storage", "proxy", "uvicorn", "httpx", "httpcore")
# Libraries whose debug lines repeat what the database or the wire carries, whatever the
# setting: the driver's per-call lines hold each statement's parameters.
_ALWAYS_WITHHELD = ("aiosqlite", "asyncpg", "hpack", "h2", "multipart", "python_multipart")
_WITHHELD = "[arguments withheld: logging.log_content is off]"


class ContentGuard(logging.Filter):
    """Keeps content out of other libraries' records below WARNING: their message stays, their
    arguments (a statement's parameters, a body, a header's value) go."""

    def __init__(self, log_content: bool) -> None:
        super().__init__()
        self.log_content = log_content

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or _is_own(record.name):
            return True
        if self.log_content and not _is_under(record.name, _ALWAYS_WITHHELD):
            return True
        if record.args:
            record.msg = f"{record.msg} {_WITHHELD}"
            record.args = None
        return True


def _is_own(name: str) -> bool:
    return _is_under(name, _OWN)


def _is_under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


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


def configure_logging(settings: LoggingSettings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.json else PlainFormatter())
    log_through(handler, settings)


def log_through(handler: logging.Handler, settings: LoggingSettings) -> None:
    """Every log line, uvicorn's and the libraries' too, goes through `handler` alone, past the
    content guard (access lines only from WARNING)."""
    handler.addFilter(ContentGuard(settings.log_content))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel("WARNING")
