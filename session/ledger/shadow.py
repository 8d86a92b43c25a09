"""Shadow checks: would the model have taken the same next action without compression?

For a sampled request whose view was compressed, and whose uncompressed history still fits
the window, the client's own request is sent twice more, uncompressed (A and A'), once the
client has its answer: non-streamed, same parameters, `max_tokens` bounded. B is the
compressed request's answer: the client's own when it was not streamed, else the compressed
view sent once more the same way. B agreeing with A is the agreement; A' agreeing with A is
the noise floor (a sampled model disagrees with itself too).

Shadow calls carry `x-ctxgate-shadow: 1` upstream, so they can be told apart in the
provider's logs; their answers go nowhere but the comparison, their usage is charged to the
ledger as `shadow` and never becomes the session's figure.

The day's token budget is a cap, also for checks running at once: a check is admitted only
when the budget can hold its estimate (each of its calls: the uncompressed prompt plus
`max_tokens`), which it then reserves before its first call. As each call returns, its share
of the reservation is replaced by what the provider billed; what a check leaves unspent
(calls it never made) is released when it ends. A call that failed without an answer keeps
its estimate as spent: the provider may have billed it, and a cap must not count on it not.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from session.config.settings import ShadowSettings
from session.errors import ProxyError
from session.ledger.actions import agree, next_action
from session.ledger.book import Ledger
from session.ports.frontdoor import FrontDoor, Usage
from session.ports.upstream import Upstream
from storage import SessionKey, SessionStore, StorageError
from storage.rows.charges import ShadowRow

log = logging.getLogger("ctxgate.shadow")

SHADOW_HEADER = "x-ctxgate-shadow"
SHADOW_APIS = ("chat", "responses", "messages")  # whose bodies `shadow_body` bounds
_DAY_S = 86_400
_DROPPED = ("stream", "stream_options", "background", "store", "previous_response_id")


@dataclass(frozen=True, slots=True)
class ShadowJob:
    """What a check needs of one answered request (the core's turn, flattened)."""

    sk: SessionKey
    model: str
    trigger: str | None  # the compression's trigger; None: the view is a checkpoint's
    checkpoint_id: int | None  # the checkpoint the view was made from
    door: FrontDoor
    upstream: Upstream
    headers: Mapping[str, str]  # the upstream request headers the client's request went with
    full_body: bytes  # the client's request as it sent it
    compressed_body: bytes  # the view as forwarded (ctxgate's own tools left out)
    answer: bytes | None  # the client's non-streamed answer; None: B is sent again
    full_prompt: int  # tokens of the uncompressed history


class Grant:
    """The share of the day's budget one check holds: reserved before its first call, given
    back call by call as the calls return."""

    __slots__ = ("call", "held")

    def __init__(self, call: int, calls: int) -> None:
        self.call = call  # each call's estimate
        self.held = call * calls


@dataclass(frozen=True, slots=True)
class Checked:
    agrees: bool  # B took A's action
    noise_agrees: bool  # A' took A's action
    tokens: int  # billed to the shadow calls


Observe = Callable[[str, str, bool, bool], None]  # model, trigger, agrees, noise_agrees


class Shadow:
    def __init__(
        self,
        settings: ShadowSettings,
        store: SessionStore,
        ledger: Ledger,
        observe: Observe = lambda model, trigger, agrees, noise: None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.ledger = ledger
        self.observe = observe
        self.rng = rng or random.Random()
        self.clock = clock
        self._day = -1
        self._spent = 0
        self._reserved = 0  # held by the checks under way
        self._tasks: set[asyncio.Task[Checked | None]] = set()

    @property
    def spent_today(self) -> int:
        self._roll()
        return self._spent

    @property
    def running(self) -> int:
        """Checks under way."""
        return len(self._tasks)

    @property
    def reserved(self) -> int:
        """Tokens the checks under way hold and have not spent yet."""
        return self._reserved

    def admit(self, api: str, full_prompt: int, window: int, answered: bool) -> Grant | None:
        """The budget reserved for checking this compressed request, or None: not checked (an
        API whose answers `actions` does not read, not sampled, too large for the window, or
        more than the budget has left). `answered`: the client's answer serves as B, so
        the check makes two calls, not three."""
        s = self.settings
        if not s.enabled or api not in SHADOW_APIS or full_prompt + s.max_tokens > window:
            return None
        if self.rng.random() >= s.sample_rate:
            return None
        grant = Grant(full_prompt + s.max_tokens, 2 if answered else 3)
        self._roll()
        if self._spent + self._reserved + grant.held > s.daily_tokens:
            log.info("shadow budget spent: a check was not started")
            return None
        self._reserved += grant.held
        return grant

    def start(self, job: ShadowJob, grant: Grant) -> asyncio.Task[Checked | None]:
        """Run the check in the background, within `grant`; the caller's answer is already
        out."""
        task = asyncio.get_running_loop().create_task(self.check(job, grant))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def check(self, job: ShadowJob, grant: Grant) -> Checked | None:
        """A, A' (and B when needed), compared and recorded; None when it could not finish.
        Whatever of `grant` the calls did not spend goes back to the budget."""
        try:
            return await self._check(job, grant)
        except Exception:  # a check is a measurement: it never fails anything else
            log.exception("shadow check of session %s failed", job.sk.key)
            return None
        finally:
            self._reserved -= grant.held
            grant.held = 0

    async def _check(self, job: ShadowJob, grant: Grant) -> Checked | None:
        spent: list[int] = []
        full = shadow_body(job.door.api, job.full_body, self.settings.max_tokens)
        a = await self._call(job, full, spent, grant)
        again = await self._call(job, full, spent, grant) if a is not None else None
        b = job.answer
        if again is not None and b is None:
            compressed = shadow_body(job.door.api, job.compressed_body, self.settings.max_tokens)
            b = await self._call(job, compressed, spent, grant)
        actions = [next_action(job.door.api, x) if x else None for x in (a, again, b)]
        first, second, compressed_action = actions
        if first is None or second is None or compressed_action is None:
            return None
        checked = Checked(agree(compressed_action, first), agree(second, first), sum(spent))
        trigger = await self._trigger(job)
        self.observe(job.model, trigger, checked.agrees, checked.noise_agrees)
        row = ShadowRow(
            job.sk, self.clock(), job.model, trigger, checked.agrees,
            checked.noise_agrees, checked.tokens,
        )  # fmt: skip
        try:
            await self.store.record_shadow(row)
        except StorageError as exc:
            log.warning("could not record a shadow check: %s", exc)
        return checked

    async def _trigger(self, job: ShadowJob) -> str:
        """The trigger of the compression that made the view: this request's, else the one
        that made its checkpoint (a background compression's `post_response`, an operator's
        `manual`), read from its event; "checkpoint" when no event says."""
        if job.trigger is not None:
            return job.trigger
        if job.checkpoint_id is not None:
            try:
                found = await self.store.checkpoint_trigger(job.checkpoint_id)
            except StorageError as exc:
                log.warning("could not read a checkpoint's trigger: %s", exc)
                found = None
            if found is not None:
                return found
        return "checkpoint"

    async def _call(
        self, job: ShadowJob, body: bytes, spent: list[int], grant: Grant
    ) -> bytes | None:
        """One shadow call, charged; None when the grant is used up or the call failed."""
        if grant.held < grant.call:
            return None
        headers = {**job.headers, SHADOW_HEADER: "1", "accept": "application/json"}
        try:
            response = await job.upstream.call("POST", job.door.upstream_path, body, headers)
        except ProxyError as exc:
            log.warning("a shadow call failed: %s", exc)
            self._settle(grant, grant.call)  # billed or not, nobody can say: counted
            return None
        usage = job.door.usage(response.content) if response.status_code < 400 else None
        self._settle(grant, _tokens(usage))
        spent.append(_tokens(usage))
        await self.ledger.overhead(job.sk, job.model, "shadow", usage)
        if response.status_code >= 400:
            log.warning("a shadow call got %d from the upstream", response.status_code)
            return None
        return response.content

    def _roll(self) -> None:
        day = int(self.clock() // _DAY_S)
        if day != self._day:
            self._day, self._spent = day, 0

    def _settle(self, grant: Grant, tokens: int) -> None:
        """One call's estimate given back and what it cost spent."""
        self._roll()
        grant.held -= grant.call
        self._reserved -= grant.call
        self._spent += tokens

    async def close(self) -> None:
        """Cancel the checks still running (at shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _tokens(usage: Usage | None) -> int:
    return 0 if usage is None else usage.prompt_tokens + (usage.completion_tokens or 0)


def shadow_body(api: str, raw: bytes, max_tokens: int) -> bytes:
    """`raw` sent non-streamed, with its output bounded to `max_tokens` (plus a Messages
    thinking budget, which must stay below `max_tokens`)."""
    body: dict[str, Any] = orjson.loads(raw)
    for key in _DROPPED:
        body.pop(key, None)
    if api == "chat":
        # The client's own key: some servers know only the older `max_tokens`.
        old = "max_tokens" in body and "max_completion_tokens" not in body
        body["max_tokens" if old else "max_completion_tokens"] = max_tokens
        body.pop("n", None)
    elif api == "responses":
        body["max_output_tokens"] = max_tokens
    else:
        thinking = body.get("thinking")
        budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
        body["max_tokens"] = max_tokens + (budget if isinstance(budget, int) else 0)
    return orjson.dumps(body)
