"""`ctxgate replay PATH…`: saved agent sessions replayed through ctxgate's own session path.

`readers/` turns each agent's saved sessions into the requests the agent sent, in its own API.
`meter.py` says what a provider would bill for a request; `double.py` answers upstream calls in
place of the provider (no network) and measures what it received; `runner.py` builds the
services `serve` runs on over that double and sends each request through the gateway in order;
`figures.py` adds up what each session cost with and without ctxgate (pure); `report.py` writes
the text and JSON report, `html_report.py` the HTML page with its inline SVG chart;
`command.py` is the subcommand.

May import: proxy.edge, proxy.config_file, proxy.doors, proxy.gateway, proxy.provider,
proxy.http_errors.
"""
