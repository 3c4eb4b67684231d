"""The capacity CLI's option parsing (pure functions; the CLI itself runs in tests/integration/capacity)."""

from __future__ import annotations

import pytest

from capstan.capacity import PlannerConfig, headroom_window
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


def test_capstan_takes_the_controller_intervals_and_keeps_its_defaults_for_those_left_out() -> None:
    from capstan.capacity import Controller, make_policy

    default = Controller()
    set_both = make_policy("capstan", review_interval=30.0, repack_interval=300.0)
    assert isinstance(set_both, Controller)
    assert (set_both.review_interval, set_both.repack_interval) == (30.0, 300.0)
    only_repack = make_policy("capstan", repack_interval=600.0)
    assert isinstance(only_repack, Controller)
    assert (only_repack.review_interval, only_repack.repack_interval) == (default.review_interval, 600.0)


@pytest.mark.parametrize("text", ["0", "-5m", "0s"])
def test_a_controller_interval_must_be_longer_than_zero(text: str) -> None:
    from capstan.cli.options import parse_interval

    with pytest.raises(UserError, match=r"--repack-interval .*: (must be longer than 0 s|expected seconds)"):
        parse_interval(text, "--repack-interval")
    assert parse_interval("15m", "--repack-interval") == 900.0
