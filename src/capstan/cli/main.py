"""``capstan`` command: one Typer app with a sub-app per capability.

Errors meant for users (:class:`capstan.errors.UserError`) print one line and exit 2; nothing else is caught here,
so a real bug still shows its traceback.
"""

from __future__ import annotations

import sys

import typer

from capstan.errors import UserError
from capstan.logs import configure_logging

# Sub-command name → the module under ``capstan.cli`` that exposes its ``app``. Each module imports its
# capability (numpy, SQLAlchemy, matplotlib…) at the top, so a command loads only its own: a long-running
# `capstan restarts run` does not carry the capacity planner's or the router's libraries in its memory.
SUBCOMMANDS: dict[str, str] = {
    "sandbox": "sandbox",
    "demo": "demo",
    "capacity": "capacity",
    "dev": "dev",
    "restarts": "restarts",
    "enginesim": "enginesim",
    "replay": "replay",
    "route": "route",
    "history": "history",
    "record": "record",
}


def build_app(only: str | None = None) -> typer.Typer:
    """Assemble the CLI; each capability owns one module under ``capstan.cli`` that exposes ``app``. With
    ``only`` (a known sub-command) just that sub-app is imported and registered."""
    import importlib

    app = typer.Typer(
        name="capstan",
        help="GPU capacity, cache-aware routing and durable diagnostics for Kubernetes.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )

    @app.callback()
    def _root(
        log_level: str = typer.Option("INFO", "--log-level", envvar="CAPSTAN_LOG_LEVEL", help="Log level."),
        log_json: bool | None = typer.Option(
            None, "--log-json/--log-text", help="Force JSON or text logs (default: JSON unless a TTY)."
        ),
    ) -> None:
        configure_logging(log_level, json_output=log_json)

    names = [only] if only in SUBCOMMANDS else list(SUBCOMMANDS)
    for name in names:
        module = importlib.import_module(f"capstan.cli.{SUBCOMMANDS[name]}")
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else argv
    app = build_app(_subcommand(args))
    try:
        code = app(args=args, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except UserError as err:
        print(f"capstan: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # click usage errors arrive as ClickException subclasses
        import click

        if isinstance(err, click.exceptions.Abort):
            sys.exit(130)
        if isinstance(err, click.ClickException):
            err.show()
            sys.exit(err.exit_code)
        raise


if __name__ == "__main__":
    main()
