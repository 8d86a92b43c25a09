"""Every corpus conversation, compressed in a window small enough to force it."""

from __future__ import annotations

import pytest

from compression.assembly.invariants import check_invariants
from compression.assembly.planning import newest_user
from compression.compressor import Compressor
from compression.engine import TokenCounter
from compression.summary.handoff import user_text
from tests.compression.builders import CORPUS, context, corpus_conversations, text_of
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

pytestmark = pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus is not present")


def production_counter() -> TokenCounter:
    try:
        from compression.counting.tokens import counter_for_model
    except ImportError:
        return CharCounter()
    return counter_for_model("gpt-4o")


async def compress_corpus(counter: TokenCounter) -> tuple[int, int, dict[str, int]]:
    engine = Compressor()
    before = after = 0
    outcomes: dict[str, int] = {}
    for name, messages in corpus_conversations():
        tokens = counter.count_messages(messages)
        window = max(2_048, int(tokens * 0.9))
        ctx = context(
            summarize=ScriptedSummarizer(),
            counter=counter,  # type: ignore[arg-type]
            context_length=window,
            max_output_tokens=256,
            force=True,
            now=1.0,
        )
        out = await engine.compress(messages, ctx)
        outcomes[out.outcome] = outcomes.get(out.outcome, 0) + 1
        check_invariants(out.messages)
        assert out.messages[0] is messages[0], name
        newest = newest_user(messages)
        if newest is not None:
            assert user_text(messages[newest]) in "\n".join(text_of(m) for m in out.messages)
        assert counter.count_messages(out.messages) <= tokens, name
        before += tokens
        after += counter.count_messages(out.messages)
    return before, after, outcomes


@pytest.mark.parametrize("make_counter", [CharCounter, production_counter])
async def test_the_whole_corpus_compresses_validly(make_counter: type[TokenCounter]) -> None:
    before, after, outcomes = await compress_corpus(make_counter())
    # 224 public conversations and the 2 recorded real-agent transcripts (OpenCode, aider)
    assert sum(outcomes.values()) == 226
    assert outcomes.get("compressed", 0) >= 200
    assert after < before * 0.75


def test_corpus_reused_ids_are_present() -> None:
    reused = 0
    for _, messages in corpus_conversations():
        ids = [c["id"] for m in messages for c in m.get("tool_calls") or []]
        reused += len(ids) != len(set(ids))
    assert reused >= 40
