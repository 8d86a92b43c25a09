"""The Chat Completions front door: `chat_door.py` serves it; `request.py` reads a request body;
`recall_tool.py` offers, reads and hides ctxgate's own tool; `shapes.py` holds the wire shapes
they read and write, and the readers of answers and chunks.

May import: session.ports.frontdoor, proxy.doors.bodies, proxy.doors.grown_bodies,
proxy.doors.sse_data, proxy.doors.streaming, proxy.provider, session.config.settings, session.errors
(not another door, nor the registry that imports them all).
"""
