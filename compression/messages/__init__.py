"""The chat-shaped messages every pass works on: their wire types (`types.py`), reading and
rewriting content whatever its shape (`content.py`), pairing tool results with their calls
(`toolpairs.py`) and digests of messages and prefixes (`digest.py`)."""
