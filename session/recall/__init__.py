"""Recall: the model reads back what compressions archived.

`tool.py` is ctxgate's recall tool (`ctxgate_recall`: offered while a session's view comes from
a checkpoint, answered from the archive in rounds the client never sees); `ahead.py` is recall
before asking (the passages the newest turn names, put back in view before the request is
forwarded).

May import: session.config, session.metrics, session.ports, session.turn.
"""
