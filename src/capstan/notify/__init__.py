"""Chat notifications: sinks (Slack, generic webhook, Teams, Google Chat, Discord) behind one ``Sink``
protocol, an outbox drainer that paces, retries and dead-letters deliveries, and a local Slack-
compatible receiver.
"""

from capstan.notify._blockkit import MAX_BLOCKS, MAX_HEADER_TEXT, MAX_SECTION_TEXT, blocks_problem
from capstan.notify._ratelimit import Backoff, TokenBucket
from capstan.notify._receiver import (
    DEV_TOKEN,
    DEV_WEBHOOK_PATH,
    ReceivedMessage,
    ReceiverConfig,
    SlackReceiver,
)
from capstan.notify._serving import RunningServer, serve_in_thread

__all__ = [
    "DEV_TOKEN",
    "DEV_WEBHOOK_PATH",
    "MAX_BLOCKS",
    "MAX_HEADER_TEXT",
    "MAX_SECTION_TEXT",
    "Backoff",
    "ReceivedMessage",
    "ReceiverConfig",
    "RunningServer",
    "SlackReceiver",
    "TokenBucket",
    "blocks_problem",
    "serve_in_thread",
]
