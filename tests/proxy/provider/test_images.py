"""Images a provider refuses as too large are shrunk and sent once more, before the first byte."""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Iterator

import openai
import pytest
from PIL import Image

from proxy.provider.images import DEFAULT_BYTES, ImageLimit, image_limit, shrink_images
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator

MODEL = "vision-model"


def noise_png(side: int) -> bytes:
    """A PNG that compresses badly (random pixels), `side` pixels square."""
    rng = random.Random(side)
    image = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(raw: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(raw).decode("ascii")


def body(payload: object) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.parametrize(
    ("status", "raw", "expected"),
    [
        (
            400,
            body(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "messages.0.content.1.image.source.base64.data: image exceeds "
                        "5 MB maximum: 7340032 bytes > 5242880 bytes",
                    },
                }
            ),
            ImageLimit(DEFAULT_BYTES, 8000),
        ),
        (
            400,
            body(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "messages.0.content.0.image.source.base64: image dimensions "
                        "exceed max allowed size: 2000 pixels",
                    },
                }
            ),
            ImageLimit(DEFAULT_BYTES, 2000),
        ),
        (
            400,
            body(
                {
                    "error": {
                        "message": "Invalid 'messages[1].content[0].image_url'. You uploaded an "
                        "image that is too large (2400000 bytes). The max size is 2MB.",
                        "type": "invalid_request_error",
                    }
                }
            ),
            ImageLimit(1_900_000, 8000),
        ),
    ],
)
def test_image_refusals_state_their_limit(status: int, raw: bytes, expected: ImageLimit) -> None:
    assert image_limit(status, raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        body({"error": {"message": "This model's maximum context length is 8192 tokens."}}),
        body({"error": {"message": "Invalid image URL: could not fetch it."}}),
        body({"error": {"message": "prompt is too long: 9000 tokens > 8192 maximum (image)"}}),
    ],
)
def test_other_errors_are_not_image_refusals(raw: bytes) -> None:
    assert image_limit(400, raw) is None


def test_only_inline_images_over_the_limit_are_shrunk() -> None:
    big, small = noise_png(1200), noise_png(64)
    view = [
        {"role": "system", "content": "look"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "these"},
                {"type": "image_url", "image_url": {"url": data_url(big), "detail": "high"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "image_url", "image_url": {"url": data_url(small)}},
            ],
        },
    ]
    limit = ImageLimit(max_bytes=300_000, max_pixels=800)
    shrunk = shrink_images(view, limit)  # type: ignore[arg-type]
    assert shrunk is not None
    assert shrunk[0] is view[0]
    parts = shrunk[1]["content"]
    assert isinstance(parts, list)
    assert parts[0] == view[1]["content"][0]  # type: ignore[index]
    assert parts[2] == view[1]["content"][2] and parts[3] == view[1]["content"][3]  # type: ignore[index]
    url = parts[1]["image_url"]["url"]
    assert parts[1]["image_url"]["detail"] == "high"
    assert url.startswith("data:image/jpeg;base64,")
    raw = base64.b64decode(url.split(",", 1)[1])
    assert len(raw) <= limit.max_bytes
    assert max(Image.open(io.BytesIO(raw)).size) <= limit.max_pixels
    assert shrink_images(shrunk, limit) is None  # nothing left over the limit


@pytest.fixture
def image_sim(request: pytest.FixtureRequest) -> Iterator[Simulator]:
    dialect, limits = request.param
    spec = ModelSpec(window=100_000, dialect=dialect, **limits)
    with Simulator(models={MODEL: spec}) as sim:
        yield sim


@pytest.mark.parametrize(
    "image_sim",
    [("openai", {"image_max_bytes": 250_000}), ("anthropic", {"image_max_px": 700})],
    indirect=True,
    ids=["openai-bytes", "anthropic-pixels"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_refused_image_is_shrunk_and_the_request_answered(
    image_sim: Simulator, db_path: str, stream: bool
) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": data_url(noise_png(900))}},
            ],
        }
    ]
    with ProxyServer(settings_for(image_sim.base_url, db_path)) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-x", max_retries=0)
        if stream:
            chunks = list(
                client.chat.completions.create(model=MODEL, messages=messages, stream=True)  # type: ignore[arg-type]
            )
            assert any(c.choices and c.choices[0].delta.content for c in chunks)
        else:
            answer = client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            assert answer.choices[0].message.content
    refused, retried = image_sim.chat_requests
    assert refused.outcome == "image_rejected"
    assert retried.outcome != "image_rejected" and retried.status == 200
    sent = retried.body["messages"][0]["content"][1]["image_url"]["url"]
    assert len(sent) < len(messages[0]["content"][1]["image_url"]["url"])  # type: ignore[index]


def test_an_image_still_refused_after_shrinking_reaches_the_client(db_path: str) -> None:
    # No image is ever small enough: ctxgate shrinks to 512 pixels at the least.
    spec = ModelSpec(window=100_000, image_max_px=300)
    with Simulator(models={MODEL: spec}) as sim:
        with ProxyServer(settings_for(sim.base_url, db_path)) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-x", max_retries=0)
            part = {"type": "image_url", "image_url": {"url": data_url(noise_png(600))}}
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": [part]}],  # type: ignore[list-item]
                )
    assert "maximum dimension" in str(caught.value)
    assert len(sim.chat_requests) == 2  # one retry, never a second
