"""The one typed settings object (`settings.py`), read from a YAML document by `reader.py`'s
typed accessors, with model prices (`prices.py`). `proxy.config_file` builds it once from the
file and the environment.

May import: nothing else of session.
"""
