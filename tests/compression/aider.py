"""Conversations shaped like aider's requests (test support).

aider sends no tools and no session header. Every request opens with the same system prompt,
the same worked example exchange, a reset answered "Ok.", and the repository map answered on
one line; then the conversation so far, the files added to the chat (answered on one line) and
the current message.
"""

from __future__ import annotations

from typing import Any

from compression.messages.types import Message
from tests.simulator import Reply, is_summary_request
from tests.simulator.tokens import count_text

REMINDER = (
    "# *SEARCH/REPLACE block* Rules:\n\nEvery *SEARCH/REPLACE block* must use this format:\n"
    "1. The *FULL* file path alone on a line, verbatim.\n2. The opening fence and code language."
)
SYSTEM = (
    "Act as an expert software developer. Take requests for changes to the supplied code.\n"
    "Always reply to the user in English. Describe each change with a *SEARCH/REPLACE block*.\n"
    + REMINDER
)
EXAMPLE_REQUEST = "Change the greeting to be more casual"
EXAMPLE_ANSWER = (
    'Ok, I will:\n\n1. Switch the greeting text from "Hello" to "Hey".\n\n'
    'show_greeting.py\n```python\n<<<<<<< SEARCH\n    print(f"Hello {name}")\n=======\n'
    '    print(f"Hey {name}")\n>>>>>>> REPLACE\n```\n'
)
RESET = (
    "I switched to a new code base. Please don't consider the above files or try to edit them "
    "any longer."
)
REPO_MAP = (
    "Here are summaries of some files present in my git repository.\n"
    "Do not propose changes to these files, treat them as *read-only*.\n\n"
    "net/client.py:\n│def fetch(url, timeout):\n│class Session:\n"
)
REPO_ACK = "Ok, I won't try and edit those files without asking first."
FILES_PREFIX = "I have *added these files to the chat* so you can go ahead and edit them.\n\n"
FILES_ACK = "Ok, any changes I propose will be to those files."


def opening() -> list[Message]:
    """What every aider conversation sends first, identical across conversations."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": EXAMPLE_REQUEST},
        {"role": "assistant", "content": EXAMPLE_ANSWER},
        {"role": "user", "content": RESET},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": REPO_MAP},
        {"role": "assistant", "content": REPO_ACK},
    ]


def edit_answer(turn: int, lines: int = 40) -> str:
    body = "\n".join(
        f"    attempt_{turn}_{n} = backoff(base={n}, cap={turn + n})" for n in range(lines)
    )
    return (
        f"To make change {turn} we need to modify `net/client.py`:\n\n"
        f"net/client.py\n```python\n<<<<<<< SEARCH\ndef fetch(url, timeout):\n=======\n"
        f"def fetch(url, timeout, retries={turn}):\n{body}\n>>>>>>> REPLACE\n```\n"
    )


ASKS = ["Add retries with exponential backoff to fetch() in net/client.py; keep its signature."]
ASKS += [f"Now make attempt {n} log its delay and the URL." for n in range(1, 14)]


def answering(lines: int = 40) -> Any:
    """A simulator responder that answers like aider's model: an edit of `lines` lines for
    each request (the simulator's own summarizer answers the summary calls)."""

    def answer(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            return None
        answered = sum(1 for m in body["messages"] if m.get("role") == "user") - len(opening())
        return Reply(content=edit_answer(answered, lines))

    return answer


def request(
    asks: list[str],
    answers: int | None = None,
    file_text: str = "def fetch(url, timeout): ...",
    reminder: bool = False,
) -> list[Message]:
    """The request aider sends with `asks` made so far: all answered but the last (or the first
    `answers`), the added files just before the current message; with `reminder`, the format
    rules of the system prompt appended to the current message (aider's default)."""
    answered = len(asks) - 1 if answers is None else answers
    messages = opening()
    for turn, ask in enumerate(asks[:answered]):
        messages += [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": edit_answer(turn)},
        ]
    messages += [
        {"role": "user", "content": FILES_PREFIX + "net/client.py\n```\n" + file_text + "\n```"},
        {"role": "assistant", "content": FILES_ACK},
        {"role": "user", "content": asks[answered] + ("\n\n" + REMINDER if reminder else "")},
    ]
    return messages


def source_file(tokens: int) -> str:
    """Python source of about `tokens` tokens, each line distinct (a clip shows)."""
    lines: list[str] = []
    n = 0
    while count_text("\n".join(lines)) < tokens:
        lines += [
            f"def handler_{n}(request, retries={n}):",
            f"    return backoff(request, base={n % 7}, cap={n * 3}, label='h{n}')",
        ]
        n += 1
    return "\n".join(lines)
