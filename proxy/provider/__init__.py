"""The provider side: how ctxgate talks to upstreams.

`upstream.py` sends calls over one shared connection pool (`transport.py`: aiohttp's, behind
httpx's transport seam), implementing the session core's `session.ports.upstream`; `images.py`
shrinks images a provider refused as too large. Which headers cross in each direction is the
core's `session.ports.headers`; recognising an overflow is `session.overflow`.

May import: nothing else of proxy.
"""
