"""A local Slack-compatible receiver (`capstan dev slack`) so the notifier, its tests, the demo and the
storm benchmark can talk to "Slack" without the internet, and so any collector is scored on what it sent.

It implements incoming webhooks (``POST /services/T…/B…/…``) and the Web API methods ``auth.test``,
``chat.postMessage`` (with ``thread_ts``), ``files.getUploadURLExternal``, the upload URL it hands out, and
``files.completeUploadExternal`` (the three steps of ``files_upload_v2``).

It keeps every part of a message Slack keeps (:mod:`capstan.notify._slack_message`): top-level text, blocks of
every documented type, legacy attachments with all their fields (pretext, text, title, fields, footer,
fallback, color, author, image and thumb URLs, blocks inside attachments), ``markdown_text``, files shared
with ``files_upload_v2``, ``thread_ts``, ``username``, ``icon_emoji``/``icon_url`` and the requested
``channel`` (an app's incoming webhook posts to its own channel whatever ``channel`` says, so that is kept as
``requested_channel``). It refuses what Slack refuses, with Slack's status codes and error strings:

- webhooks: ``400 invalid_payload`` (body not a JSON object, in JSON or in a form's ``payload`` field),
  ``400 no_text``, ``400 invalid_blocks``/``invalid_blocks_format``, ``400 too_many_attachments``,
  ``404 no_service``/``no_team`` and ``403 invalid_token`` (unknown hooks), ``429 rate_limited``;
- Web API (HTTP 200, ``ok: false``): ``not_authed``/``invalid_auth`` (a token inside a JSON body does not
  count, as on Slack), ``invalid_json``, ``json_not_object``, ``invalid_form_data``, ``invalid_post_type``,
  ``missing_post_type``, ``invalid_charset``, ``channel_not_found``, ``no_text``, ``invalid_blocks``,
  ``invalid_blocks_format``, ``too_many_attachments``, ``invalid_arguments``, ``invalid_array_arg``,
  ``markdown_text_conflict``, ``msg_too_long``, ``invalid_metadata_format``; HTTP 429 ``ratelimited``.

It can answer 429 with ``Retry-After`` on demand: a number of armed 429s or a steady per-destination rate
(admin endpoint ``POST /_admin/ratelimit``). It stays bounded: request bodies above ``max_body_bytes`` get
``413 request_too_large`` (the receiver's own limit, not a Slack error), at most ``max_messages`` messages
are kept (the oldest are dropped and counted), pending uploads and rejections are capped. Received messages
are served as JSON at ``/_admin/messages``, files at ``/_admin/files/<id>``, and rendered on a page at ``/``.

Why this is one module of some 650 lines: it is the HTTP shell of one emulated Slack workspace, and every handler
in it (the webhooks, each Web API method, the upload steps, the admin routes) reads and writes the same state
under one lock: the kept messages, the rejections, the per-destination rate limits and armed 429s, the pending
uploads. Split by handler, each part would need all of that state. What does not need it lives beside it: what
Slack keeps and refuses of a message in ``_slack_message.py`` and ``_blockkit.py`` (shared with the sinks), and
the HTML page, a pure function of :meth:`SlackReceiver.snapshot`, in ``_receiver_page.py``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from capstan.notify._blockkit import blocks_problem
from capstan.notify._ratelimit import TokenBucket
from capstan.notify._receiver_page import render_page
from capstan.notify._slack_message import (
    MESSAGE_OPTIONS,
    SlackRefusal,
    decode_json_argument,
    slack_message_problem,
    slack_message_texts,
    stored_slack_message,
)

WEBHOOK_PATH = re.compile(r"^(T[A-Z0-9]{1,20})/(B[A-Z0-9]{1,20})/([A-Za-z0-9]{8,64})$")
DEV_TOKEN = "xoxb-capstan-dev-token"
DEV_WEBHOOK_PATH = "T0CAPSTAN/B0CAPSTAN/capstandevwebhook0000001"
_MAX_UPLOAD_BYTES: Final = 50 * 1024 * 1024
_MAX_PENDING_UPLOADS: Final = 1000
_MAX_REJECTED: Final = 10_000
_CHARSETS: Final = frozenset({"utf-8", "utf8", "iso-8859-1", "latin-1", "latin1"})
_FORM_TYPES: Final = frozenset({"application/x-www-form-urlencoded", "text/plain"})


class _RequestRefused(Exception):
    """A Web API request refused before its method runs (Slack's error string, HTTP status)."""

    def __init__(self, error: str, status: int = 200) -> None:
        super().__init__(error)
        self.error = error
        self.status = status


@dataclass
class ReceivedMessage:
    """One message the receiver accepted, with every part Slack keeps."""

    seq: int
    via: str  # "webhook" | "api"
    channel: str
    ts: str
    text: str | None
    blocks: list[Any] | None
    thread_ts: str | None
    files: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    received_at: float = 0.0
    attachments: list[dict[str, Any]] | None = None
    markdown_text: str | None = None
    requested_channel: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # username, icon_emoji, icon_url, mrkdwn, parse, …
    truncated: bool = False

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "seq": self.seq,
            "via": self.via,
            "channel": self.channel,
            "ts": self.ts,
            "text": self.text,
            "blocks": self.blocks,
            "attachments": self.attachments,
            "markdown_text": self.markdown_text,
            "thread_ts": self.thread_ts,
            "requested_channel": self.requested_channel,
            "username": self.options.get("username"),
            "icon_emoji": self.options.get("icon_emoji"),
            "icon_url": self.options.get("icon_url"),
            "options": dict(self.options),
            "truncated": self.truncated,
            "files": self.files,
            "extra": self.extra,
            "received_at": self.received_at,
        }
        body["plain_text"] = "\n".join(slack_message_texts(body))
        return body


@dataclass
class _Upload:
    file_id: str
    filename: str
    length: int
    alt_txt: str | None = None
    snippet_type: str | None = None
    content: bytes | None = None


@dataclass
class ReceiverConfig:
    """Who the receiver accepts: tokens, channels (id → name), webhook paths (None = any well-formed path),
    and its bounds (request body bytes, messages kept)."""

    tokens: frozenset[str] = frozenset({DEV_TOKEN})
    channels: Mapping[str, str] = field(default_factory=lambda: {"C0ALERTS": "alerts", "C0OPS": "ops"})
    webhook_paths: frozenset[str] | None = None
    webhook_channel: str = "C0ALERTS"
    max_body_bytes: int = 4 * 1024 * 1024
    max_messages: int = 100_000


def _content_type(request: Request) -> tuple[str | None, str | None]:
    """``(media type, charset)`` of a request, lower-cased; None for a missing header."""
    header = request.headers.get("content-type")
    if header is None:
        return None, None
    media, _, rest = header.partition(";")
    charset = None
    for param in rest.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset":
            charset = value.strip().strip('"').lower()
    return media.strip().lower(), charset


def _loads(raw: bytes | str) -> Any:
    """JSON or None (malformed, undecodable or nested deeper than the parser allows)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None once it is larger than ``limit`` bytes (reading stops there)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _multipart_fields(request: Request, body: bytes) -> dict[str, str]:
    """The string fields of a multipart body already read (replayed to Starlette's parser)."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.request", "body": b"", "more_body": False}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form()
    except (HTTPException, MultiPartException) as exc:  # Starlette raises the first inside an app
        raise ValueError("malformed multipart body") from exc
    return {k: v for k, v in form.items() if isinstance(v, str)}


class SlackReceiver:
    """The receiver's state and Starlette ``app``; thread-safe so tests can read it from another thread."""

    def __init__(
        self, config: ReceiverConfig | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config or ReceiverConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._file_seq = itertools.count(1)
        self.messages: deque[ReceivedMessage] = deque(maxlen=max(1, self.config.max_messages))
        self.rejected: deque[dict[str, Any]] = deque(maxlen=_MAX_REJECTED)
        self.dropped = 0
        self._uploads: dict[str, _Upload] = {}
        self._armed_429 = 0
        self._retry_after = 1
        self._rate: tuple[float, float] | None = None
        self._buckets: dict[str, TokenBucket] = {}
        self.count_429 = 0
        self.base_url = ""  # set by whoever serves the app, used to build upload URLs
        known = self.config.webhook_paths
        self._hooks = None if known is None else {tuple(p.split("/")) for p in known}
        self.app = Starlette(
            routes=[
                Route("/", self._page, methods=["GET"]),
                Route("/services/{path:path}", self._webhook, methods=["POST"]),
                Route("/api/{method}", self._api, methods=["GET", "POST"]),
                Route("/upload/v1/{file_id}", self._upload, methods=["POST"]),
                Route("/_admin/messages", self._admin_messages, methods=["GET", "DELETE"]),
                Route("/_admin/files/{file_id}", self._admin_file, methods=["GET"]),
                Route("/_admin/ratelimit", self._admin_ratelimit, methods=["POST"]),
            ]
        )

    # ---- admin surface (also callable in-process) ------------------------------------------------
    def arm_429(self, count: int, retry_after: int = 1) -> None:
        """Answer the next ``count`` message posts with HTTP 429 and ``Retry-After: retry_after``."""
        with self._lock:
            self._armed_429 = max(0, count)
            self._retry_after = max(0, retry_after)

    def set_rate(self, rate: float | None, burst: float = 1.0) -> None:
        """Limit each destination (webhook or channel) to ``rate`` messages/s with ``burst``; None = off."""
        with self._lock:
            self._rate = None if rate is None else (rate, burst)
            self._buckets.clear()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "messages": [m.as_json() for m in self.messages],
                "rejected": list(self.rejected),
                "count_429": self.count_429,
                "dropped": self.dropped,
            }

    def clear(self) -> None:
        with self._lock:
            self.messages.clear()
            self.rejected.clear()
            self.count_429 = 0
            self.dropped = 0

    # ---- helpers ---------------------------------------------------------------------------------
    def _throttle(self, destination: str) -> int | None:
        """Seconds for Retry-After if this post must be refused with 429, else None (the post may proceed)."""
        with self._lock:
            if self._armed_429 > 0:
                self._armed_429 -= 1
                self.count_429 += 1
                return self._retry_after
            if self._rate is not None:
                bucket = self._buckets.get(destination)
                if bucket is None:
                    bucket = self._buckets[destination] = TokenBucket(self._rate[0], self._rate[1])
                now = self._clock()
                if not bucket.try_take(now):
                    self.count_429 += 1
                    return max(1, int(bucket.wait_time(now) + 0.999))
            return None

    def _reject(self, via: str, error: str, detail: str = "") -> None:
        with self._lock:
            self.rejected.append({"via": via, "error": error, "detail": detail})

    def _resolve_channel(self, value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return None
        if value in self.config.channels:
            return value
        name = value.lstrip("#")
        for cid, cname in self.config.channels.items():
            if cname == name:
                return cid
        return None

    def _store(
        self,
        via: str,
        channel: str,
        payload: Mapping[str, Any],
        *,
        files: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ReceivedMessage:
        kept = stored_slack_message(payload)
        with self._lock:
            seq = next(self._seq)
            now = self._clock()
            message = ReceivedMessage(
                seq=seq,
                via=via,
                channel=channel,
                ts=f"{int(now)}.{seq:06d}",
                text=kept["text"],
                blocks=kept["blocks"],
                thread_ts=kept["thread_ts"],
                files=files or [],
                extra=extra or {},
                received_at=now,
                attachments=kept["attachments"],
                markdown_text=kept["markdown_text"],
                requested_channel=kept["requested_channel"],
                options={k: kept[k] for k in MESSAGE_OPTIONS if k in kept},
                truncated=kept["truncated"],
            )
            if len(self.messages) == self.messages.maxlen:
                self.dropped += 1  # the deque drops the oldest
            self.messages.append(message)
            return message

    # ---- incoming webhooks -----------------------------------------------------------------------
    def _hook_refusal(self, path: str) -> tuple[int, str] | None:
        match = WEBHOOK_PATH.match(path)
        if match is None:
            return (404, "no_service")
        if self._hooks is None:
            return None
        team, service, secret = match.groups()
        if not any(h[0] == team for h in self._hooks):
            return (404, "no_team")
        if not any(h[:2] == (team, service) for h in self._hooks):
            return (404, "no_service")
        if (team, service, secret) not in self._hooks:
            return (403, "invalid_token")
        return None

    async def _webhook_payload(self, request: Request, raw: bytes) -> Any:
        """The payload of a webhook post: a JSON body, or the ``payload`` field of a form."""
        payload = _loads(raw) if raw else None
        if isinstance(payload, dict):
            return payload
        media, charset = _content_type(request)
        try:
            if media == "application/x-www-form-urlencoded":
                fields = dict(
                    parse_qsl(raw.decode(charset or "utf-8"), keep_blank_values=True, errors="strict")
                )
            elif media == "multipart/form-data":
                fields = await _multipart_fields(request, raw)
            else:
                return payload
        except (UnicodeDecodeError, LookupError, ValueError):
            return None
        return _loads(fields["payload"]) if "payload" in fields else None

    async def _webhook(self, request: Request) -> Response:
        path = request.path_params["path"].strip("/")
        if (refusal := self._hook_refusal(path)) is not None:
            self._reject("webhook", refusal[1], path)
            return PlainTextResponse(refusal[1], status_code=refusal[0])
        raw = await _read_body(request, self.config.max_body_bytes)
        if raw is None:
            self._reject("webhook", "request_too_large", f"over {self.config.max_body_bytes} bytes")
            return PlainTextResponse("request_too_large", status_code=413)
        payload = await self._webhook_payload(request, raw)
        if not isinstance(payload, dict):
            self._reject("webhook", "invalid_payload", "body is not a JSON object")
            return PlainTextResponse("invalid_payload", status_code=400)
        if problem := slack_message_problem(payload):
            self._reject("webhook", problem.for_webhook, problem.detail)
            return PlainTextResponse(problem.for_webhook, status_code=400)
        if (retry := self._throttle("webhook:" + path)) is not None:
            return PlainTextResponse("rate_limited", status_code=429, headers={"Retry-After": str(retry)})
        self._store("webhook", self.config.webhook_channel, payload, extra={"webhook": path})
        return PlainTextResponse("ok")

    # ---- Web API ---------------------------------------------------------------------------------
    async def _params(self, request: Request) -> tuple[dict[str, Any], bool]:
        """The call's arguments and whether a ``token`` among them may authenticate it (not from JSON)."""
        params: dict[str, Any] = dict(request.query_params)
        if request.method != "POST":
            return params, True
        raw = await _read_body(request, self.config.max_body_bytes)
        if raw is None:
            raise _RequestRefused("request_too_large", 413)
        media, charset = _content_type(request)
        if media is None:
            if raw:
                raise _RequestRefused("missing_post_type")
            return params, True
        if charset is not None and charset not in _CHARSETS:
            raise _RequestRefused("invalid_charset")
        if media == "application/json":
            body = _loads(raw) if raw else {}
            if body is None:
                raise _RequestRefused("invalid_json")
            if not isinstance(body, dict):
                raise _RequestRefused("json_not_object")
            body.pop("token", None)  # Slack reads a JSON call's token from the Authorization header only
            params.update(body)
            return params, "token" in request.query_params
        try:
            if media in _FORM_TYPES:
                params.update(
                    parse_qsl(raw.decode(charset or "utf-8"), keep_blank_values=True, errors="strict")
                )
            elif media == "multipart/form-data":
                params.update(await _multipart_fields(request, raw))
            else:
                raise _RequestRefused("invalid_post_type")
        except (UnicodeDecodeError, LookupError, ValueError) as exc:
            raise _RequestRefused("invalid_form_data") from exc
        return params, True

    def _auth(self, request: Request, params: Mapping[str, Any], token_allowed: bool) -> str | None:
        """Slack's auth error for this request, or None when the token is known."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            token: Any = header[7:].strip()
        else:
            token = params.get("token") if token_allowed else None
        if not token:
            return "not_authed"
        return None if token in self.config.tokens else "invalid_auth"

    @staticmethod
    def _error(error: str, status: int = 200, **more: Any) -> JSONResponse:
        return JSONResponse({"ok": False, "error": error, **more}, status_code=status)

    def _refuse(self, method: str, problem: SlackRefusal) -> JSONResponse:
        self._reject("api", problem.error, f"{method}: {problem.detail}")
        return self._error(problem.error, errors=[problem.detail])

    async def _api(self, request: Request) -> Response:
        method = request.path_params["method"]
        try:
            params, token_allowed = await self._params(request)
        except _RequestRefused as refused:
            self._reject("api", refused.error, method)
            return self._error(refused.error, refused.status)
        if (auth_error := self._auth(request, params, token_allowed)) is not None:
            self._reject("api", auth_error, method)
            return self._error(auth_error)
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }.get(method)
        if handler is None:
            return self._error("unknown_method")
        return handler(params)

    def _auth_test(self, params: Mapping[str, Any]) -> Response:
        return JSONResponse(
            {
                "ok": True,
                "url": self.base_url + "/",
                "team": "capstan-dev",
                "user": "capstan",
                "team_id": "T0CAPSTAN",
                "user_id": "U0CAPSTAN",
                "bot_id": "B0CAPSTAN",
            }
        )

    @staticmethod
    def _decoded(params: Mapping[str, Any]) -> tuple[dict[str, Any], SlackRefusal | None]:
        """The message arguments with JSON-string ``blocks``/``attachments``/``metadata`` decoded."""
        payload = dict(params)
        for name, error in (
            ("blocks", "invalid_blocks_format"),
            ("attachments", "invalid_arguments"),
            ("metadata", "invalid_metadata_format"),
        ):
            if name in payload:
                payload[name], ok = decode_json_argument(payload[name])
                if not ok:
                    return payload, SlackRefusal(error, f"{name} is not valid JSON")
        metadata = payload.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            return payload, SlackRefusal("invalid_metadata_format", "metadata must be a JSON object")
        return payload, None

    def _post_message(self, params: Mapping[str, Any]) -> Response:
        channel = self._resolve_channel(params.get("channel"))
        if channel is None:
            self._reject("api", "channel_not_found", str(params.get("channel")))
            return self._error("channel_not_found")
        payload, problem = self._decoded(params)
        if problem is None:
            problem = slack_message_problem(payload)
        if problem is not None:
            return self._refuse("chat.postMessage", problem)
        if (retry := self._throttle("channel:" + channel)) is not None:
            return JSONResponse(
                {"ok": False, "error": "ratelimited"}, status_code=429, headers={"Retry-After": str(retry)}
            )
        message = self._store("api", channel, payload)
        shown = {
            k: v
            for k, v in message.as_json().items()
            if k in ("text", "blocks", "attachments", "thread_ts", "username", "icon_emoji", "icon_url")
            and v is not None
        }
        return JSONResponse(
            {
                "ok": True,
                "channel": channel,
                "ts": message.ts,
                "message": {
                    "type": "message",
                    "subtype": "bot_message",
                    "bot_id": "B0CAPSTAN",
                    **shown,
                    "text": message.text or "",
                    "ts": message.ts,
                },
            }
        )

    def _get_upload_url(self, params: Mapping[str, Any]) -> Response:
        filename = params.get("filename")
        try:
            length = int(params.get("length", ""))
        except (TypeError, ValueError):
            length = -1
        if not isinstance(filename, str) or not filename or length < 0 or length > _MAX_UPLOAD_BYTES:
            return self._error("invalid_arguments")
        with self._lock:
            file_id = f"F{next(self._file_seq):08d}"
            if len(self._uploads) >= _MAX_PENDING_UPLOADS:
                self._uploads.pop(next(iter(self._uploads)))  # the oldest pending upload
            self._uploads[file_id] = _Upload(
                file_id=file_id,
                filename=filename,
                length=length,
                alt_txt=params.get("alt_txt") if isinstance(params.get("alt_txt"), str) else None,
                snippet_type=params.get("snippet_type")
                if isinstance(params.get("snippet_type"), str)
                else None,
            )
        return JSONResponse(
            {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{file_id}", "file_id": file_id}
        )

    async def _upload(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        with self._lock:
            known = file_id in self._uploads
        if not known:
            return PlainTextResponse("not found", status_code=404)
        body = await _read_body(request, _MAX_UPLOAD_BYTES)
        if body is None:
            return PlainTextResponse("request_too_large", status_code=413)
        with self._lock:
            upload = self._uploads.get(file_id)
            if upload is None:
                return PlainTextResponse("not found", status_code=404)
            upload.content = body
        return PlainTextResponse(f"OK - {len(body)}")

    def _complete_upload(self, params: Mapping[str, Any]) -> Response:
        files, ok = decode_json_argument(params.get("files"))
        if not ok or not isinstance(files, list) or not files:
            return self._error("invalid_arguments")
        channel: str | None = None
        if params.get("channel_id") or params.get("channels"):
            wanted = params.get("channel_id") or str(params.get("channels")).split(",")[0]
            channel = self._resolve_channel(wanted)
            if channel is None:
                self._reject("api", "channel_not_found", str(wanted))
                return self._error("channel_not_found")
        comment = params.get("initial_comment")
        message: dict[str, Any] = {"text": comment if isinstance(comment, str) and comment else None}
        if "blocks" in params:
            message["blocks"], ok = decode_json_argument(params["blocks"])
            if not ok or blocks_problem(message["blocks"]) is not None:
                return self._error("invalid_blocks")
        message["thread_ts"] = params.get("thread_ts")
        shared: list[dict[str, Any]] = []
        with self._lock:
            for item in files:
                upload = self._uploads.get(str(item.get("id"))) if isinstance(item, dict) else None
                if upload is None or upload.content is None:
                    return self._error("file_not_found")
                shared.append(
                    {
                        "id": upload.file_id,
                        "name": upload.filename,
                        "title": item.get("title") or upload.filename,
                        "size": len(upload.content),
                        "alt_txt": upload.alt_txt,
                        "snippet_type": upload.snippet_type,
                        "content": upload.content.decode("utf-8", errors="replace"),
                    }
                )
        if channel is not None:
            self._store("api", channel, message, files=shared)
        public = [{k: v for k, v in f.items() if k != "content"} for f in shared]
        return JSONResponse({"ok": True, "files": public})

    # ---- admin HTTP endpoints --------------------------------------------------------------------
    async def _admin_messages(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.clear()
            return JSONResponse({"ok": True})
        return JSONResponse(self.snapshot())

    async def _admin_file(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        with self._lock:
            for message in reversed(self.messages):
                for shared in message.files:
                    if shared["id"] == file_id:
                        return PlainTextResponse(shared["content"])
        return PlainTextResponse("not found", status_code=404)

    async def _admin_ratelimit(self, request: Request) -> Response:
        body = _loads(await request.body() or b"{}")
        try:
            if not isinstance(body, dict):
                raise ValueError
            if "count" in body:
                self.arm_429(int(body["count"]), int(body.get("retry_after", 1)))
            if "rate" in body:
                rate = body["rate"]
                self.set_rate(None if rate is None else float(rate), float(body.get("burst", 1)))
        except (ValueError, TypeError, OverflowError):
            return JSONResponse(
                {"ok": False, "error": "expected {count, retry_after} or {rate, burst}"}, status_code=400
            )
        return JSONResponse({"ok": True})

    async def _page(self, request: Request) -> Response:
        return HTMLResponse(render_page(self.snapshot()))
