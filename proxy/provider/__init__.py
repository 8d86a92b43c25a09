"""The provider side: how ctxgate talks to upstreams.

`upstream.py` sends calls over one shared connection pool (`transport.py`: aiohttp's, behind
httpx's transport seam); `headers.py` says which headers cross in each direction;
`overflow.py` recognises "the prompt does not fit" in each provider dialect's errors;
`images.py` shrinks images a provider refused as too large.

May import: session.config.settings, session.errors.
"""
