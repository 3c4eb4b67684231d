"""The capacity CLI's option parsing (pure functions; the CLI itself runs in tests/integration/capacity)."""

from __future__ import annotations

import pytest

from capstan.capacity import PlannerConfig
from capstan.capacity.forecast import headroom_window
from capstan.cli.capacity import parse_buffer, parse_wait
from capstan.errors import UserError


def test_a_headroom_wait_is_a_share_of_the_boot_or_a_duration() -> None:
    assert parse_wait("20%", "--headroom-wait") == (0.0, 0.2)
    assert parse_wait("90s", "--headroom-wait") == (90.0, 0.0)
    assert parse_wait("0", "--headroom-wait") == (0.0, 0.0)
    # a share scales with the boot delay, a duration does not
    share = PlannerConfig(headroom_wait_share=parse_wait("20%", "--headroom-wait")[1])
    wait_s, no_share = parse_wait("78s", "--headroom-wait")
    fixed = PlannerConfig(headroom_wait_s=wait_s, headroom_wait_share=no_share)
    assert headroom_window(share, 390.0) == headroom_window(fixed, 390.0) == 312.0
    assert headroom_window(share, 990.0) == 792.0
    assert headroom_window(fixed, 990.0) == 912.0


@pytest.mark.parametrize("text", ["100%", "-5%", "lots%", "%"])
def test_a_bad_share_names_the_option(text: str) -> None:
    with pytest.raises(UserError, match=r"--headroom-wait .*: a share must be at least 0% and below 100%"):
        parse_wait(text, "--headroom-wait")


def test_a_buffer_size_is_a_count_or_peak() -> None:
    assert parse_buffer("peak", "--buffer-gpus") is None
    assert parse_buffer("8", "--buffer-gpus") == 8
    assert parse_buffer("0", "--buffer-gpus") == 0


@pytest.mark.parametrize("text", ["-1", "lots", "2.5", ""])
def test_a_bad_buffer_size_names_the_option(text: str) -> None:
    with pytest.raises(UserError, match=r"--buffer-gpus .*: expected a count of GPUs \(>= 0\) or 'peak'"):
        parse_buffer(text, "--buffer-gpus")
