"""The gateway: one front door's request served end to end over the session core.

`gateway.py` parses the request, hands it to the session core (`session.conversations`),
calls the upstream and relays its answer or stream; `auth.py` says who may use the proxy and
what credential goes upstream; `rounds.py` answers the model's calls to ctxgate's recall tool
with further upstream calls before the client sees the answer.

May import: proxy.doors, proxy.provider, proxy.http_errors.
"""
