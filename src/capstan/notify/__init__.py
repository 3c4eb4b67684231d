"""Chat notifications: sinks (Slack, generic webhook, Teams, Google Chat, Discord) behind one ``Sink`` protocol,
an outbox drainer that paces, retries and dead-letters deliveries, and a local Slack-compatible receiver.

Entry points: :func:`build_sink` turns a :data:`SinkConfig` into a :class:`Sink` through the :data:`SINKS` registry
(config type name → factory, the one place a sink is wired); :class:`Drainer` delivers an :class:`Outbox`'s
notices (:class:`MemoryOutbox` here, the store's durable one in :mod:`capstan.store`); :class:`SlackReceiver` and
:func:`serve_in_thread` are the local Slack-compatible receiver the demo, the benches and the tests deliver to.
"""

from typing import TYPE_CHECKING

from capstan.lazy import lazy_attributes
from capstan.notify._blockkit import blocks_problem
from capstan.notify._config import SINKS, SinkConfig, build_sink
from capstan.notify._delivery import DeliveryPolicy, Drainer, DrainReport, NotifyMetrics
from capstan.notify._notice import MessageCapacity, Notice, Section, combine_notices, cut
from capstan.notify._outbox import MemoryOutbox, Outbox, OutboxEntry
from capstan.notify._render import render_discord, render_slack
from capstan.notify._sinks import (
    Delivery,
    DiscordSink,
    GoogleChatSink,
    JsonWebhookSink,
    Sink,
    SlackBotSink,
    SlackWebhookSink,
    TeamsSink,
    ThreadIndex,
)
from capstan.notify._slack_message import slack_message_text

# The local receiver and the loopback server pull in Starlette and uvicorn; a process that only delivers
# notifications never needs them, so they are imported on first use (PEP 562) to keep its memory down.
_LAZY = {
    "DEV_TOKEN": "capstan.notify._receiver",
    "DEV_WEBHOOK_PATH": "capstan.notify._receiver",
    "ReceivedMessage": "capstan.notify._receiver",
    "ReceiverConfig": "capstan.notify._receiver",
    "SlackReceiver": "capstan.notify._receiver",
    "WEBHOOK_PATH": "capstan.notify._receiver",
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
    )
    from capstan.notify._serving import RunningServer, serve_in_thread

__all__ = [
    "DEV_TOKEN",
    "DEV_WEBHOOK_PATH",
    "SINKS",
    "WEBHOOK_PATH",
    "Delivery",
    "DeliveryPolicy",
    "DiscordSink",
    "DrainReport",
    "Drainer",
    "GoogleChatSink",
    "JsonWebhookSink",
    "MemoryOutbox",
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
    "SlackReceiver",
    "SlackWebhookSink",
    "TeamsSink",
    "ThreadIndex",
    "blocks_problem",
    "build_sink",
    "combine_notices",
    "cut",
    "render_discord",
    "render_slack",
    "serve_in_thread",
    "slack_message_text",
]
