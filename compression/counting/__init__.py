"""Counting tokens: estimates the way providers bill a chat request (`tokens.py`, with the
tiktoken encodings loaded offline by `encodings.py`), per-model calibration against the real
figures (`calibration.py`) and the token figures of one compression pass (`figures.py`)."""
