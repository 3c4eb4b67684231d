"""Compact JSON for the recorder's hot paths: orjson, with the standard library wherever orjson would be wrong.

orjson is several times faster than ``json``. It refuses integers beyond 64 bits (a custom resource may hold one)
and non-string keys, and then the standard library writes instead; and because orjson *reads* such an integer as
a float without complaint, bytes kept for :func:`decode` remember which library wrote them. Both libraries write
compact JSON that any reader parses to the same value (orjson writes non-ASCII characters as UTF-8 rather than
``\\u`` escapes).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_STDLIB = b"\x00"  # first byte of encode()'s bytes when the standard library wrote them
# NOTE: 19 digits in a row may be an integer beyond 64 bits (or one orjson reads as a float): such text, and any
# text orjson refuses (NaN, lone surrogates), is read by the standard library. The text is mapped to "0" per digit
# and " " per other byte and searched for 19 zeros: both are C loops over the bytes, where a regular expression
# ([0-9]{19}) tried a match at every offset (measured: 5.4 µs of a 500-byte watch line, which orjson reads in 3).
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))
_LONG_DIGITS = b"0" * 19


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``."""
    return encode(value)[0]


def dumpb(value: Any) -> bytes:
    """Compact JSON of ``value`` as UTF-8 bytes (for comparing two values' JSON form)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def encode(value: Any) -> tuple[str, bytes]:
    """(compact JSON text, bytes that :func:`decode` turns back into ``value`` exactly), both sized to their content:
    what callers keep by the ten thousand (the recorder's last state of every object)."""
    raw = encode_transient(value)
    if raw[:1] == _STDLIB:
        return raw[1:].decode(), raw
    # NOTE: orjson's bytes keep the whole buffer its writer grew to (measured: 8.1 KB held for 2.4 KB of JSON, on
    # average over 20,000 pods), so the bytes kept are a copy of exactly their length; the copy is a memcpy.
    return raw.decode(), bytes(memoryview(raw))


def encode_transient(value: Any) -> bytes:
    """The bytes :func:`encode` gives, without the text and not trimmed to their length: for bytes handed on at
    once (a message to a diff worker), not kept. JSON text never starts with the standard library's marker byte."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return _STDLIB + json.dumps(value, separators=(",", ":")).encode()


def loads(text: bytes) -> Any:
    """The value of JSON ``text`` exactly as ``json.loads`` reads it, read by orjson where that is the same."""
    if _LONG_DIGITS not in text.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def decode(raw: bytes) -> Any:
    """The value :func:`encode` was given."""
    if raw[:1] == _STDLIB:
        return json.loads(raw[1:])
    return orjson.loads(raw)


def copy(value: Any) -> Any:
    """A deep copy of a JSON value, made through its JSON form."""
    return decode(encode(value)[1])
