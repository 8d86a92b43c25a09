"""The session core: what ctxgate does with one request of a conversation.

`gateway.py` serves a front door's request end to end. `conversations.py` gathers the event
from the session (`sessions.py`, `identity.py`, `auth.py`), the model (`models.py`) and the
view's size (`pressure.py`); `policy.py` decides the action (a pure function); `compaction.py`
runs the engine under the session lease and commits its result (`provenance.py` says where each
message of a view came from; `summarizer.py` makes the engine's summary call); `turn.py` is the
frozen record of a request on its way. `recall.py` and `rounds.py` offer the recall tool and
answer its calls; `metrics.py` counts what happened.

May import: proxy.ledger, proxy.doors, proxy.provider, session.config.settings, session.errors.
"""
