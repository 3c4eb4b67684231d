"""Process settings for long-running commands."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from capstan.runtime import fix_mmap_threshold, limit_malloc_arenas, shorten_gil_switch_interval

pytestmark = pytest.mark.unit


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"), reason="glibc only"
)
def test_malloc_arenas_can_be_capped_on_glibc() -> None:
    assert limit_malloc_arenas(2) is True


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"), reason="glibc only"
)
def test_the_mmap_threshold_can_be_fixed_on_glibc() -> None:
    assert fix_mmap_threshold(128 * 1024) is True


def test_the_gil_switch_interval_can_be_shortened() -> None:
    import sys

    before = sys.getswitchinterval()
    try:
        shorten_gil_switch_interval(0.0005)
        assert abs(sys.getswitchinterval() - 0.0005) < 1e-9
    finally:
        sys.setswitchinterval(before)
