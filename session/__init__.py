"""ctxgate's session core: what it does with one request of a conversation, web-free.

`conversations.py` takes a parsed request through its session: who is calling and which
conversation it is (`identity.py`), what this process remembers per session (`memory.py`), the
model's window and tokenizer (`models.py`) and how full the view is (`pressure.py`);
`policy.py` decides the action (a pure function of an event); `compaction.py` runs the engine
under the session lease and commits its result (`provenance.py` says where each message came
from; `summarizer.py` makes the engine's summary call); `turn.py` is the frozen record of a
request on its way. `recall.py` answers ctxgate's recall tool from the archive, `overflow.py`
reads providers' overflow errors, `metrics.py` counts what happened, `errors.py` is the error
tree every API's envelope is written from.

Subpackages: `ports` (the contracts `proxy/` implements: front door, upstream, headers),
`config` (the settings) and `ledger` (costs, savings, shadow checks).

This package imports no web or HTTP library, directly or through another package: it reaches
upstreams through `ports.upstream` and speaks HTTP only through the `proxy` that calls it.
"""
