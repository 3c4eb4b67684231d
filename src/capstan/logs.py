"""Logging set-up shared by every command: stderr, human-readable on a TTY, one JSON object per line otherwise;
every record redacted (:class:`capstan.redact.RedactingFilter`).

Nothing here runs at import time; the CLI calls :func:`configure_logging` once per process.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from capstan.redact import RedactingFilter

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; extra attributes passed with ``extra=`` become fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                payload[key] = value
        if record.exc_text:
            payload["exc"] = record.exc_text
        elif record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stderr handlers :func:`configure_logging` installs (a type of their own, so a second call replaces
    them and leaves any other handler alone)."""


def _stderr_handler(use_json: bool) -> logging.Handler:
    handler = _StderrHandler(sys.stderr)
    # every record is redacted by shape before it is formatted (capstan.redact): an exception text or a server's
    # reply in a log line may hold a credential
    handler.addFilter(RedactingFilter())
    if use_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        )
    return handler


def configure_logging(level: str = "INFO", *, json_output: bool | None = None) -> None:
    """Route the ``capstan`` loggers to stderr at ``level``, and other libraries' warnings too (one format; JSON
    unless stderr is a terminal, or as forced), every record redacted. A library that would set up logging of
    its own with ``logging.basicConfig`` (the MCP SDK does) finds the root logger configured and leaves it."""
    use_json = (not sys.stderr.isatty()) if json_output is None else json_output
    ours = logging.getLogger("capstan")
    ours.handlers[:] = [_stderr_handler(use_json)]
    ours.setLevel(level.upper())
    ours.propagate = False
    root = logging.getLogger()
    others = _stderr_handler(use_json)
    others.setLevel(logging.WARNING)
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, _StderrHandler)] + [others]
    redact_root_handlers()


def redact_root_handlers() -> None:
    """Put the redacting filter on every handler of the root logger, where third-party libraries' records go (the
    MCP SDK installs a Rich handler there with ``logging.basicConfig`` when its server is created, and logs
    exceptions from the transport with their text), and have Rich handlers print the redacted traceback text
    instead of rendering the live exception, whose message and locals no filter can reach. Idempotent."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
        if getattr(handler, "rich_tracebacks", False):
            handler.rich_tracebacks = False  # type: ignore[attr-defined]


@contextlib.contextmanager
def logging_to_file(path: Path) -> Iterator[None]:
    """While the block runs, the ``capstan`` loggers write JSON lines (redacted) to ``path`` instead of their
    handlers, so that a command printing tables (``capstan demo``) is not interleaved with log lines."""
    root = logging.getLogger("capstan")
    saved = root.handlers[:]
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    root.handlers[:] = [handler]
    try:
        yield
    finally:
        root.handlers[:] = saved
        handler.close()


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration with the redacting filter on its error handler, for every server Capstan
    runs: uvicorn logs an exception in the app with its traceback ("Exception in ASGI application"), and a message
    or a local in it may hold a credential. (Access logs are off in every Capstan server; their formatter needs the
    raw arguments the filter would fold away.)"""
    import uvicorn.config  # only a process that serves pays for uvicorn

    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["filters"] = {"redact": {"()": "capstan.redact.RedactingFilter"}}
    config["handlers"]["default"]["filters"] = ["redact"]
    return config
