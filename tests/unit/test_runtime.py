"""Process settings for long-running commands."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from capstan.runtime import limit_malloc_arenas

pytestmark = pytest.mark.unit


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"), reason="glibc only"
)
def test_malloc_arenas_can_be_capped_on_glibc() -> None:
    assert limit_malloc_arenas(2) is True
