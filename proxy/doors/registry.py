"""The front doors ctxgate serves, by API and by path; adding one is a subpackage and one entry
in `DOORS`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from proxy.doors.chat.chat_door import ChatDoor
from proxy.doors.gemini.gemini_door import GeminiDoor
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.messages.messages_door import MessagesDoor
from proxy.doors.responses.responses_door import ResponsesDoor
from session.ports.frontdoor import FrontDoor, WireRequest


class Door(FrontDoor, Protocol):
    """A front door as the gateway uses it: it may parse a body that grew from an earlier one."""

    grows: str | None  # the body's array a grown body adds to, when `parse` can use `earlier`

    def parse(
        self, raw: bytes, earlier: GrownBodies | None = None, *, max_messages: int = 0
    ) -> WireRequest:
        """The request, or BadRequest saying what is wrong with it.

        `earlier` holds bodies this door parsed before (None when `grows` is None or
        `server.parsed_request_bytes` is 0): a body that grew out of one of them is parsed,
        checked and converted only as far as it is new.

        `max_messages` (`server.max_messages`, 0: none): a door whose body's array is its
        message list refuses more with PayloadTooLarge as soon as it is parsed, before it
        checks a message; the others' lists are counted by the caller once converted.
        """
        ...


DOORS: tuple[Door, ...] = (ChatDoor(), ResponsesDoor(), MessagesDoor(), GeminiDoor())

BY_PATH: Mapping[str, Door] = {path: door for door in DOORS for path in door.paths}
BY_API: Mapping[str, Door] = {door.api: door for door in DOORS}
APIS = tuple(BY_API)


def summary_door(apis: tuple[str, ...], request_door: FrontDoor) -> FrontDoor:
    """The API a summary call uses on an upstream serving `apis`: Chat Completions when it
    can, else the request's own, else the first the upstream serves."""
    for api in ("chat", request_door.api, *apis):
        if api in apis and api in BY_API:
            if isinstance(request_door, GeminiDoor) and api == request_door.api:
                # The model is in Gemini's path: the request's own, asked without a stream.
                return GeminiDoor.at(request_door.model, stream=False)
            return BY_API[api]
    raise ValueError(f"no front door for any of {apis}")
