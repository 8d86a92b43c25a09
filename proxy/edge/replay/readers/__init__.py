"""Saved agent sessions read as the requests their agent sent, in the agent's own wire API.

`recording.py` is a session as those requests (pure); one reader per format:
`claude_code.py` (Messages), `codex.py` (Responses), `gemini_cli.py` (Gemini), `opencode.py`
(Chat Completions) and `plain.py` (Chat Completions or Responses bodies); `jsonl.py` reads the
files; `formats.py` says which reader a path needs.

May import: nothing of proxy outside itself.
"""
