"""The one typed settings object (`settings.py`), read from a YAML document by `reader.py`'s
typed accessors, with model prices (`prices.py`). `proxy.config_file` builds it once from the
file and the environment; without a file, from the zero-config document of `environment.py`.

May import: nothing else of session.
"""
