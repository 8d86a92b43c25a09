"""Pruning without a model: deterministic passes over old tool output (`passes.py`), each
result replaced by one informative line (`oneliners.py`)."""
