"""Assembling a compressed view: where to cut it into head, middle and tail (`planning.py`),
splicing the handoff into it with valid roles (`splice.py`), and the invariants every view
must pass before it is sent (`invariants.py`)."""
