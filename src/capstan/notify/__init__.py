"""Chat notifications: sinks (Slack, generic webhook, Teams, Google Chat, Discord) behind one ``Sink`` protocol,
an outbox drainer that paces, retries and dead-letters deliveries, and a local Slack-compatible receiver."""

from typing import TYPE_CHECKING

from capstan.lazy import lazy_attributes
from capstan.notify._blockkit import MAX_BLOCKS, MAX_HEADER_TEXT, MAX_SECTION_TEXT, blocks_problem
from capstan.notify._config import (
    DiscordSinkConfig,
    GoogleChatSinkConfig,
    SinkConfig,
    SlackBotSinkConfig,
    SlackWebhookSinkConfig,
    TeamsSinkConfig,
    WebhookSinkConfig,
    build_sink,
)
from capstan.notify._delivery import DeliveryPolicy, Drainer, DrainReport, NotifyMetrics
from capstan.notify._notice import (
    MessageCapacity,
    Notice,
    Section,
    combine_notices,
    cut,
    escape_fences,
    tail_lines,
)
from capstan.notify._outbox import MemoryOutbox, Outbox, OutboxEntry
from capstan.notify._ratelimit import TokenBucket
from capstan.notify._render import (
    render_discord,
    render_google_chat,
    render_json,
    render_slack,
    render_teams,
)
from capstan.notify._sinks import (
    Delivery,
    DiscordSink,
    GoogleChatSink,
    JsonWebhookSink,
    MemoryThreadIndex,
    Sink,
    SlackBotSink,
    SlackWebhookSink,
    TeamsSink,
    ThreadIndex,
    parse_retry_after,
)
from capstan.notify._slack_message import (
    SlackRefusal,
    slack_message_problem,
    slack_message_text,
    slack_message_texts,
    stored_slack_message,
)

# The local receiver and the loopback server pull in Starlette and uvicorn; a process that only delivers
# notifications never needs them, so they are imported on first use (PEP 562) to keep its memory down.
_LAZY = {
    "DEV_TOKEN": "capstan.notify._receiver",
    "DEV_WEBHOOK_PATH": "capstan.notify._receiver",
    "ReceivedMessage": "capstan.notify._receiver",
    "ReceiverConfig": "capstan.notify._receiver",
    "SlackReceiver": "capstan.notify._receiver",
    "WEBHOOK_PATH": "capstan.notify._receiver",
    "render_page": "capstan.notify._receiver",
    "RunningServer": "capstan.notify._serving",
    "serve_in_thread": "capstan.notify._serving",
}


__getattr__ = lazy_attributes("capstan.notify", _LAZY)


if TYPE_CHECKING:
    from capstan.notify._receiver import (
        DEV_TOKEN,
        DEV_WEBHOOK_PATH,
        WEBHOOK_PATH,
        ReceivedMessage,
        ReceiverConfig,
        SlackReceiver,
        render_page,
    )
    from capstan.notify._serving import RunningServer, serve_in_thread

__all__ = [
    "DEV_TOKEN",
    "DEV_WEBHOOK_PATH",
    "MAX_BLOCKS",
    "MAX_HEADER_TEXT",
    "MAX_SECTION_TEXT",
    "WEBHOOK_PATH",
    "Delivery",
    "DeliveryPolicy",
    "DiscordSink",
    "DiscordSinkConfig",
    "DrainReport",
    "Drainer",
    "GoogleChatSink",
    "GoogleChatSinkConfig",
    "JsonWebhookSink",
    "MemoryOutbox",
    "MemoryThreadIndex",
    "MessageCapacity",
    "Notice",
    "NotifyMetrics",
    "Outbox",
    "OutboxEntry",
    "ReceivedMessage",
    "ReceiverConfig",
    "RunningServer",
    "Section",
    "Sink",
    "SinkConfig",
    "SlackBotSink",
    "SlackBotSinkConfig",
    "SlackReceiver",
    "SlackRefusal",
    "SlackWebhookSink",
    "SlackWebhookSinkConfig",
    "TeamsSink",
    "TeamsSinkConfig",
    "ThreadIndex",
    "TokenBucket",
    "WebhookSinkConfig",
    "blocks_problem",
    "build_sink",
    "combine_notices",
    "cut",
    "escape_fences",
    "parse_retry_after",
    "render_discord",
    "render_google_chat",
    "render_json",
    "render_page",
    "render_slack",
    "render_teams",
    "serve_in_thread",
    "slack_message_problem",
    "slack_message_text",
    "slack_message_texts",
    "stored_slack_message",
    "tail_lines",
]
