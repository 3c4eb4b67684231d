"""``capstan`` command: one Typer app with a sub-app per capability.

Errors meant for users (:class:`capstan.errors.UserError`) print one line and exit 2; nothing else is caught here,
so a real bug still shows its traceback.
"""

from __future__ import annotations

import sys

import typer

from capstan.errors import UserError
from capstan.logs import configure_logging


def build_app() -> typer.Typer:
    """Assemble the CLI; each capability owns one module under ``capstan.cli`` that exposes ``app``."""
    from capstan.cli import capacity as capacity_cli
    from capstan.cli import demo as demo_cli
    from capstan.cli import dev as dev_cli
    from capstan.cli import enginesim as enginesim_cli
    from capstan.cli import history as history_cli
    from capstan.cli import record as record_cli
    from capstan.cli import replay as replay_cli
    from capstan.cli import restarts as restarts_cli
    from capstan.cli import route as route_cli
    from capstan.cli import sandbox as sandbox_cli

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

    app.add_typer(sandbox_cli.app, name="sandbox")
    app.add_typer(demo_cli.app, name="demo")
    # Capability sub-apps register below, one line each.
    app.add_typer(capacity_cli.app, name="capacity")
    app.add_typer(dev_cli.app, name="dev")
    app.add_typer(restarts_cli.app, name="restarts")
    app.add_typer(enginesim_cli.app, name="enginesim")
    app.add_typer(replay_cli.app, name="replay")
    app.add_typer(route_cli.app, name="route")
    app.add_typer(history_cli.app, name="history")
    app.add_typer(record_cli.app, name="record")
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    app = build_app()
    try:
        code = app(args=argv, standalone_mode=False)
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
