"""Deterministic, fast tokenization with a fixed vocabulary (see the package docstring for the contract)."""

from __future__ import annotations

import re
import zlib

VOCAB_SIZE = 131072
"""Token ids are in ``[0, VOCAB_SIZE)``."""

_TOKEN = re.compile(r"\s*+\S{1,8}|\s+")  # possessive: same tokens as \s*\S{1,8}, less backtracking
_MEMO_LIMIT = 1_000_000


def token_id(piece: str) -> int:
    """The id of one token piece: ``crc32(utf-8 bytes) mod VOCAB_SIZE``."""
    return zlib.crc32(piece.encode("utf-8")) % VOCAB_SIZE


class Tokenizer:
    """Text → token ids. Holds a bounded memo of piece → id, so create one per engine/router and reuse it."""

    def __init__(self) -> None:
        self._memo: dict[str, int] = {}

    def pieces(self, text: str) -> list[str]:
        """The token pieces of ``text``; ``"".join(pieces(t)) == t``."""
        return _TOKEN.findall(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; the same text always gives the same ids."""
        memo = self._memo
        pieces = _TOKEN.findall(text)
        try:
            return list(map(memo.__getitem__, pieces))  # fast path: every piece seen before
        except KeyError:
            pass
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
        for piece in pieces:
            if piece not in memo:
                memo[piece] = token_id(piece)
        return list(map(memo.__getitem__, pieces))

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` without computing ids."""
        return len(_TOKEN.findall(text))
