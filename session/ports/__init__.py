"""The session core's contracts with the world around it: a front door (`frontdoor.py`: the
`FrontDoor` protocol with `WireRequest`, `Usage` and the recall tool's values), the upstream it
calls (`upstream.py`) and the headers sent there (`headers.py`). `proxy/` implements them.

May import: session.config, session.errors, session.overflow.
"""
