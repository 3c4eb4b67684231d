"""Opaque page cursors for the history queries: a keyset position, encoded so a client cannot mistake it for data.

Every listing query orders its rows by (time, row id) (``observed_at`` or, for engine entries, ``happened_at``), and
a page ends at the position of its last row; the next page is the rows strictly after it. Rows inserted meanwhile
land either before the position (an earlier time: never shown on a later page) or after it (shown in order), so
paging never repeats nor skips a row that was there when it started, however much is written meanwhile.

A cursor is ``base64url("<listing>:<time µs>:<id>")`` without padding. It is not signed: it carries only a position
that any client could ask for, and a cursor of one listing is refused by another so a mix-up is one clear error.
"""

from __future__ import annotations

import base64
import binascii
import re

from capstan.store._timeparse import MAX_TIME, MIN_TIME

Position = tuple[int, int]  # (time in µs, row id): the key a listing is ordered by

MAX_CURSOR_TEXT = 128
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
_CURSOR = re.compile(CURSOR_PATTERN, re.ASCII)
_BODY = re.compile(r"([a-z]{1,32}):(-?[0-9]{1,19}):([0-9]{1,19})", re.ASCII)
_MIN_US = int(MIN_TIME) * 1_000_000
_MAX_US = int(MAX_TIME) * 1_000_000 + 999_999
_MAX_ID = 2**63 - 1


class BadCursor(ValueError):
    """A cursor this API did not issue (or issued for another listing)."""


def encode_cursor(listing: str, position: Position) -> str:
    time_us, row_id = position
    raw = f"{listing}:{int(time_us)}:{int(row_id)}".encode("ascii")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(listing: str, text: str, *, what: str = "cursor") -> Position:
    """The position ``text`` stands for; BadCursor (one line naming ``what``) for anything this API did not issue
    for ``listing``."""
    if not _CURSOR.fullmatch(text):
        raise BadCursor(f"{what}: not a cursor this API issued (give the next_cursor of the previous page)")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor(
            f"{what}: not a cursor this API issued (give the next_cursor of the previous page)"
        ) from None
    m = _BODY.fullmatch(raw)
    if m is None:
        raise BadCursor(f"{what}: not a cursor this API issued (give the next_cursor of the previous page)")
    if m.group(1) != listing:
        raise BadCursor(f"{what}: a cursor of /{m.group(1)}, not of /{listing}")
    time_us, row_id = int(m.group(2)), int(m.group(3))
    if not _MIN_US <= time_us <= _MAX_US or row_id > _MAX_ID:
        raise BadCursor(f"{what}: position out of range")
    return time_us, row_id
