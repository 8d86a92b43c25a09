"""Reading a Gemini `generateContent` body (pure).

The model and whether the answer streams come from the path, not the body. Only what ctxgate
acts on is checked (`contents`, `systemInstruction`, `tools`, `generationConfig.
maxOutputTokens`); every other field stays in the body for the upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compression import Message, ToolSchema
from proxy.doors.bodies import json_object
from proxy.doors.gemini.checks import check_part, check_tools
from proxy.doors.gemini.contents import FunctionDeclaration, System, Tool
from proxy.doors.gemini.parts import to_chat
from session.errors import BadRequest

IMAGE_KEYS = (b'"inlineData"', b'"fileData"')


@dataclass(frozen=True, slots=True)
class GeminiBody:
    body: dict[str, Any]
    messages: list[Message]
    max_tokens: int | None
    tools: list[ToolSchema] | None
    image_marks: int


def read_body(raw: bytes) -> GeminiBody:
    """The parts of a body ctxgate uses; raises BadRequest (in Google's words) on a
    malformed one."""
    body = json_object(raw)
    contents = body.get("contents")
    if contents is None:
        raise BadRequest("* GenerateContentRequest.contents: contents is not specified")
    if not isinstance(contents, list):
        raise BadRequest("Invalid value at 'contents': expected a list of Content objects.")
    for index, content in enumerate(contents):
        _check_content(f"contents[{index}]", content)
    system: System | None = body.get("systemInstruction")
    if isinstance(system, dict) and "parts" in system:
        _check_parts("system_instruction", system.get("parts"))
    elif system is not None and not isinstance(system, str):
        raise BadRequest("Invalid value at 'system_instruction': expected a Content object.")
    tools: list[Tool] | None = body.get("tools")
    check_tools(tools)
    return GeminiBody(
        body=body,
        messages=to_chat(system, contents),
        max_tokens=_max_tokens(body.get("generationConfig")),
        tools=tools_as_chat(tools),
        image_marks=sum(raw.count(key) for key in IMAGE_KEYS),
    )


def _check_content(where: str, content: object) -> None:
    if not isinstance(content, dict):
        raise BadRequest(f"Invalid value at '{where}': expected a Content object.")
    role = content.get("role")
    if role is not None and role not in ("user", "model", "function"):
        raise BadRequest(
            f"Please use a valid role: user, model. (got {role!r} at {where}.role)",
        )
    _check_parts(where, content.get("parts"))


def _check_parts(where: str, parts: object) -> None:
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise BadRequest(
            f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty."
        )
    for k, part in enumerate(parts):
        check_part(f"{where}.parts[{k}]", part)


def _max_tokens(config: object) -> int | None:
    if config is not None and not isinstance(config, dict):
        raise BadRequest("Invalid value at 'generation_config': expected a GenerationConfig.")
    value = config.get("maxOutputTokens") if isinstance(config, dict) else None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(
            "Invalid value at 'generation_config.max_output_tokens': "
            f"expected a positive integer, got {value!r}."
        )
    return value


def tools_as_chat(tools: list[Tool] | None) -> list[ToolSchema] | None:
    """Gemini tool declarations in chat shape, for counting their tokens (a built-in tool
    such as `googleSearch` counts as its JSON)."""
    if not isinstance(tools, list):
        return None
    out: list[ToolSchema] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        declarations = tool.get("functionDeclarations")
        if not isinstance(declarations, list):
            name = next(iter(tool), "tool")
            out.append({"type": "function", "function": {"name": str(name), "parameters": tool}})
            continue
        out.extend(_as_chat(d) for d in declarations if isinstance(d, dict))
    return out


def _as_chat(declaration: FunctionDeclaration) -> ToolSchema:
    schema = declaration.get("parametersJsonSchema", declaration.get("parameters", {}))
    function = {
        "name": str(declaration.get("name", "")),
        "description": str(declaration.get("description", "")),
        "parameters": schema,
    }
    return {"type": "function", "function": function}
