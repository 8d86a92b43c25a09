"""Checks of the Gemini inputs ctxgate relies on or passes on (pure): the API key and the
shapes of `tools`, function declarations, and the function calls and responses in contents.

Each raises BadRequest (a 400 `INVALID_ARGUMENT` in Google's envelope) naming the field the
way Google does, so that a client's mistake never travels upstream nor turns into a 5xx.
"""

from __future__ import annotations

import re
from typing import Any

from session.errors import BadRequest

# Google's keys are [A-Za-z0-9_-]; ctxgate's own keys may be any visible ASCII. A key is
# sent on in a header, where control characters, spaces and non-ASCII have no place.
_KEY_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))
_NAME_LIMIT = 128
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


def api_key(value: str, where: str) -> str:
    """`value` when it can be a key (visible ASCII, no space), else BadRequest."""
    if value and all(c in _KEY_CHARS for c in value):
        return value
    raise BadRequest(
        f"API key not valid. The key in {where} must be visible ASCII characters only "
        "(no spaces, control characters or non-ASCII letters)."
    )


def check_tools(tools: object) -> None:
    """`tools`: a list of Tool objects, each a `functionDeclarations` list or a built-in."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise BadRequest("Invalid value at 'tools': expected a list of Tool objects.")
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise BadRequest(f"Invalid value at '{where}': expected a Tool object.")
        if "functionDeclarations" not in tool:
            continue
        declarations = tool["functionDeclarations"]
        if not isinstance(declarations, list):
            raise BadRequest(
                f"Invalid value at '{where}.function_declarations': expected a list of "
                "FunctionDeclaration objects."
            )
        for k, declaration in enumerate(declarations):
            _check_declaration(f"{where}.function_declarations[{k}]", declaration)


def _check_declaration(where: str, declaration: object) -> None:
    if not isinstance(declaration, dict):
        raise BadRequest(f"Invalid value at '{where}': expected a FunctionDeclaration object.")
    _check_name(where, declaration.get("name"))
    description = declaration.get("description")
    if description is not None and not isinstance(description, str):
        raise BadRequest(f"Invalid value at '{where}.description': expected a string.")
    parameters = declaration.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise BadRequest(f"Invalid value at '{where}.parameters': expected a Schema object.")
    schema = declaration.get("parametersJsonSchema")
    if schema is not None and not isinstance(schema, (dict, bool)):
        raise BadRequest(
            f"Invalid value at '{where}.parameters_json_schema': expected a JSON Schema."
        )


def _check_name(where: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise BadRequest(f"* GenerateContentRequest.{where}.name: Name cannot be empty.")
    if len(name) > _NAME_LIMIT or _NAME.fullmatch(name) is None:
        raise BadRequest(
            f"* GenerateContentRequest.{where}.name: Invalid function name. Must be a-z, "
            "A-Z, 0-9, or contain underscores, dots, colons and dashes, with a maximum "
            f"length of {_NAME_LIMIT}."
        )


def check_part(where: str, part: dict[str, Any]) -> None:
    """A part's text, function call and function response, where present."""
    text = part.get("text")
    if text is not None and not isinstance(text, str):
        raise BadRequest(f"Invalid value at '{where}.text': expected a string.")
    if "functionCall" in part:
        _check_call(f"{where}.function_call", part["functionCall"], "args")
    if "functionResponse" in part:
        _check_call(f"{where}.function_response", part["functionResponse"], "response")


def _check_call(where: str, call: object, payload: str) -> None:
    if not isinstance(call, dict):
        raise BadRequest(f"Invalid value at '{where}': expected an object.")
    _check_name(where, call.get("name"))
    identifier = call.get("id")
    if identifier is not None and not isinstance(identifier, str):
        raise BadRequest(f"Invalid value at '{where}.id': expected a string.")
    value = call.get(payload)
    if value is not None and not isinstance(value, dict):
        raise BadRequest(f"Invalid value at '{where}.{payload}': expected a JSON object.")
