"""Time arguments shared by the CLI and the HTTP API: epoch seconds, RFC 3339, or an age such as ``15m``.

Parsed strictly, because both take them from whoever is typing or sending: ASCII digits only (Python's ``float``
and ``\\d`` also take Arabic-Indic and other Unicode digits, ``1_000``, ``nan`` and ``inf``), at most
:data:`MAX_TIME_TEXT` characters, and the result must fall in the years 0001-9999 that the JSON form
(:func:`capstan.store.rfc3339`) and the database's microsecond integers can hold, so an absurd age like
``10**400d`` is a one-line error instead of an overflow deep in a query.
"""

from __future__ import annotations

import datetime as dt
import math
import re

MAX_TIME_TEXT = 64
# NOTE: the range every accepted time falls in: what datetime (and so the JSON form) can render, and far inside
# what int64 microseconds hold.
MIN_TIME = dt.datetime(1, 1, 1, tzinfo=dt.UTC).timestamp()
MAX_TIME = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()

# NOTE: the three accepted forms, as regular expressions that Python and JSON Schema (ECMA 262) read alike: the HTTP
# API's OpenAPI description publishes TIME_PATTERN, so what it documents is exactly what is parsed.
_AGO_RE = r"-?([0-9]+(?:\.[0-9]+)?)(s|m|h|d)"
_EPOCH_RE = r"[+-]?[0-9]+(?:\.[0-9]+)?"
_RFC3339_RE = (
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[Tt ]([0-9]{2}:[0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
TIME_PATTERN = f"^(?:{_AGO_RE}|{_EPOCH_RE}|{_RFC3339_RE})$"
_AGO = re.compile(_AGO_RE, re.ASCII)
_EPOCH = re.compile(_EPOCH_RE, re.ASCII)
_RFC3339 = re.compile(_RFC3339_RE, re.ASCII)
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
FORMS = "epoch seconds, an RFC 3339 time or an age like 90s/15m/2h/7d"


def parse_time(text: str, now: float, *, what: str = "time") -> float:
    """``1764400000`` (epoch s), ``2026-11-29T10:00:00Z`` or ``90s``/``15m``/``2h``/``7d`` ago -> epoch seconds.

    A time without an offset is UTC; no surrounding spaces. Raises ValueError with one line naming ``what``, the value and the accepted
    forms, or the range when the time falls outside the years 0001-9999.
    """
    value = text
    if len(value) > MAX_TIME_TEXT:
        raise ValueError(f"{what}: {len(text)} characters is too long for a time ({FORMS})")
    if m := _AGO.fullmatch(value):
        seconds = now - float(m.group(1)) * _UNIT[m.group(2)]
    elif _EPOCH.fullmatch(value):
        seconds = float(value)
    elif m := _RFC3339.fullmatch(value):
        seconds = _rfc3339_seconds(m, text, what)
    else:
        raise ValueError(f"{what}: {text!r} is not {FORMS}")
    if not math.isfinite(seconds) or not MIN_TIME <= seconds <= MAX_TIME:
        raise ValueError(f"{what}: {text!r} is out of range (times fall in the years 0001 to 9999)")
    return seconds


def _rfc3339_seconds(m: re.Match[str], text: str, what: str) -> float:
    # datetime keeps microseconds: nanoseconds are cut off rather than refused
    date, hm, sec, frac, offset = m.groups()
    offset = "+00:00" if offset is None or offset in "Zz" else offset
    iso = f"{date}T{hm or '00:00'}:{sec or '00'}.{(frac or '')[:6].ljust(6, '0')}{offset}"
    try:
        return dt.datetime.fromisoformat(iso).timestamp()
    except (ValueError, OverflowError):
        raise ValueError(f"{what}: {text!r} is not a valid RFC 3339 time") from None
