"""Each agent's saved sessions read back as the requests the agent sent, in its own API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.edge.replay.readers.formats import read_paths, reader_for
from proxy.edge.replay.readers.recording import Recording, RecordingError

DATA = Path(__file__).parents[3] / "data" / "replay"
CORPUS = Path(__file__).parents[3] / "data" / "corpus" / "sweagent_fc_demos.jsonl"
CLAUDE = DATA / "claude_code"
CODEX = DATA / "codex"
GEMINI_CHAT = next((DATA / "gemini_cli").rglob("session-*.json"))
GEMINI_CHECKPOINT = next((DATA / "gemini_cli").rglob("checkpoint-*.json"))
OPENCODE = DATA / "opencode" / "storage"


def _source() -> list[dict[str, Any]]:
    """The conversation every fixture holds (system prompt first)."""
    lines = CORPUS.read_text().splitlines()
    messages: list[dict[str, Any]] = json.loads(lines[2])["messages"]
    return messages


def _answers() -> int:
    """Requests the conversation implies: one before each run of assistant messages."""
    roles = [m["role"] for m in _source()]
    return sum(1 for i in range(1, len(roles)) if roles[i] == "assistant" != roles[i - 1])


def _one(path: Path) -> Recording:
    (recording,) = read_paths([str(path)])
    return recording


def _grows(recording: Recording, key: str) -> None:
    """Each request holds the one before it, and ends before an answer."""
    sizes = [len(body[key]) for body in recording.bodies]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    for earlier, later in zip(recording.bodies, recording.bodies[1:], strict=False):
        assert later[key][: len(earlier[key]) - 1] == earlier[key][:-1]


def test_claude_code_log_reads_as_messages_requests() -> None:
    recording = _one(CLAUDE)
    assert (recording.source, recording.api) == ("claude-code", "messages")
    assert recording.model == "claude-sonnet-4-5-20250929"
    assert recording.name == "4f1c2d3e-0000-4000-8000-00000000c1de"
    assert len(recording.bodies) == _answers()
    _grows(recording, "messages")
    last = recording.bodies[-1]["messages"]
    roles = [m["role"] for m in last]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # alternating turns
    # An answer logged as two lines (text, then tool_use) is one message again.
    assert any([b["type"] for b in m["content"]] == ["text", "tool_use"] for m in last)
    text = json.dumps(recording.bodies[-1])
    assert "sub-agent task" not in text and "API Error" not in text
    assert last[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert text.count("cache_control") == 1


def test_codex_rollout_reads_as_responses_requests() -> None:
    recording = _one(CODEX)
    assert (recording.source, recording.api, recording.model) == (
        "codex",
        "responses",
        "gpt-5-codex",
    )
    assert len(recording.bodies) == _answers()
    _grows(recording, "input")
    body = recording.bodies[-1]
    assert body["instructions"] == _source()[0]["content"]
    kinds = {item["type"] for item in body["input"]}
    assert kinds == {"message", "reasoning", "function_call", "function_call_output"}
    assert "token_count" not in json.dumps(body)  # terminal events are not model input
    assert body["input"][-1]["type"] == "function_call_output"


@pytest.mark.parametrize("path", [GEMINI_CHAT, GEMINI_CHECKPOINT], ids=["chat", "checkpoint"])
def test_gemini_cli_sessions_read_as_gemini_requests(path: Path) -> None:
    recording = _one(path)
    assert (recording.source, recording.api, recording.model) == (
        "gemini-cli",
        "gemini",
        "gemini-2.5-pro",
    )
    assert len(recording.bodies) == _answers()
    _grows(recording, "contents")
    contents = recording.bodies[-1]["contents"]
    assert [c["role"] for c in contents][:2] == ["user", "model"]
    assert all(c["role"] in ("user", "model") for c in contents)
    calls = sum(1 for c in contents for p in c["parts"] if "functionCall" in p)
    answers = sum(1 for c in contents for p in c["parts"] if "functionResponse" in p)
    assert calls == answers > 0
    assert "Loaded cached credentials" not in json.dumps(contents)


def test_opencode_storage_reads_as_chat_requests() -> None:
    recording = _one(OPENCODE)
    assert (recording.source, recording.api) == ("opencode", "chat")
    assert recording.name == "ses_5f0c0000000000000000000001"
    assert recording.model == "claude-sonnet-4-5"
    assert len(recording.bodies) == _answers()
    _grows(recording, "messages")
    messages = recording.bodies[-1]["messages"]
    source = _source()[1:]
    assert [m["role"] for m in messages] == [m["role"] for m in source][: len(messages)]
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == results and calls


def test_a_session_file_inside_opencode_storage_reads_that_session() -> None:
    session = next((OPENCODE / "session").rglob("*.json"))
    assert _one(session).name == session.stem


def test_plain_chat_body_reads_as_every_request_its_history_holds() -> None:
    recording = _one(DATA / "plain" / "chat.json")
    assert (recording.source, recording.api, recording.model) == ("plain", "chat", "gpt-4o")
    assert len(recording.bodies) == _answers() + 1  # the body itself comes last
    assert recording.bodies[-1]["messages"] == _source()


def test_plain_responses_lines_are_sent_as_recorded() -> None:
    recording = _one(DATA / "plain" / "responses.jsonl")
    lines = (DATA / "plain" / "responses.jsonl").read_text().splitlines()
    assert recording.api == "responses"
    assert [b["input"] for b in recording.bodies] == [json.loads(x)["input"] for x in lines]


def test_a_folder_is_searched_for_every_format() -> None:
    sources = sorted({r.source for r in read_paths([str(DATA)])})
    assert sources == ["claude-code", "codex", "gemini-cli", "opencode", "plain"]


def test_a_partial_last_line_is_skipped(tmp_path: Path) -> None:
    log = next(CLAUDE.glob("*.jsonl")).read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(log + '{"type": "user", "message": {"role": "us')
    assert _one(cut).bodies == _one(CLAUDE).bodies


def test_model_override_reaches_every_body() -> None:
    recording = _one(CODEX).with_model("gpt-4.1")
    assert {b["model"] for b in recording.bodies} == {"gpt-4.1"}


@pytest.mark.parametrize(
    ("name", "text"),
    [("notes.json", '{"hello": 1}'), ("log.jsonl", '{"a": 1}\n'), ("x.txt", "plain text")],
)
def test_an_unknown_file_is_refused_by_name(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RecordingError, match=name):
        reader_for(path)


def test_a_missing_path_is_refused() -> None:
    with pytest.raises(RecordingError, match="no such file"):
        read_paths(["/nonexistent/session.jsonl"])


def test_a_recorded_claude_code_request_reads_as_its_history() -> None:
    """A request Claude Code sent (recorded as `{path, headers, body}`): Messages API, one
    request before each answer in its history, then the request itself."""
    path = DATA.parent / "claude_code" / "sonnet-4-5-bash-turn4.json"
    body = json.loads(path.read_text())["body"]
    recording = _one(path)
    assert (recording.api, recording.model) == ("messages", body["model"])
    answers = sum(1 for m in body["messages"] if m["role"] == "assistant")
    assert len(recording.bodies) == answers + 1
    assert recording.bodies[-1]["messages"] == body["messages"]
    assert recording.bodies[-1]["system"] == body["system"]


def test_a_rollout_codex_wrote_reads_as_the_requests_it_sent() -> None:
    """Codex 0.171's own rollout of a run against the simulator, beside the last request it
    sent: the items match one for one, but the base instructions (Codex trims the copy it
    sends to the tools it offers) and the ids Codex gives its developer message."""
    folder = DATA / "codex_recorded"
    recording = _one(next(folder.glob("rollout-*.jsonl")))
    sent = json.loads((folder / "sent-last-request.json").read_text())["body"]
    assert (recording.api, recording.model) == ("responses", sent["model"])
    assert len(recording.bodies) == 13  # twelve shell steps, then the final answer
    replayed = recording.bodies[-1]["input"]
    assert len(replayed) == len(sent["input"])
    assert replayed[1:] == sent["input"][1:]
    first = replayed[0]
    assert first["role"] == "developer" == sent["input"][0]["role"]
    assert first["content"][0]["text"].startswith(sent["input"][0]["content"][0]["text"][:200])


def test_the_requests_claude_code_logged_are_rebuilt_as_sent() -> None:
    """Claude Code 2.1.332's own log of a run against the simulator (its API requests logged
    beside the conversation), and the last request it sent: rebuilt, that request is the one
    sent, but for the billing header Claude Code adds to the system prompt as it sends it."""
    folder = DATA / "claude_code_recorded"
    recording = _one(next(folder.glob("*.jsonl")))
    sent = json.loads((folder / "sent-last-request.json").read_text())["body"]
    assert (recording.source, recording.api, recording.model) == (
        "claude-code",
        "messages",
        sent["model"],
    )
    assert len(recording.bodies) == 11  # ten shell commands, then the final answer
    last = recording.bodies[-1]
    for key in ("messages", "tools", "max_tokens", "thinking", "context_management"):
        assert last[key] == sent[key], key
    assert sent["system"][0]["text"].startswith("x-anthropic-billing-header")
    assert last["system"] == sent["system"][1:]
    first = recording.bodies[0]["messages"]
    assert len(first) == 1 and first[0]["role"] == "user"  # the task with its reminders


def test_a_chat_gemini_cli_recorded_reads_as_the_requests_it_sent() -> None:
    """Gemini CLI 0.61's own chat recording (JSON lines of changes) of a run against the
    simulator, and the contents of the last request it sent: the same, but for the thought
    signatures the recording does not keep."""
    folder = DATA / "gemini_cli_recorded"
    recording = _one(next(folder.glob("session-*.jsonl")))
    sent = json.loads((folder / "sent-last-request.json").read_text())
    assert (recording.source, recording.api, recording.model) == (
        "gemini-cli",
        "gemini",
        "gemini-2.5-pro",
    )
    assert recording.model in sent["path"]
    assert len(recording.bodies) == 9  # eight shell commands, then the final answer

    def unsigned(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {
                **c,
                "parts": [
                    {k: v for k, v in p.items() if k != "thoughtSignature"} for p in c["parts"]
                ],
            }
            for c in contents
        ]

    assert unsigned(recording.bodies[-1]["contents"]) == unsigned(sent["body"]["contents"])


def test_the_database_opencode_wrote_reads_as_the_conversation_it_sent() -> None:
    """OpenCode 1.18's own database (its session, message and part tables) after a run against
    the simulator, and the last request it sent (Responses API): the same conversation, call
    for call and output for output, without the system prompt OpenCode does not store."""
    folder = DATA / "opencode_recorded"
    recording = _one(folder / "opencode.db")
    sent = json.loads((folder / "sent-last-request.json").read_text())["body"]
    assert (recording.source, recording.api, recording.model) == ("opencode", "chat", "gpt-4.1")
    assert len(recording.bodies) == 9  # eight shell commands, then the final answer
    messages = recording.bodies[-1]["messages"]
    items = sent["input"][1:]  # after OpenCode's system prompt
    calls = [c["function"] for m in messages for c in m.get("tool_calls") or []]
    assert [c["arguments"] for c in calls] == [
        i["arguments"] for i in items if i.get("type") == "function_call"
    ]
    outputs = [m["content"] for m in messages if m["role"] == "tool"]
    assert outputs == [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert messages[0] == {"role": "user", "content": items[0]["content"][0]["text"]}
