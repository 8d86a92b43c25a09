"""The front doors: one wire API each, behind the session core's `FrontDoor` protocol
(`session/ports/frontdoor.py`).

A door parses a request body into chat-shaped messages for the core and renders the compressed
view back into its API's body, reads usage, overflows and errors from answers, and offers and
hides the recall tool. Each door is a subpackage (`chat/`, `responses/`, `messages/`, `gemini/`)
and one entry in `registry.py`, whose `Door` adds what the gateway needs. Shared here: the first
checks of a body (`bodies.py`), parsing a body that only grew (`grown_bodies.py`), SSE event
data (`sse_data.py`), and the stream relay that passes an upstream's events on and shows the
door's watch what it needs (`streaming.py`).

May import: proxy.provider.
"""
