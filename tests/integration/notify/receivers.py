"""Tiny strict receivers for Teams, Google Chat, Discord and the generic webhook: each validates the payload shape
the real service expects (and its size limits), records accepted bodies, and can answer 429 on demand."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

Validator = Callable[[Any], str | None]


def _str(value: Any, limit: int, *, required: bool = True) -> bool:
    if value is None:
        return not required
    return isinstance(value, str) and (bool(value) or not required) and len(value) <= limit


def teams_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or body.get("type") != "message":
        return "type must be message"
    if len(json.dumps(body).encode()) > 28_000:
        return "message too large"
    attachments = body.get("attachments")
    if not isinstance(attachments, list) or len(attachments) != 1:
        return "exactly one attachment"
    att = attachments[0]
    if att.get("contentType") != "application/vnd.microsoft.card.adaptive":
        return "contentType"
    card = att.get("content")
    if (
        not isinstance(card, dict)
        or card.get("type") != "AdaptiveCard"
        or card.get("version") not in ("1.4", "1.5")
    ):
        return "card type/version"
    for element in card.get("body", []):
        kind = element.get("type")
        if kind == "TextBlock":
            if not isinstance(element.get("text"), str):
                return "TextBlock.text"
        elif kind == "FactSet":
            facts = element.get("facts")
            if not isinstance(facts, list) or not all(
                isinstance(f, dict) and set(f) == {"title", "value"} for f in facts
            ):
                return "FactSet.facts"
        else:
            return f"unexpected element {kind}"
    return None


def google_chat_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or not _str(body.get("text"), 4096):
        return "text"
    if set(body) - {"text", "cardsV2", "thread"}:
        return "unknown field"
    cards = body.get("cardsV2", [])
    for card in cards:
        if set(card) != {"cardId", "card"} or not isinstance(card["card"].get("sections"), list):
            return "cardsV2 item"
        header = card["card"].get("header", {})
        if not _str(header.get("title"), 200):
            return "header.title"
        for section in card["card"]["sections"]:
            widgets = section.get("widgets")
            if not isinstance(widgets, list) or not widgets:
                return "section.widgets"
            for widget in widgets:
                if len(widget) != 1 or next(iter(widget)) not in ("textParagraph", "decoratedText"):
                    return "widget kind"
    if "thread" in body and not _str(body["thread"].get("threadKey"), 4000):
        return "thread.threadKey"
    if len(json.dumps(body).encode()) > 32_000:
        return "message too large"
    return None


def discord_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or set(body) - {"content", "embeds", "username"}:
        return "fields"
    if not _str(body.get("content"), 2000, required=False):
        return "content"
    embeds = body.get("embeds", [])
    if not isinstance(embeds, list) or len(embeds) > 10:
        return "embeds"
    total = 0
    for embed in embeds:
        if not _str(embed.get("title"), 256, required=False) or not _str(
            embed.get("description"), 4096, required=False
        ):
            return "title/description"
        fields = embed.get("fields", [])
        if len(fields) > 25:
            return "too many fields"
        for f in fields:
            if not _str(f.get("name"), 256) or not _str(f.get("value"), 1024):
                return "BASE_TYPE_MAX_LENGTH field"
        footer = embed.get("footer", {}).get("text", "")
        if not _str(footer, 2048, required=False):
            return "footer"
        total += len(embed.get("title", "")) + len(embed.get("description", "")) + len(footer)
        total += sum(len(f["name"]) + len(f["value"]) for f in fields)
    if total > 6000:
        return "embeds exceed 6000 characters"
    if not body.get("content") and not embeds:
        return "empty message"
    return None


def json_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or body.get("source") != "capstan" or body.get("schema") != 1:
        return "source/schema"
    if not isinstance(body.get("title"), str) or not isinstance(body.get("sections"), list):
        return "title/sections"
    return None


@dataclass
class StrictReceiver:
    validator: Validator
    path: str
    ok_status: int = 200
    retry_after_body: bool = False
    received: list[dict[str, Any]] = field(default_factory=list)
    queries: list[dict[str, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    armed_429: int = 0
    fail_status: int | None = None

    def app(self) -> Starlette:
        return Starlette(routes=[Route(self.path, self._handle, methods=["POST"])])

    async def _handle(self, request: Request) -> Response:
        if self.fail_status is not None:
            return PlainTextResponse("boom", status_code=self.fail_status)
        if self.armed_429 > 0:
            self.armed_429 -= 1
            if self.retry_after_body:
                return JSONResponse(
                    {"message": "You are being rate limited.", "retry_after": 2.5}, status_code=429
                )
            return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "4"})
        try:
            body = json.loads(await request.body())
        except ValueError:
            self.rejected.append("not json")
            return PlainTextResponse("bad json", status_code=400)
        if problem := self.validator(body):
            self.rejected.append(problem)
            return JSONResponse({"error": problem}, status_code=400)
        self.received.append(body)
        self.queries.append(dict(request.query_params))
        self.headers.append(dict(request.headers))
        return Response(status_code=self.ok_status)
