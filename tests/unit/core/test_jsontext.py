"""Fast JSON on the recorder's hot paths: exact round trips, including what orjson cannot write."""

from __future__ import annotations

import json

import pytest

from capstan import jsontext
from capstan.record import make_patch

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [True, None, 1.5, "é ☃"], "c": {"d": -(2**63)}},
        {
            "big": 2**70,
            "neg": -(2**80),
            "nested": [{"x": 2**64}],
        },  # beyond 64 bits: the standard library writes
        {1: "non-string key"},
    ],
)
def test_encode_then_decode_gives_the_value_back_exactly(value: object) -> None:
    text, raw = jsontext.encode(value)
    expected = json.loads(json.dumps(value))  # what a JSON round trip means (int keys become strings)
    assert json.loads(text) == expected  # any JSON reader gets the value from the text
    got = jsontext.decode(raw)
    assert got == expected and jsontext.copy(value) == expected
    assert jsontext.decode(jsontext.encode_transient(value)) == expected
    if isinstance(value, dict) and "big" in value:
        assert got["big"] == 2**70 and isinstance(got["big"], int)  # not a float, as orjson would read it


def test_json_equality_keeps_one_true_and_one_point_zero_apart() -> None:
    before = {"spec": {"replicas": 1, "paused": True, "weight": 1.0}}
    after = {"spec": {"replicas": True, "paused": 1, "weight": 1}}
    assert before == after  # Python says equal; JSON does not
    ops = make_patch(before, after)
    assert {op["path"] for op in ops} == {"/spec/replicas", "/spec/paused", "/spec/weight"}


def test_dumps_is_compact() -> None:
    assert jsontext.dumps({"a": [1, 2], "b": "c"}) == '{"a":[1,2],"b":"c"}'
    assert jsontext.dumps({"big": 2**70}) == '{"big":1180591620717411303424}'


def test_the_bytes_kept_hold_no_more_memory_than_their_length() -> None:
    """orjson's own bytes keep the buffer its writer grew to (32 KB held for the 2 KB of JSON here): the recorder
    keeps one such value per live object, so encode() hands back bytes of exactly their size."""
    import tracemalloc

    value = {
        "metadata": {"name": "web-0", "labels": {f"k{i}": "v" * 20 for i in range(60)}},
        "spec": "x" * 300,
    }
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        raw = jsontext.encode(value)[1]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(raw) > 2000 and held < len(raw) + 200, (len(raw), held)


@pytest.mark.parametrize(
    "text",
    [
        b'{"n":123456789012345678}',  # 18 digits: orjson reads it
        b'{"n":1234567890123456789}',  # 19 digits: still a 64-bit integer
        b'{"n":12345678901234567890}',  # 20 digits: beyond 64 bits, orjson would read a float
        b'{"n":-99999999999999999999999,"m":[1.5e300,"x"]}',
        b'{"s":"1234567890123456789012","f":12345678901234567.125}',  # digits in a string and around a point
        b'{"rv":"12345", "x": [0, 10, 200]}',
        '{"é":"☃ 1234567890123456789012345"}'.encode(),
    ],
)
def test_loads_reads_every_number_as_json_loads_does(text: bytes) -> None:
    got, expected = jsontext.loads(text), json.loads(text)
    assert got == expected
    assert json.dumps(got) == json.dumps(expected)  # same types too: an int stays an int, not a float


def test_loads_reads_an_integer_beyond_64_bits_exactly() -> None:
    got = jsontext.loads(b'{"a":[' + str(2**70).encode() + b"]}")
    assert got["a"][0] == 2**70 and isinstance(got["a"][0], int)
