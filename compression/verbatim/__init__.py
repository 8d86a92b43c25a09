"""What a handoff carries as it was: the user's own words (`userwords.py`, `instructions.py`),
the files an agent read (`reads.py`, `fileops.py`), pinned reference content (`pins.py`),
a client's canned opening (`preamble.py`), which user messages are tool observations
(`observations.py`), and short exact anchors (`anchors.py`); `carry.py` puts them together."""
