"""The summary of a pass's middle: the call with its gate (`call.py`, `middle.py`), what the
summary model reads (`records.py`) and is told (`prompts.py`), the handoff message it becomes
(`handoff.py`) with the handles of what it archived (`handles.py`), the mechanical fallback
(`fallback.py`) and how a failed call is classified (`failures.py`)."""
