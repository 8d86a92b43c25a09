"""Compression-quality evaluation of ctxgate (driven by `bench/eval.py`).

Long sessions built from the shared corpus are replayed turn by turn through a real ctxgate in
front of the provider simulator; what ctxgate forwarded is compared with the full history and
with an observation-masking baseline (tokens, fit, retention of user messages, artifacts and
planted needles, prompt-cache friendliness, compressions, added latency).
"""
