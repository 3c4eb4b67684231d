"""The cached prompt hasher (the router's) gives exactly the shared contract's tokens and hashes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.kvcache import PromptHasher, Tokenizer, block_hashes, prompt_text

pytestmark = pytest.mark.unit

HASHER = PromptHasher()

content = st.text(alphabet=st.sampled_from(list("ab c\n\t<>|{}é")), max_size=80)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
        optional={
            "content": content
            | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": content}), max_size=3),
            "tool_calls": st.lists(st.fixed_dictionaries({"name": content}), max_size=2),
        },
    ),
    min_size=1,
    max_size=6,
)


def reference(body: dict[str, Any], salt: str | None = None) -> tuple[list[int], list[int]]:
    ids = Tokenizer().encode(prompt_text(body))
    return ids, block_hashes(ids, 16, salt=salt)


@settings(max_examples=200, deadline=None)
@given(msgs=messages, salt=st.none() | st.text(max_size=4))
def test_chat_prompts_match_the_contract(msgs: list[dict[str, Any]], salt: str | None) -> None:
    body = {"model": "m", "messages": msgs}
    ids = HASHER.token_ids(body)
    ref_ids, ref_hashes = reference(body, salt)
    assert ids == ref_ids
    assert HASHER.block_hashes(ids, salt) == ref_hashes
    # the second time comes from the caches and is still identical
    assert HASHER.block_hashes(HASHER.token_ids(body), salt) == ref_hashes


def test_completions_and_token_prompts_match_the_contract() -> None:
    text = " ".join(f"w{i}" for i in range(100))
    assert HASHER.token_ids({"prompt": text}) == Tokenizer().encode(text)
    assert HASHER.token_ids({"prompt": [1, 2, 3]}) == [1, 2, 3]
    ids = list(range(70))
    assert HASHER.block_hashes(ids) == block_hashes(ids, 16)
    assert HASHER.block_hashes(ids[:15]) == []


def test_caches_are_bounded() -> None:
    h = PromptHasher(max_pieces=2, max_blocks=3)
    for i in range(5):
        h.token_ids({"messages": [{"role": "user", "content": f"m{i}"}]})
        h.block_hashes(list(range(i, i + 64)))
    assert len(h._pieces) <= 2 and len(h._blocks) <= 4


def test_the_pieces_cache_is_bounded_by_the_tokens_it_holds() -> None:
    h = PromptHasher(max_piece_tokens=1000)
    for i in range(50):  # 50 messages of about 200 tokens each: a count of 100,000 pieces would keep them all
        body = {"messages": [{"role": "user", "content": " ".join(f"m{i}w{j}" for j in range(200))}]}
        assert h.token_ids(body) == HASHER.token_ids(body)  # same ids, cached or not
        assert sum(len(ids) for ids in h._pieces.values()) <= 1000
    held = set(h._pieces)
    huge = {"messages": [{"role": "user", "content": "x " * 2000}]}  # over 1/4 of the budget: not cached
    assert h.token_ids(huge) == HASHER.token_ids(huge)
    assert set(h._pieces) <= held
