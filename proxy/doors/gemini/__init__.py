"""The Gemini API front door (Gemini CLI, the `google-genai` SDKs): `gemini_door.py` serves
`models/{model}:generateContent` and `:streamGenerateContent`; `contents.py` describes the
shapes of the API it reads and writes; `request.py` reads a body (`checks.py` checks the key
and the shapes ctxgate passes on), `parts.py` converts `contents` to chat-shaped messages and
back (thought parts and thought signatures kept byte for byte with their turn) and `pairs.py`
puts them back into contents with every call paired, `events.py` reads answers and streams,
`recall_tool.py` offers, reads and hides ctxgate's own tool.

May import: session.ports.frontdoor, proxy.doors.bodies, proxy.doors.grown_bodies,
proxy.doors.sse_data, proxy.doors.streaming, proxy.provider, session.config.settings, session.errors
(not another door, nor the registry that imports them all).
"""
