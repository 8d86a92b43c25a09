"""Recognising context overflow in real providers' error bodies, and not its look-alikes."""

from __future__ import annotations

import json

import pytest

from session.overflow import classify_overflow


def body(obj: object) -> bytes:
    return json.dumps(obj).encode()


# llama-cpp-python's server: its own mapping of the model's refusal (chat completions) ...
LLAMA_CPP_PYTHON = body(
    {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 2434 tokens (2410 in the messages, 24 in the completion). Please reduce "
            "the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
)
# ... and the model's own words where that mapping does not apply (FastAPI's `detail`, or
# wrapped as an internal error).
LLAMA_CPP_PYTHON_RAW = body({"detail": "Requested tokens (2434) exceed context window of 2048"})
LLAMA_CPP_PYTHON_RAW_500 = body(
    {
        "error": {
            "message": "Requested tokens (2434) exceed context window of 2048",
            "type": "internal_server_error",
        }
    }
)
# llama.cpp's llama-server states both figures as fields, whatever its message says.
LLAMA_SERVER_FIELDS = body(
    {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5120,
            "n_ctx": 4096,
        }
    }
)


OPENAI = body(
    {
        "error": {
            "message": "This model's maximum context length is 4097 tokens. However, "
            "your messages resulted in 4294 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
)
VLLM_OUTPUT = body(
    {
        "error": {
            "message": "'max_tokens' or 'max_completion_tokens' is too large: "
            "8000. This model's maximum context length is 4096 tokens and your request has "
            "2778 input tokens (8000 > 4096 - 2778). None",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
)
LLAMACPP = body(
    {
        "error": {
            "code": 400,
            "message": "request (13392 tokens) exceeds the available "
            "context size (8192 tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 13392,
            "n_ctx": 8192,
        }
    }
)
ANTHROPIC = body(
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 213462 tokens > 200000 maximum",
        },
    }
)
ANTHROPIC_413 = body(
    {
        "type": "error",
        "error": {
            "type": "request_too_large",
            "message": "Request exceeds the maximum allowed number of bytes.",
        },
    }
)
DEEPSEEK = body(
    {
        "error": {
            "message": "This model's maximum context length is 131072 tokens. "
            "However, you requested 131134 tokens (122942 in the messages, 8192 in the "
            "completion). Please reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }
)
TGI = body(
    {
        "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
        "Given: 4000 `inputs` tokens and 500 `max_new_tokens`",
        "error_type": "validation",
    }
)
GEMINI = body(
    [
        {
            "error": {
                "code": 400,
                "message": "The input token count (1196265) exceeds the "
                "maximum number of tokens allowed (1048575).",
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
)
OPENROUTER = body(
    {
        "error": {
            "message": "Provider returned error",
            "code": 400,
            "metadata": {
                "raw": "This endpoint's maximum context length is 8192 tokens. "
                "However, you requested about 9000 tokens"
            },
        }
    }
)


@pytest.mark.parametrize(
    ("status", "raw", "kind", "window", "prompt"),
    [
        (400, OPENAI, "prompt", 4097, 4294),
        (400, VLLM_OUTPUT, "prompt_plus_output", 4096, 2778),
        (400, LLAMACPP, "prompt", 8192, 13392),
        (400, ANTHROPIC, "prompt", 200000, 213462),
        (413, ANTHROPIC_413, "bytes", None, None),
        (413, b"", "bytes", None, None),  # a gateway's bare 413
        (
            400,
            body(
                {
                    "error": {
                        "message": "Your input exceeds the context window of this model. "
                        "Please adjust your input and try again.",
                        "type": "invalid_request_error",
                        "param": "input",
                        "code": "context_length_exceeded",
                    }
                }
            ),
            "prompt",
            None,
            None,
        ),
        (400, DEEPSEEK, "prompt", 131072, 122942),
        (422, TGI, "prompt_plus_output", 4096, 4000),
        (400, GEMINI, "prompt", 1048575, 1196265),
        (400, OPENROUTER, "prompt", 8192, None),
        (400, LLAMA_CPP_PYTHON, "prompt", 2048, 2410),
        (400, LLAMA_CPP_PYTHON_RAW, "prompt", 2048, 2434),
        (500, LLAMA_CPP_PYTHON_RAW_500, "prompt", 2048, 2434),
        (400, LLAMA_SERVER_FIELDS, "prompt", 4096, 5120),
    ],
)
def test_overflow_bodies(
    status: int, raw: bytes, kind: str, window: int | None, prompt: int | None
) -> None:
    found = classify_overflow(status, raw)
    assert found is not None
    assert (found.kind, found.window, found.prompt_tokens) == (kind, window, prompt)


@pytest.mark.parametrize(
    ("status", "raw"),
    [
        (
            429,
            body(
                {
                    "error": {
                        "message": "Request too large for gpt-4o in organization org-x on "
                        "tokens per min (TPM): Limit 30000, Requested 61337.",
                        "type": "tokens",
                        "code": "rate_limit_exceeded",
                    }
                }
            ),
        ),
        (
            413,
            body(
                {
                    "error": {
                        "message": "Request too large for model `llama-3.1-70b` on tokens "
                        "per minute (TPM): Limit 6000, Requested 14368",
                        "type": "tokens",
                        "code": "rate_limit_exceeded",
                    }
                }
            ),
        ),
        (
            400,
            body(
                {
                    "error": {
                        "message": "Unsupported parameter: 'max_tokens' is not supported "
                        "with this model. Use 'max_completion_tokens' instead.",
                        "type": "invalid_request_error",
                        "param": "max_tokens",
                        "code": "unsupported_parameter",
                    }
                }
            ),
        ),
        (
            400,
            body(
                {
                    "error": {
                        "message": "Invalid 'user': string too long. Expected a string with "
                        "maximum length 64",
                        "type": "invalid_request_error",
                        "param": "user",
                        "code": "string_above_max_length",
                    }
                }
            ),
        ),
        (400, body({"error": {"message": "Invalid value for 'temperature'", "type": "x"}})),
        (500, body({"error": {"message": "The server had an error", "type": "server_error"}})),
        (200, OPENAI),
        (400, b"not json at all"),
    ],
)
def test_look_alikes_are_not_overflow(status: int, raw: bytes) -> None:
    assert classify_overflow(status, raw) is None
