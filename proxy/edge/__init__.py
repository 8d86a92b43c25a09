"""The HTTP edge: where a request comes in and its answer goes out.

Holds the ASGI app (`app.py`) and the parts it runs on (`services.py`), the front doors' routes
and the request body's reading (`routes.py`), the Responses API's other routes and its
`/compact` (`responses_routes.py`, `responses_compaction.py`), Anthropic's `count_tokens`
(`token_count.py`), the Gemini API's routes (`gemini_routes.py`), every other `/v1` path
relayed untouched (`relay.py`), the admin API and
the dashboard (`admin.py`, `dashboard.py`, `static/`), and the `ctxgate` command with its
offline `compress` and its logs (`cli.py`, `offline.py`, `logs.py`): cli.py builds the parser,
each subcommand runs from its module in `commands/`, imported only when it runs.

May import: proxy.gateway, proxy.doors, proxy.provider, proxy.config_file, proxy.http_errors.
"""
