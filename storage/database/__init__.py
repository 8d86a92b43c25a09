"""The database itself: the async engine with its transactions (`db.py`), small SQLite
statements run inline (`inline.py`), the SQLAlchemy Core tables (`tables.py`) and their
migrations (`migrations.py`), and row leases with their owners (`leases.py`, `owners.py`)."""
