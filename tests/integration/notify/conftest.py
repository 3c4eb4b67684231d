"""A fresh local Slack receiver on a loopback port for each test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from capstan.notify import DEV_TOKEN, DEV_WEBHOOK_PATH, SlackReceiver, serve_in_thread


@dataclass
class Slack:
    receiver: SlackReceiver
    url: str

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/services/{DEV_WEBHOOK_PATH}"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    token: str = DEV_TOKEN


@pytest.fixture
def slack() -> Iterator[Slack]:
    receiver = SlackReceiver()
    with serve_in_thread(receiver.app) as server:
        receiver.base_url = server.url
        yield Slack(receiver=receiver, url=server.url)
