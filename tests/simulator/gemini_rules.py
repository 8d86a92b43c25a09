"""What the Gemini API refuses in a `generateContent` body, in its words (400
INVALID_ARGUMENT), checked in the order the API reports them:

- no `contents`, or a content without parts;
- a declaration with both `parameters` and `parametersJsonSchema`;
- function calls and responses that do not pair: a `functionResponse` turn must come right
  after a `functionCall` turn, with as many responses as there were calls (ids, when both
  sides carry them, must match);
- thought signatures: one that the simulator did not issue for that part (altered, invented,
  moved) is "Corrupted"; in the current turn (everything after the latest user content that
  holds text), each model step's first call must carry one. Older turns and text parts are not
  checked for presence, as on the real API.
"""

from __future__ import annotations

from typing import Any

from .gemini_wire import Signer

MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {position}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
CORRUPTED_SIGNATURE = "Corrupted thought signature."
COUNT_MISMATCH = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
RESPONSE_PLACEMENT = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
ID_MISMATCH = "Function response id {id} does not match any function call id of the previous turn."
BOTH_SCHEMAS = (
    "parameters and parameters_json_schema cannot both be set in function declaration {name}."
)


def request_problems(body: Any, signer: Signer, signatures: bool = True) -> list[str]:
    """Every rule the body breaks, first the one the API would report."""
    if not isinstance(body, dict):
        return ["Invalid JSON payload received."]
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return ["* GenerateContentRequest.contents: contents is not specified"]
    problems: list[str] = []
    for index, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list) or not parts:
            problems.append(
                f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not be "
                "empty."
            )
    if problems:
        return problems
    problems += _schema_problems(body.get("tools"))
    problems += _pairing_problems(contents)
    if signatures:
        problems += signature_problems(contents, signer)
    return problems


def _schema_problems(tools: Any) -> list[str]:
    out = []
    for tool in tools or []:
        for declaration in (
            tool.get("functionDeclarations") if isinstance(tool, dict) else None
        ) or []:
            if isinstance(declaration, dict) and {"parameters", "parametersJsonSchema"} <= set(
                declaration
            ):
                out.append(BOTH_SCHEMAS.format(name=declaration.get("name")))
    return out


def _parts(content: Any, key: str) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p[key] for p in parts or [] if isinstance(p, dict) and isinstance(p.get(key), dict)]


def _pairing_problems(contents: list[Any]) -> list[str]:
    out: list[str] = []
    for index, content in enumerate(contents):
        responses = _parts(content, "functionResponse")
        if not responses:
            continue
        before = contents[index - 1] if index > 0 else None
        is_model = isinstance(before, dict) and before.get("role") == "model"
        calls = _parts(before, "functionCall") if is_model else []
        if not calls:
            out.append(RESPONSE_PLACEMENT)
            continue
        if len(calls) != len(responses):
            out.append(COUNT_MISMATCH)
            continue
        ids = {c.get("id") for c in calls if c.get("id")}
        for response in responses:
            if ids and response.get("id") and response["id"] not in ids:
                out.append(ID_MISMATCH.format(id=response["id"]))
    for index, content in enumerate(contents):
        calls = _parts(content, "functionCall")
        following = contents[index + 1] if index + 1 < len(contents) else None
        if calls and following is not None and not _parts(following, "functionResponse"):
            out.append(COUNT_MISMATCH)
    return out


def current_turn_start(contents: list[Any]) -> int:
    """The index after the latest user content holding text (not only responses)."""
    for index in range(len(contents) - 1, -1, -1):
        content = contents[index]
        if not isinstance(content, dict) or content.get("role") == "model":
            continue
        parts = content.get("parts") or []
        if any(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
            return index + 1
    return 0


def signature_problems(contents: list[Any], signer: Signer) -> list[str]:
    out: list[str] = []
    start = current_turn_start(contents)
    for index, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        for part in parts:
            if "thoughtSignature" in part and not signer.valid(part["thoughtSignature"], part):
                out.append(CORRUPTED_SIGNATURE)
        calls = [p for p in parts if isinstance(p.get("functionCall"), dict)]
        if index >= start and calls and "thoughtSignature" not in calls[0]:
            name = calls[0]["functionCall"].get("name")
            out.append(MISSING_SIGNATURE.format(name=name, position=index + 1))
    return out
