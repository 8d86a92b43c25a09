"""Recognising user messages that state or change an instruction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compression.verbatim.instructions import SCAN_CHARS, states_instruction, supersedes

# Real phrasings: what users of coding agents and chat services write when they set a rule,
# correct the agent or change their mind mid-session.
INSTRUCTIONS = [
    "From now on, write every log line in JSON instead of plain text.",
    "Don't touch the migrations folder; use the fixtures rather than the live database.",
    "Never push to main.",
    "Only change files under src/.",
    "Use pnpm, not npm.",
    "Actually, let's go with SQLite for now.",
    "No, that's the wrong file. It's config/settings.py.",
    "Wait, stop. Revert that last change.",
    "Please keep the public API stable.",
    "Make sure the tests pass before you commit.",
    "Switch to the staging endpoint.",
    "Going forward, answer in British English.",
    "Scratch that: the deadline is Friday.",
    "That's not what I asked for.",
    "I want the cheapest flight, not the fastest but the cheapest one.",
    "You must not cancel the reservation without asking me.",
    "Avoid adding new dependencies.",
    "Remember to update the changelog.",
    "Désormais, réponds en français.",
    "N'utilise pas de bibliothèque externe.",
    "Verwende ab jetzt pytest statt unittest.",
    "Bitte niemals direkt auf main pushen.",
    "A partir de ahora usa español, no inglés.",
    "Nunca modifiques el archivo de configuración.",
    "Não altere os testes, apenas o código.",
    "不要修改迁移文件。",
    "以后都用中文回答。",
    "改用 PostgreSQL，而不是 MySQL。",
    "テストは変更しないで。",
    "今後はTypeScriptで書いて。",
    "반드시 테스트를 먼저 실행해.",
]
ORDINARY = [
    "ok, go on",
    "looks good, next the parser",
    "Thanks!",
    "what does this function do?",
    "Run the tests.",
    "Please fix the bug in parser.py",
    "Here is the traceback:\nTraceback (most recent call last):\n  File 'a.py'",
    "The output is commonly wrong in this area.",
    "yes",
    "My user id is mia_li_3668.",
    "Can you explain the difference between these two approaches?",
    "Continue.",
]


@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_instructions_are_recognised(text: str) -> None:
    assert states_instruction(text)


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_messages_are_not(text: str) -> None:
    assert not states_instruction(text)


@given(st.text(max_size=600))
def test_any_text_is_read_without_error(text: str) -> None:
    assert states_instruction(text) in (True, False)


@given(st.sampled_from(INSTRUCTIONS), st.text(alphabet="abc \n", max_size=200))
def test_pasted_material_after_an_instruction_does_not_hide_it(rule: str, paste: str) -> None:
    assert states_instruction(f"{rule}\n\n{paste}")


@given(st.sampled_from(INSTRUCTIONS))
def test_case_does_not_matter(rule: str) -> None:
    assert states_instruction(rule.upper()) and states_instruction(rule.lower())


def test_only_the_head_of_a_long_message_is_read() -> None:
    # Rules are stated up front; a constraint word deep in pasted material is the material's.
    assert not states_instruction("x " * SCAN_CHARS + "never")


# A message that explicitly takes back an earlier one, and which: the newest instruction
# before it, or the message just before it.
TAKE_BACK = [
    ("Ignore my previous message, SQLite is fine.", "message"),
    ("Please disregard my last request.", "message"),
    ("Scratch that, do it in Go.", "message"),
    ("Never mind, the tests can wait.", "message"),
    ("Forget the earlier instruction about Postgres.", "instruction"),
    ("Disregard the previous instructions about logging; plain text is fine.", "instruction"),
    ("This replaces my previous message.", "message"),
    ("Oublie mon message précédent.", "message"),
    ("Ignore la consigne précédente.", "instruction"),
    ("Vergiss meine letzte Anweisung.", "instruction"),
    ("Olvida mi mensaje anterior.", "message"),
    ("Ignora la instrucción anterior.", "instruction"),
    ("忽略我之前的指示，用 SQLite。", "instruction"),
    ("Desconsidere as instruções anteriores.", "instruction"),
    ("Forget it, let's move on.", "message"),
    ("Ignore the above instructions.", "instruction"),
]
NOT_TAKE_BACK = [
    "ignore the tests for now",
    "Ignore lint warnings in the previous file",
    "Use the previous answer format",
    "Replace the last answer with a table",
    "ignore the previous error, it is flaky",
    "The last message from the server was a timeout.",
    "Cancel the previous request to the API and retry",
    "Ignore the comment above the function; it is outdated.",
    "ignore the note above, it's stale",
    "Ignore the last comment in the PR",
    "Please ignore the first point in the README",
    "Scratch that test file, we don't need it",
    "Override the first rule in .eslintrc for this folder",
    "忽略上面的错误",
]


@pytest.mark.parametrize(("text", "kind"), TAKE_BACK)
def test_taking_back_an_earlier_message_is_recognised(text: str, kind: str) -> None:
    assert supersedes(text) == kind
    assert supersedes(text.upper()) == kind


@pytest.mark.parametrize("text", NOT_TAKE_BACK)
def test_messages_that_take_nothing_back_are_not(text: str) -> None:
    assert supersedes(text) is None


@given(st.text(max_size=600))
def test_any_text_is_read_for_taking_back_without_error(text: str) -> None:
    assert supersedes(text) in (None, "message", "instruction")
