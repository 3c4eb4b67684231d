"""Time arguments shared by the CLI and the HTTP API: epoch seconds, RFC 3339, or an age such as ``15m``."""

from __future__ import annotations

import datetime as dt
import re

_AGO = re.compile(r"^-?(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_time(text: str, now: float, *, what: str = "time") -> float:
    """``1764400000`` (epoch s), ``2026-11-29T10:00:00Z`` or ``90s``/``15m``/``2h``/``7d`` ago -> epoch seconds.

    Raises ValueError with one line naming ``what`` and the accepted forms.
    """
    value = text.strip()
    m = _AGO.match(value)
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{what}: {text!r} is not epoch seconds, an RFC 3339 time or an age like 15m/2h/7d"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()
