"""The `ctxgate` command's subcommands, one module each, imported only when that subcommand
runs (proxy/edge/cli.py builds the parser without them, so `--help` stays fast): `serve.py`
(the proxy, its start-up lines and its refusal of an upstream that is itself), `compress.py`
(the offline preview), `agent.py` (`ctxgate run`), `configuration.py` (`config check` and
`config show`). Each has `main(args) -> exit code`.

May import: proxy.edge, proxy.config_file.
"""
