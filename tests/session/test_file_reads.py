"""The file an agent works on stays in view across compressions, as the provider receives it.

A Claude-Code-shaped agent on Chat Completions reads `src/app/core.py` early, runs many noisy
commands, reads it again, and edits it every few turns. Every request the provider receives
after the first compression must hold the newest read of that file verbatim (in the tail or in
the handoff's "Files" section), while the older read is gone or superseded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai

from compression import check_invariants
from compression.summary.handoff import handoff_text, parse_handoff
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Reply, Simulator, is_summary_request
from tests.simulator.fixtures import simulator_fixture

MODEL = "coder-16k"
WINDOW = 16_384
KEY = "sk-file-reads"
PATH = "/srv/app/src/app/core.py"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in keys}},
        },
    }
    for name, keys in (
        ("Read", ("file_path",)),
        ("Edit", ("file_path", "old_string", "new_string")),
        ("Bash", ("command",)),
    )
]


def core_file(version: int) -> str:
    return "\n".join(
        f"{n:5}\tdef route_{version}_{n}(request):  return dispatch(request, {n}, {version})"
        for n in range(1, 41)
    )


def noise(turn: int) -> str:
    return "\n".join(f"tests/test_{turn}.py::case_{n} PASSED [{n}%]" for n in range(60))


def plan(turn: int) -> tuple[str, dict[str, str]]:
    """The model's call at each turn: two reads of the file, noise, and edits after the
    second read."""
    if turn in (2, 30):
        return "Read", {"file_path": PATH}
    if turn > 30 and turn % 5 == 0:
        return "Edit", {"file_path": PATH, "old_string": "dispatch(", "new_string": "route("}
    return "Bash", {"command": f"pytest tests/test_{turn}.py -q"}


class Agent:
    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent in /srv/app."},
            {"role": "user", "content": "Refactor the routes in src/app/core.py."},
        ]
        self.reads = 0

    def turn(self) -> None:
        completion = self.client.chat.completions.create(
            model=MODEL,
            messages=self.messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Session-Id": "file-reads"},
        )
        message = completion.choices[0].message.model_dump(exclude_none=True)
        self.messages.append(message)
        for call in message.get("tool_calls") or []:
            name = call["function"]["name"]
            if name == "Read":
                self.reads += 1
                output = core_file(self.reads)
            elif name == "Edit":
                output = "The file has been updated."
            else:
                output = noise(len(self.messages))
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


def following_the_plan() -> Callable[[dict[str, Any]], Reply | None]:
    """The model's answers: the tool call `plan` makes of each turn, the summary calls aside."""
    turns = iter(range(10_000))  # the agent's own count: a compressed view holds fewer

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            return None
        name, arguments = plan(next(turns))
        return Reply(tool_calls=[{"name": name, "arguments": arguments}])

    return respond


sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, responder=following_the_plan, validate_messages=True
)


def test_the_newest_read_of_the_file_being_edited_is_in_every_request(
    sim: Simulator, db_path: str
) -> None:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    compression = {"options": {"min_threshold_tokens": 1000}}
    settings = settings_for(
        sim.base_url, db_path, models=models, api_key=None, compression=compression
    )
    with ProxyServer(settings) as proxy:
        agent = Agent(openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0))
        for _ in range(70):
            agent.turn()
    requests = [r for r in sim.chat_requests if not r.is_summary]
    compressed = [
        r for r in requests if any(handoff_text(m) is not None for m in r.body["messages"])
    ]
    assert len(compressed) >= 10, "the session was not compressed often enough to tell"
    after_second_read = [
        r for r in requests if core_file(2) in "\n".join(_texts(r.body["messages"]))
    ]
    assert after_second_read, "the second read never reached the provider"
    first_seen = requests.index(after_second_read[0])
    both = 0
    for request in requests[first_seen:]:
        check_invariants(request.body["messages"])
        text = "\n".join(_texts(request.body["messages"]))
        assert core_file(2) in text, f"request {requests.index(request)} lost the newest read"
        both += core_file(1) in text  # until the next compression replaces the old handoff
    # Superseded: the next compression drops the older read for good.
    assert both < len(requests) - first_seen - 10
    assert core_file(1) not in "\n".join(_texts(requests[-1].body["messages"]))
    carried = [
        parsed.handoff.files
        for r in compressed
        for m in r.body["messages"]
        if (summary := handoff_text(m)) is not None and (parsed := parse_handoff(summary))
    ]
    assert any(files and files[0][0] == PATH for files in carried)


def _texts(messages: list[dict[str, Any]]) -> Iterator[str]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            yield content
