"""The bodies each front door parsed before, kept so that a body which only grew from one of
them is parsed as far as it is new (see `proxy.doors.grown_bodies`)."""

from __future__ import annotations

from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.registry import Door
from session.ports.frontdoor import IMAGE_MARK


class EarlierBodies:
    def __init__(self, budget: int) -> None:
        self.budget = budget  # bytes of parsed bodies kept per door; 0 keeps none
        self._by_api: dict[str, GrownBodies] = {}

    def of(self, door: Door) -> GrownBodies | None:
        """The bodies `door` parsed before, when it can use them."""
        if door.grows is None or not self.budget:
            return None
        earlier = self._by_api.get(door.api)
        if earlier is None:
            earlier = self._by_api[door.api] = GrownBodies(door.grows, self.budget, mark=IMAGE_MARK)
        return earlier

    def settle(self) -> None:
        """Keep the bodies parsed for requests now answered (see GrownBodies)."""
        for earlier in self._by_api.values():
            earlier.settle()
