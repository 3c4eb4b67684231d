"""Hypothesis strategies for OpenAI request bodies over the whole input space, shared by the fuzz tests of the
gateway and of the engine simulator.

A body is drawn as a Python value and encoded by :func:`encode`: any JSON (objects keyed by every field the schema
knows and by random keys), integers of any size and sign, floats including NaN and ±inf (encoded as the
``NaN``/``Infinity`` literals Python's encoder writes), numbers that overflow a double (``1e999``), strings with
lone surrogates (escaped, as JSON allows them to be written), huge strings, and nesting thousands of levels deep
(spliced into the text, since Python's encoder cannot write it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from capstan.openai_api import ChatBody, CompletionsBody

FIELDS = sorted(
    ChatBody.__required_keys__
    | ChatBody.__optional_keys__
    | CompletionsBody.__required_keys__
    | CompletionsBody.__optional_keys__
)


@dataclass(frozen=True)
class Raw:
    """JSON text spliced in as is (a number no encoder writes, or nesting too deep to encode)."""

    text: str


def deep(depth: int, opener: str) -> Raw:
    """Arrays (``[[[…]]]``) or objects (``{"a":{"a":…1}}``) nested ``depth`` levels."""
    if opener == "{":
        return Raw('{"a":' * depth + "1" + "}" * depth)
    return Raw("[" * depth + "]" * depth)


def encode(value: Any) -> bytes:
    """``value`` as JSON bytes, :class:`Raw` parts spliced in."""
    raws: list[str] = []

    def default(obj: object) -> str:
        if isinstance(obj, Raw):
            raws.append(obj.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(obj).__name__)

    text = json.dumps(value, default=default)  # NaN and ±inf become the NaN/Infinity literals
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw)
    return text.encode("utf-8", "surrogatepass")


any_ints = (
    st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([0, -1, 1, 131071, 131072, 2**31, 2**32 - 1, 2**32, 2**63, 2**64, -(2**63) - 1])
)
any_floats = st.floats() | st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1e308])
any_text = st.text(st.characters(exclude_categories=()), max_size=40)  # lone surrogates included
huge_text = st.builds(lambda c, n: c * n, st.characters(exclude_categories=()), st.integers(1000, 200_000))
raw_numbers = st.sampled_from(["1e999", "-1e999", "1e-999", "123456789012345678901234567890e12345"]).map(Raw)
deep_values = st.builds(deep, st.integers(1, 6000), st.sampled_from(["[", "{"]))

scalars = st.none() | st.booleans() | any_ints | any_floats | any_text | raw_numbers
json_values = st.recursive(
    scalars | deep_values | huge_text,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=16,
)

content_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url"]) | json_values},
    optional={"text": st.text(max_size=40) | json_values},
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool"]) | json_values},
    optional={
        "content": st.text(max_size=80) | st.lists(content_part, max_size=3) | json_values,
        "name": st.text(max_size=8) | json_values,
        "tool_calls": json_values,
    },
)
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["m", "other"]),
    "messages": st.lists(message, max_size=3),
    "prompt": st.text(max_size=80)
    | st.lists(st.text(max_size=10), max_size=4)
    | st.lists(st.integers(0, 5000), max_size=40)
    | st.lists(any_ints, max_size=40),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | json_values}),
    "max_tokens": st.integers(-5, 40),
    "max_completion_tokens": st.integers(-5, 40),
    "temperature": any_floats | st.integers(-3, 3),
    "cache_salt": st.text(max_size=5),
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=3),
}
bodies = st.fixed_dictionaries(
    {},
    optional={
        field: (PLAUSIBLE[field] | json_values) if field in PLAUSIBLE else json_values for field in FIELDS
    },
).flatmap(
    lambda known: st.dictionaries(st.text(max_size=12), json_values, max_size=3).map(
        lambda extra: extra | known
    )
)
any_bodies = bodies | json_values
