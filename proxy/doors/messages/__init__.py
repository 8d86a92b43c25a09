"""The Anthropic Messages front door: `messages_door.py` serves it; `wire_types.py` describes
the shapes of the API it reads and writes; `request.py` reads a body, `blocks.py` converts
content blocks to chat-shaped messages and back, `cache.py` places prompt cache breakpoints,
`events.py` reads answers and streams, `recall_tool.py` offers, reads and hides ctxgate's own tool.

May import: session.ports.frontdoor, proxy.doors.bodies, proxy.doors.grown_bodies,
proxy.doors.sse_data, proxy.doors.streaming, proxy.provider, session.config.settings, session.errors
(not another door, nor the registry that imports them all).
"""
