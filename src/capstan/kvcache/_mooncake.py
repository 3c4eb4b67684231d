"""Fixed text for Mooncake-style ``hash_ids`` (512-token blocks), so replayed requests share prefixes as traced."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from capstan.kvcache._hashes import DEFAULT_BLOCK_SIZE, chain_hashes, root_hash
from capstan.kvcache._tokenizer import token_id

MOONCAKE_BLOCK_TOKENS = 512
_WORDS = 4096
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_U64 = np.uint64


def _splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64 finaliser, vectorised (uint64 arithmetic wraps, as intended)."""
    with np.errstate(over="ignore"):
        z = x + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def _word_list() -> list[str]:
    """4096 distinct five-letter words; with a leading space each is exactly one token."""
    mixed = _splitmix64(np.arange(_WORDS, dtype=np.uint64) + _U64(0xC0FFEE)).tolist()
    words: list[str] = []
    seen: set[str] = set()
    for i, value in enumerate(mixed):
        v = int(value)
        word = ""
        for _ in range(5):
            v, r = divmod(v, 26)
            word += _LETTERS[r]
        if (
            word in seen
        ):  # NOTE: keeps the list collision-free; the suffix keeps it a single token (<= 8 chars)
            word = word + str(i % 10)
        seen.add(word)
        words.append(word)
    return words


class MooncakeText:
    """Maps a trace's ``hash_ids`` to fixed text, token ids and 16-token block hashes.

    Each hash id ``h`` stands for 512 tokens: words ``WORDS[splitmix64(h * 512 + i) mod 4096]`` for ``i < 512``,
    each written with a leading space. A request of ``input_length`` tokens is the concatenation of its ids'
    chunks, cut after ``input_length`` tokens. Holds caches, so make one per run.
    """

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> None:
        if MOONCAKE_BLOCK_TOKENS % block_size:
            raise ValueError(f"block_size {block_size} must divide {MOONCAKE_BLOCK_TOKENS}")
        self.block_size = block_size
        self.seed = seed
        words = _word_list()
        self._spaced = np.array([" " + w for w in words], dtype=object)
        self._word_ids = np.array([token_id(" " + w) for w in words], dtype=np.int64)
        self._hash_cache: dict[tuple[int, int], array[int]] = {}

    def _indices(self, hash_id: int) -> npt.NDArray[np.int64]:
        base = np.arange(MOONCAKE_BLOCK_TOKENS, dtype=np.uint64) + _U64(hash_id * MOONCAKE_BLOCK_TOKENS)
        return (_splitmix64(base) % _U64(_WORDS)).astype(np.int64)

    def chunk_text(self, hash_id: int, tokens: int = MOONCAKE_BLOCK_TOKENS) -> str:
        """The first ``tokens`` tokens of the chunk of ``hash_id`` as text."""
        return "".join(self._spaced[self._indices(hash_id)[:tokens]].tolist())

    def chunk_token_ids(self, hash_id: int, tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[int]:
        """The first ``tokens`` token ids of the chunk of ``hash_id``."""
        ids: list[int] = self._word_ids[self._indices(hash_id)[:tokens]].tolist()
        return ids

    def _spans(self, hash_ids: Sequence[int], input_length: int) -> list[tuple[int, int]]:
        if input_length < 0:
            raise ValueError(f"input_length must be >= 0, got {input_length}")
        if input_length > len(hash_ids) * MOONCAKE_BLOCK_TOKENS:
            raise ValueError(
                f"input_length {input_length} needs {-(-input_length // MOONCAKE_BLOCK_TOKENS)} hash ids "
                f"of {MOONCAKE_BLOCK_TOKENS} tokens, got {len(hash_ids)}"
            )
        spans: list[tuple[int, int]] = []
        left = input_length
        for h in hash_ids:
            if left <= 0:
                break
            take = min(left, MOONCAKE_BLOCK_TOKENS)
            spans.append((int(h), take))
            left -= take
        return spans

    def prompt(self, hash_ids: Sequence[int], input_length: int) -> str:
        """The prompt text of a trace request; it encodes to exactly ``input_length`` tokens."""
        return "".join(self.chunk_text(h, n) for h, n in self._spans(hash_ids, input_length))

    def token_ids(self, hash_ids: Sequence[int], input_length: int) -> list[int]:
        """``Tokenizer().encode(self.prompt(hash_ids, input_length))`` without building the text."""
        out: list[int] = []
        for h, n in self._spans(hash_ids, input_length):
            out.extend(self.chunk_token_ids(h, n))
        return out

    def block_hashes(self, hash_ids: Sequence[int], input_length: int) -> list[int]:
        """``block_hashes(self.token_ids(...), block_size, seed=seed)``, cached per (parent, hash id)."""
        per_chunk = MOONCAKE_BLOCK_TOKENS // self.block_size
        out: list[int] = []
        parent = root_hash(self.seed)
        for h, n in self._spans(hash_ids, input_length):
            key = (parent, h)
            chain = self._hash_cache.get(key)
            if chain is None:
                data = self._word_ids[self._indices(h)].astype("<u4").tobytes()
                chain = array("q", chain_hashes(parent, data, self.block_size))
                self._hash_cache[key] = chain
            full = min(per_chunk, n // self.block_size)
            out.extend(chain[:full])
            parent = chain[-1]
        return out
