"""The front doors ctxgate serves, by API and by path; adding one is a subpackage and one entry
in `DOORS`."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.doors.chat.door import ChatDoor
from proxy.doors.frontdoor import FrontDoor
from proxy.doors.gemini.door import GeminiDoor
from proxy.doors.messages.door import MessagesDoor
from proxy.doors.responses.door import ResponsesDoor

DOORS: tuple[FrontDoor, ...] = (ChatDoor(), ResponsesDoor(), MessagesDoor(), GeminiDoor())

BY_PATH: Mapping[str, FrontDoor] = {path: door for door in DOORS for path in door.paths}
BY_API: Mapping[str, FrontDoor] = {door.api: door for door in DOORS}
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
