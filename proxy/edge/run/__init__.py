"""`ctxgate run AGENT`: an agent run through ctxgate with one command.

`agents.py` says how each known agent is pointed at ctxgate (environment, flags, config
overrides: never the user's own files) and which provider it speaks (pure); `embedded.py`
builds the zero-config settings of an embedded server from the user's environment and runs
that server on a free loopback port; `figures.py` reads the server's metrics into the summary
printed at exit (pure); `process.py` starts the agent so that it dies with ctxgate, says why a
command cannot run (the shell's 126 and 127) and ends a start-up quietly on a signal;
`launcher.py` starts or attaches to the server, runs the agent with the terminal, its signals
and its exit code passed through, and prints the summary.

May import: proxy.edge, proxy.config_file, proxy.http_errors.
"""
