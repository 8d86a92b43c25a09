"""The OpenAI Responses front door: `responses_door.py` serves it; `wire.py` reads and renders
bodies, `items.py` and `parts.py` convert `input` items to chat-shaped messages (cut at the
newest `compaction` item, `compaction_items.py`) and `render.py` back, `stream.py` watches its
event stream, `recall_tool.py` offers, reads and hides ctxgate's own tool; `wire_shapes.py`
holds the wire shapes they read and write.

May import: session.ports.frontdoor, proxy.doors.bodies, proxy.doors.grown_bodies,
proxy.doors.sse_data, proxy.doors.streaming, proxy.provider, session.config.settings, session.errors
(not another door, nor the registry that imports them all).
"""
