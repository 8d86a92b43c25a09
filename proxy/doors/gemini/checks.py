"""Checks of the Gemini inputs ctxgate relies on or passes on (pure): the API key and the
shapes of `tools`, function declarations, and the function calls and responses in contents.

Each raises BadRequest (a 400 `INVALID_ARGUMENT` in Google's envelope) naming the field the
way Google does, so that a client's mistake never travels upstream nor turns into a 5xx.
"""

from __future__ import annotations

import re

from session.errors import BadRequest

# Google's keys are [A-Za-z0-9_-]; ctxgate's own keys may be any visible ASCII. A key is
# sent on in a header, where control characters, spaces and non-ASCII have no place.
_KEY_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))
_NAME_LIMIT = 128
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")

# The optional fields checked of each shape: wire key -> (Google's name, types, in words).
_Fields = dict[str, tuple[str, type | tuple[type, ...], str]]
_PART: _Fields = {"text": ("text", str, "a string")}
_DECLARATION: _Fields = {
    "description": ("description", str, "a string"),
    "parameters": ("parameters", dict, "a Schema object"),
    "parametersJsonSchema": ("parameters_json_schema", (dict, bool), "a JSON Schema"),
}
_CALL: _Fields = {"id": ("id", str, "a string"), "args": ("args", dict, "a JSON object")}
_RESPONSE: _Fields = {
    "id": ("id", str, "a string"),
    "response": ("response", dict, "a JSON object"),
}


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
    _check_fields(where, declaration, _DECLARATION)


def _check_name(where: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise BadRequest(f"* GenerateContentRequest.{where}.name: Name cannot be empty.")
    if len(name) > _NAME_LIMIT or _NAME.fullmatch(name) is None:
        raise BadRequest(
            f"* GenerateContentRequest.{where}.name: Invalid function name. Must be a-z, "
            "A-Z, 0-9, or contain underscores, dots, colons and dashes, with a maximum "
            f"length of {_NAME_LIMIT}."
        )


def check_part(where: str, part: dict[str, object]) -> None:
    """A part's text, function call and function response, where present."""
    _check_fields(where, part, _PART)
    if "functionCall" in part:
        _check_call(f"{where}.function_call", part["functionCall"], _CALL)
    if "functionResponse" in part:
        _check_call(f"{where}.function_response", part["functionResponse"], _RESPONSE)


def _check_call(where: str, call: object, fields: _Fields) -> None:
    if not isinstance(call, dict):
        raise BadRequest(f"Invalid value at '{where}': expected an object.")
    _check_name(where, call.get("name"))
    _check_fields(where, call, fields)


def _check_fields(where: str, value: dict[str, object], fields: _Fields) -> None:
    """Each optional field of `fields` that `value` holds is of its type."""
    for key, (name, kinds, expected) in fields.items():
        field = value.get(key)
        if field is not None and not isinstance(field, kinds):
            raise BadRequest(f"Invalid value at '{where}.{name}': expected {expected}.")
