"""The block-hash contract: determinism, concatenation, chaining, and the Mooncake shortcut equalling the text path."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.kvcache import (
    MooncakeText,
    Tokenizer,
    block_hashes,
    hash_block,
    prompt_text,
    prompt_token_ids,
    render_chat,
    root_hash,
)

pytestmark = pytest.mark.unit


def test_same_text_same_ids_across_processes() -> None:
    text = "The quick brown fox, jumps over  the lazy dog!\nsupercalifragilistic"
    ids = Tokenizer().encode(text)
    code = f"from capstan.kvcache import Tokenizer; print(Tokenizer().encode({text!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == str(ids)
    assert len(ids) == len(Tokenizer().pieces(text))
    assert "".join(Tokenizer().pieces(text)) == text


@given(st.text(min_size=1), st.text(min_size=1))
@settings(max_examples=200, deadline=None)
def test_space_led_texts_concatenate_tokenwise(a: str, b: str) -> None:
    a = " " + a.strip() + "x"
    b = " " + b
    tok = Tokenizer()
    assert tok.encode(a + b) == tok.encode(a) + tok.encode(b)


def test_block_hashes_only_full_blocks_and_chained() -> None:
    ids = list(range(40))
    hs = block_hashes(ids, 16)
    assert len(hs) == 2
    assert hs[0] == hash_block(root_hash(0), ids[:16])
    assert hs[1] == hash_block(hs[0], ids[16:32])
    # A different first block changes every later hash (chaining), the same prefix keeps them.
    other = [999, *ids[1:]]
    assert block_hashes(other, 16)[1] != hs[1]
    assert block_hashes(ids[:32] + [7] * 16, 16)[:2] == hs
    # Seed and salt act on the root / first block only.
    assert block_hashes(ids, 16, seed=1)[0] != hs[0]
    assert block_hashes(ids, 16, salt="tenant-a")[0] != hs[0]
    assert block_hashes(ids[16:], 16, parent=hs[0])[0] == hs[1]
    assert all(0 <= h < 2**63 for h in hs)


def test_block_hash_pinned_value() -> None:
    # Golden value: changing the contract must be a deliberate act (the router and engine both depend on it).
    assert block_hashes(list(range(16)))[0] == 7370215883968914808


def test_chat_template_is_prefix_stable() -> None:
    turn1 = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi there"}]
    turn2 = [*turn1, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    tok = Tokenizer()
    a, b = tok.encode(render_chat(turn1)), tok.encode(render_chat(turn2))
    assert b[: len(a)] == a
    assert prompt_text({"messages": turn1}) == render_chat(turn1)
    assert prompt_text({"prompt": ["ab", "cd"]}) == "abcd"
    assert prompt_token_ids({"prompt": [1, 2, 3]}) == [1, 2, 3]
    assert prompt_token_ids({"prompt": "x"}) is None
    with pytest.raises(ValueError, match="neither"):
        prompt_text({"model": "m"})
    with pytest.raises(ValueError, match="role"):
        render_chat([{"content": "x"}])


def test_mooncake_text_tokens_and_hashes_agree() -> None:
    mt = MooncakeText()
    tok = Tokenizer()
    text = mt.prompt([0, 1, 2], 1100)
    ids = tok.encode(text)
    assert len(ids) == 1100
    assert ids == mt.token_ids([0, 1, 2], 1100)
    assert mt.block_hashes([0, 1, 2], 1100) == block_hashes(ids)
    # Requests sharing their first hash id share exactly 512 tokens = 32 blocks of 16.
    a, b = mt.block_hashes([0, 1], 1024), mt.block_hashes([0, 5], 1024)
    assert a[:32] == b[:32]
    assert a[32] != b[32]
    with pytest.raises(ValueError, match="needs 3 hash ids"):
        mt.prompt([0, 1], 1025)


def test_kv_event_batch_layout_matches_vllm() -> None:
    import msgpack

    from capstan.kvcache import (
        AllBlocksCleared,
        BlockRemoved,
        BlockStored,
        KVEvent,
        decode_kv_batch,
        encode_kv_batch,
        encode_seq,
        kv_topic,
    )

    events: list[KVEvent] = [
        BlockStored([1, 2], None, list(range(32)), 16),
        BlockRemoved([1]),
        AllBlocksCleared(),
    ]
    payload = encode_kv_batch(events, 12.5)
    assert msgpack.unpackb(payload) == [
        12.5,
        [
            ["BlockStored", [1, 2], None, list(range(32)), 16, None, "GPU", None],
            ["BlockRemoved", [1], "GPU"],
            ["AllBlocksCleared"],
        ],
    ]
    assert decode_kv_batch(payload) == (12.5, events)
    # vLLM's newer trailing fields (lora_name, extra_keys, ...) and a data_parallel_rank are accepted.
    newer = msgpack.packb([1.0, [["BlockStored", [3], 2, [0] * 16, 16, None, "GPU", "sql", [None], 0]], 0])
    assert decode_kv_batch(newer) == (1.0, [BlockStored([3], 2, [0] * 16, 16, lora_name="sql")])
    # vLLM's byte digests read as the int it sends for them (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): the low 64 bits
    digest = bytes(range(32))
    as_bytes = msgpack.packb([1.0, [["BlockRemoved", [digest], "GPU"]]], use_bin_type=True)
    assert decode_kv_batch(as_bytes)[1] == [BlockRemoved([int.from_bytes(digest[-8:], "big")])]
    assert encode_seq(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert kv_topic("127.0.0.1", 8000, "m") == "kv@127.0.0.1:8000@m"
    with pytest.raises(ValueError, match="unknown"):
        decode_kv_batch(msgpack.packb([1.0, [["Nope"]]]))


def test_tools_render_first_and_keep_turns_prefix_stable() -> None:
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    turn1: dict[str, Any] = {"messages": [{"role": "user", "content": "list files"}], "tools": tools}
    turn2 = {"messages": [*turn1["messages"], {"role": "assistant", "content": "ok"}], "tools": tools}
    t1, t2 = prompt_text(turn1), prompt_text(turn2)
    assert t1.startswith(' <|tools|> [{"function":{"name":"ls"')
    tok = Tokenizer()
    a, b = tok.encode(t1), tok.encode(t2)
    assert b[: len(a)] == a
    assert block_hashes(tok.encode(prompt_text({"messages": turn1["messages"]}) * 4)) != block_hashes(a * 4)
    with pytest.raises(ValueError, match="'tools'"):
        prompt_text({"messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}})
