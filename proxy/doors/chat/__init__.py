"""The Chat Completions front door: `door.py` serves it; `request.py` reads a request body;
`recall.py` offers, reads and hides ctxgate's own tool.

May import: proxy.doors.frontdoor, proxy.doors.bodies, proxy.doors.grown_bodies,
proxy.doors.sse_data, proxy.doors.streaming, proxy.provider, proxy.settings, proxy.errors
(not another door, nor the registry that imports them all).
"""
