"""``capstan`` command: one Typer app with a sub-app per capability.

Errors meant for users (:class:`capstan.errors.UserError`) print one line and exit 2; usage errors (an unknown
command or option, a bad value, a missing argument) print Click's short usage message and exit 2; nothing else is
caught here, so a real bug still shows its traceback.

Only the sub-command named on the command line is imported: ``capstan --help`` imports none of them (it lists
them from :data:`SUBCOMMANDS`), ``capstan history …`` imports ``capstan.cli.history`` and nothing of the other
capabilities, and each sub-app imports its capability inside its commands, so every ``--help`` answers at once.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import NamedTuple

import typer

from capstan.errors import UserError


class Subcommand(NamedTuple):
    module: str
    """The module under ``capstan.cli`` that exposes the sub-app as ``app``."""
    help: str
    """Its help line, shown by ``capstan --help`` without importing the module (a test keeps the two equal)."""


# Sub-command name → where its sub-app lives and its help. A command loads only its own module: a long-running
# `capstan restarts run` does not carry the capacity planner's or the router's libraries in its memory.
SUBCOMMANDS: dict[str, Subcommand] = {
    "sandbox": Subcommand(
        "sandbox",
        "A real local Kubernetes control plane (etcd, apiserver, controller-manager, scheduler, kwok).",
    ),
    "demo": Subcommand("demo", "Run the demo."),
    "capacity": Subcommand("capacity", "GPU capacity planning: simulate policies on real traces."),
    "dev": Subcommand("dev", "Local stand-ins for outside services (loopback only)."),
    "restarts": Subcommand(
        "restarts", "Restart diagnostics: run the watcher, inspect the outbox, check the configuration."
    ),
    "enginesim": Subcommand("enginesim", "vLLM-compatible engine simulator (loopback only)."),
    "replay": Subcommand("replay", "Workloads (request files) and the HTTP replayer."),
    "route": Subcommand("route", "Cache-aware OpenAI-compatible routing."),
    "history": Subcommand("history", "Query the durable history of cluster changes and engine events."),
    "diagnose": Subcommand("diagnose", "Name the root causes of what is broken, with evidence."),
    "faults": Subcommand("faults", "Fault scenarios: play them on the sandbox and score the diagnosis."),
    "mcp": Subcommand("mcp", "Read-only, secret-safe cluster context for AI agents over MCP."),
    "record": Subcommand(
        "record", "Record cluster changes, Events and engine logs durably into the history store."
    ),
}

PROG_NAME = "capstan"


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


def build_app(only: str | None = None) -> typer.Typer:
    """Assemble the CLI; each capability owns one module under ``capstan.cli`` that exposes ``app``. With
    ``only`` (a known sub-command) just that sub-app is imported and registered; without one, every sub-command
    is registered as an empty placeholder carrying its help, so the root help (and the root's usage errors) import
    no capability at all."""
    import importlib

    app = typer.Typer(
        name=PROG_NAME,
        help="GPU capacity, cache-aware routing and durable diagnostics for Kubernetes.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )

    @app.callback()
    def _root(
        log_level: LogLevel = typer.Option(
            LogLevel.INFO, "--log-level", envvar="CAPSTAN_LOG_LEVEL", case_sensitive=False, help="Log level."
        ),
        log_json: bool | None = typer.Option(
            None, "--log-json/--log-text", help="Force JSON or text logs (default: JSON unless a TTY)."
        ),
    ) -> None:
        from capstan.logs import configure_logging

        configure_logging(log_level.value, json_output=log_json)

    for name, sub in SUBCOMMANDS.items():
        if only is None or only not in SUBCOMMANDS:
            app.add_typer(typer.Typer(help=sub.help), name=name)
        elif name == only:
            module = importlib.import_module(f"capstan.cli.{sub.module}")
            app.add_typer(module.app, name=name)
    return app


def _subcommand(argv: list[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not a root option or its value)."""
    skip_value = {"--log-level"}
    index = 0
    for _ in range(len(argv)):  # bounded
        if index >= len(argv):
            return None
        word = argv[index]
        if word in skip_value:
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        return word
    return None


def _click_exception() -> type[Exception]:
    """The base exception of the Click that Typer runs: Typer 0.2x carries its own copy (``typer._click``), whose
    classes are not those of an installed ``click``, and older Typer uses ``click`` itself. ``typer.BadParameter``
    is public in both and derives from it, so it is found there rather than imported from either."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException" and issubclass(cls, Exception):
            return cls
    raise RuntimeError("typer.BadParameter does not derive from a ClickException")  # pragma: no cover


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else argv
    app = build_app(_subcommand(args))
    click_exception = _click_exception()
    try:
        code = app(args=args, prog_name=PROG_NAME, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except UserError as err:
        from capstan.redact import Redactor  # the one line may quote a plugin's or a server's words

        print(f"{PROG_NAME}: error: {Redactor().text(str(err))}", file=sys.stderr)
        sys.exit(err.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except typer.Abort:
        sys.exit(130)
    except Exception as err:
        if isinstance(err, click_exception):
            # a usage error (exit 2) or another Click error (exit 1): Click's own short message, no traceback
            err.show()  # type: ignore[attr-defined]
            sys.exit(int(err.exit_code))  # type: ignore[attr-defined]
        raise


if __name__ == "__main__":
    main()
