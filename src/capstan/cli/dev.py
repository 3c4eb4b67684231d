"""``capstan dev``: local stand-ins for outside services, for tests and the demo (loopback only)."""

from __future__ import annotations

import typer

from capstan.errors import UserError

app = typer.Typer(help="Local stand-ins for outside services (loopback only).", no_args_is_help=True)


@app.callback()
def _dev() -> None:
    """Local stand-ins for outside services (loopback only)."""


@app.command("slack")
def slack(
    port: int = typer.Option(8765, "--port", help="Port on 127.0.0.1 to listen on."),
    token: list[str] | None = typer.Option(
        None, "--token", help="Accepted bot token (repeatable; default: the dev token)."
    ),
    channel: list[str] | None = typer.Option(
        None, "--channel", help="Channel as ID=name (repeatable; default C0ALERTS=alerts, C0OPS=ops)."
    ),
) -> None:
    """Run a Slack-compatible receiver: incoming webhooks, chat.postMessage, files_upload_v2, a web page."""
    import uvicorn

    from capstan.notify import DEV_TOKEN, DEV_WEBHOOK_PATH, ReceiverConfig, SlackReceiver

    if not 0 < port < 65536:
        raise UserError(f"--port: {port} is not a TCP port")
    channels: dict[str, str] = {}
    for item in channel or []:
        cid, sep, name = item.partition("=")
        if not sep or not cid or not name:
            raise UserError(f"--channel: {item!r} is not ID=name")
        channels[cid] = name
    config = ReceiverConfig(tokens=frozenset(token or [DEV_TOKEN]))
    if channels:
        config = ReceiverConfig(tokens=config.tokens, channels=channels, webhook_channel=next(iter(channels)))
    receiver = SlackReceiver(config)
    base = f"http://127.0.0.1:{port}"
    receiver.base_url = base
    typer.echo(f"Slack receiver on {base}  (page: {base}/ , JSON: {base}/_admin/messages)")
    typer.echo(f"  webhook URL: {base}/services/{DEV_WEBHOOK_PATH}")
    typer.echo(f"  bot token:   {next(iter(config.tokens))}   Web API base_url: {base}/api/")
    uvicorn.run(receiver.app, host="127.0.0.1", port=port, log_level="warning")
