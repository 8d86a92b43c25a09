"""The ledger's book: each upstream call's charge recorded, with its counterfactual.

A client request's charge holds its billed tiers and what its uncompressed history would have
been billed; the session's previous uncompressed prompt (this process's memory, else the
newest row in the database) is that history's stable prefix. Summary calls, recall rounds
and shadow calls are recorded as overheads. Recording runs after the client has its answer;
a storage failure is logged and loses only the charge.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compression import Message, TokenCounter, ToolSchema, seen_messages
from session.config.prices import Price
from session.config.settings import Settings
from session.ledger.history import History, Tip, Tips
from session.ledger.tiers import CACHE_TTL_S, Split, caching_of, cost, full_history_split, split_of
from session.ports.frontdoor import Usage
from storage import SessionKey, SessionStore, StorageError
from storage.rows.charges import ChargeRow

log = logging.getLogger("ctxgate.ledger")

_REMEMBERED = 10_000  # sessions whose last uncompressed prompt this process keeps


@dataclass(frozen=True, slots=True)
class _Last:
    full_prompt: int
    at: float
    messages: int  # client messages of that request; 0: unknown
    tip: Tip | None  # `History.prefix` of those messages, taken when asked


@dataclass(frozen=True, slots=True)
class Charged:
    """One recorded charge, for the metrics."""

    model: str
    kind: str  # request, summary, recall, shadow
    billed: Split
    full: Split | None  # the counterfactual of a client request
    billed_usd: float | None  # None: the model has no price
    full_usd: float | None


class Ledger:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        observe: Callable[[Charged], None] = lambda charged: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.observe = observe
        self.clock = clock
        self._last: OrderedDict[SessionKey, _Last] = OrderedDict()
        self._tips = Tips()
        self._caching: set[str] = set()  # models whose provider has reported cached tokens
        # Each model's price: matching the price globs costs more than the charge itself.
        self._prices: dict[str, Price | None] = {}

    async def request(
        self,
        sk: SessionKey,
        model: str,
        api: str,
        usage: Usage,
        full_prompt: int,
        compressed: bool,
        at: float,
        history: History | None = None,
    ) -> Charged:
        """Record a client request's charge; `full_prompt` is its uncompressed history's size
        (an estimate, bettered from the session's previous request when `history` shows this
        one continues it). A request forwarded as the client sent it is its own
        counterfactual."""
        billed = split_of(usage)
        if billed.cache_read:
            self._caching.add(model)
        if compressed:
            last = await self._previous(sk, at)
            full_prompt = _anchored(last, history, full_prompt)
            previous = None if last is None else last.full_prompt
            caching = caching_of(api, billed, model in self._caching)
            full = full_history_split(previous, full_prompt, billed.output, caching)
        else:
            full, full_prompt = billed, billed.prompt
        self._remember(sk, _Last(full_prompt, at, *self._tip(history, at)))
        row = ChargeRow(
            sk, at, model, "request", compressed, billed.uncached, billed.cache_read,
            billed.cache_write, billed.output, full.uncached, full.cache_read,
            full.cache_write, full_prompt,
        )  # fmt: skip
        return self._record(row, billed, full)

    async def overhead(
        self, sk: SessionKey, model: str, kind: str, usage: Usage | None, compressed: bool = True
    ) -> Charged | None:
        """Record a call made for ctxgate's own sake (a summary, a recall round, a shadow)."""
        if usage is None:
            return None
        billed = split_of(usage)
        row = ChargeRow(
            sk, self.clock(), model, kind, compressed, billed.uncached, billed.cache_read,
            billed.cache_write, billed.output,
        )  # fmt: skip
        return self._record(row, billed, None)

    def _price(self, model: str) -> Price | None:
        if model not in self._prices:
            if len(self._prices) >= _REMEMBERED:
                self._prices.clear()
            self._prices[model] = self.settings.price_for(model)
        return self._prices[model]

    def _record(self, row: ChargeRow, billed: Split, full: Split | None) -> Charged:
        price = self._price(row.model)
        charged = Charged(
            row.model,
            row.kind,
            billed,
            full,
            None if price is None else cost(billed, price),
            None if price is None or full is None else cost(full, price),
        )
        self.observe(charged)
        self.store.record_charges_later([row])  # written behind, in batches, off the request
        return charged

    async def _previous(self, sk: SessionKey, at: float) -> _Last | None:
        """The session's previous request, while the provider's cache holds its prompt."""
        last = self._last.get(sk)
        if last is None:
            try:
                stored = await self.store.last_full_prompt(sk)
            except StorageError as exc:
                log.warning("could not read the session's last charge: %s", exc)
                stored = None
            last = None if stored is None else _Last(stored[0], stored[1], 0, None)
        if last is None or not 0 <= at - last.at <= CACHE_TTL_S:
            return None
        return last

    def forget(self, sk: SessionKey) -> None:
        """Drop what this process remembers of a deleted session: a client that reuses its id
        starts a new history, whose first request has no cached prefix to inherit."""
        lineage = (f"{sk.key}#", f"{sk.key}~")  # its forks and rotations
        for known in [k for k in self._last if k.scope == sk.scope]:
            if known.key == sk.key or known.key.startswith(lineage):
                self._let_go(self._last.pop(known))

    def _remember(self, sk: SessionKey, last: _Last) -> None:
        before = self._last.get(sk)
        if before is not None:
            self._let_go(before)
        self._last[sk] = last
        self._last.move_to_end(sk)
        while len(self._last) > _REMEMBERED:
            self._let_go(self._last.popitem(last=False)[1])

    def _tip(self, history: History | None, at: float) -> tuple[int, Tip | None]:
        """The link a later request of the session may compare with (digested only then)."""
        if history is None or not len(history):
            return 0, None
        tip = Tip(history, at, history.size)
        if history.digested:  # a large or compressed body's: nothing left to save
            tip.digest()
        else:
            self._tips.hold(tip, at)
        return len(history), tip

    def _let_go(self, last: _Last) -> None:
        if last.tip is not None:
            self._tips.let_go(last.tip)


def _anchored(last: _Last | None, history: History | None, estimate: int) -> int:
    """The previous request's uncompressed prompt plus what the client appended since, when
    this request continues it: only the new messages are estimated, not the whole history."""
    if last is None or last.tip is None or history is None:
        return estimate
    if not 0 < last.messages <= len(history):
        return estimate
    digest = last.tip.digest()
    if digest is None or history.prefix(last.messages) != digest:
        return estimate
    return last.full_prompt + history.grown(last.messages)


def full_prompt(
    billed_prompt: int,
    messages: Sequence[Message],
    view: Sequence[Message],
    tools: Sequence[ToolSchema] | None,
    counter: TokenCounter,
    added_tools: Sequence[ToolSchema] = (),
    size: int = 0,
) -> tuple[int, History]:
    """The prompt the client's uncompressed request would have been billed, estimated from
    this request alone, and its `History` (`size`: the request body's bytes).

    The forwarded request holds what ctxgate put in (`view`: its summary, handoff, archive
    handles and restored passages; `added_tools`: its own tools, such as recall), so the
    client's request is estimated from ctxgate's count of it, scaled by what the provider
    billed for the forwarded one against ctxgate's count of that: the calibration of this
    very request, whatever ctxgate added."""
    unchanged = view is messages and not added_tools
    seen = seen_messages()  # the view's and the history's messages were counted on arrival
    sent = (
        billed_prompt
        if unchanged
        else seen.count_messages(counter, view, [*(tools or ()), *added_tools] or None)
    )
    scale = billed_prompt / sent if sent > 0 else 1.0
    empty = counter.count_messages([])

    def grown(n: int) -> int:
        return round((seen.count_messages(counter, messages[n:]) - empty) * scale)

    history = History(messages, grown, size)
    if unchanged or sent <= 0:
        return billed_prompt, history
    return round(seen.count_messages(counter, messages, tools) * scale), history
