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
    webhook: list[str] | None = typer.Option(
        None,
        "--webhook",
        help="Accepted incoming-webhook path T…/B…/secret (repeatable; default: any well-formed path). "
        "Others get Slack's no_team, no_service or invalid_token.",
    ),
    max_messages: int = typer.Option(
        100_000,
        "--max-messages",
        help="Messages kept in memory; the oldest are dropped (and counted) beyond.",
    ),
) -> None:
    """Run a Slack-compatible receiver: incoming webhooks, chat.postMessage, files_upload_v2, a web page."""
    import uvicorn

    from capstan.logs import uvicorn_log_config
    from capstan.notify import DEV_TOKEN, DEV_WEBHOOK_PATH, WEBHOOK_PATH, ReceiverConfig, SlackReceiver

    if not 0 < port < 65536:
        raise UserError(f"--port: {port} is not a TCP port")
    if max_messages < 1:
        raise UserError(f"--max-messages: {max_messages} must be at least 1")
    channels: dict[str, str] = {}
    for item in channel or []:
        cid, sep, name = item.partition("=")
        if not sep or not cid or not name:
            raise UserError(f"--channel: {item!r} is not ID=name")
        channels[cid] = name
    hooks = [item.strip("/") for item in webhook or []]
    for hook in hooks:
        if not WEBHOOK_PATH.match(hook):
            raise UserError(f"--webhook: {hook!r} is not a path T…/B…/secret (as in {DEV_WEBHOOK_PATH})")
    defaults = ReceiverConfig()
    config = ReceiverConfig(
        tokens=frozenset(token or [DEV_TOKEN]),
        channels=channels or defaults.channels,
        webhook_channel=next(iter(channels)) if channels else defaults.webhook_channel,
        webhook_paths=frozenset(hooks) if hooks else None,
        max_messages=max_messages,
    )
    receiver = SlackReceiver(config)
    base = f"http://127.0.0.1:{port}"
    receiver.base_url = base
    typer.echo(f"Slack receiver on {base}  (page: {base}/ , JSON: {base}/_admin/messages)")
    typer.echo(f"  webhook URL: {base}/services/{hooks[0] if hooks else DEV_WEBHOOK_PATH}")
    typer.echo(f"  bot token:   {next(iter(config.tokens))}   Web API base_url: {base}/api/")
    uvicorn.run(
        receiver.app, host="127.0.0.1", port=port, log_level="warning", log_config=uvicorn_log_config()
    )
