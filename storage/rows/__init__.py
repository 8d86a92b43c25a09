"""The rows of each kind of session state, read and written through `storage.database`:
sessions, lineages, checkpoints and the archive, compression events, usage, charges and shadow
checks, learned windows, the archive's search index (`search.py`, `terms.py`) and what
retention deletes (`retention.py`)."""
