"""A local Slack-compatible receiver (`capstan dev slack`) so the notifier, its tests, the demo and the
storm benchmark can talk to "Slack" without the internet.

It implements what Capstan calls through slack_sdk: incoming webhooks (``POST /services/T…/B…/…``) and
the Web API methods ``auth.test``, ``chat.postMessage`` (with ``thread_ts``),
``files.getUploadURLExternal``, the upload URL it hands out, and ``files.completeUploadExternal`` (the
three steps of ``files_upload_v2``). It refuses what Slack refuses (Block Kit limits from
:mod:`capstan.notify._blockkit`, missing text, bad or missing tokens, unknown channels) with Slack's
error strings, and it can answer 429 with ``Retry-After`` on demand: a number of armed 429s or a steady
per-destination rate (admin endpoint ``POST /_admin/ratelimit``). Received messages are kept in memory,
served as JSON at ``/_admin/messages`` and listed on a small HTML page at ``/``.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from capstan.notify._blockkit import MAX_MESSAGE_TEXT, blocks_problem
from capstan.notify._ratelimit import TokenBucket

WEBHOOK_PATH = re.compile(r"^T[A-Z0-9]{1,20}/B[A-Z0-9]{1,20}/[A-Za-z0-9]{8,64}$")
DEV_TOKEN = "xoxb-capstan-dev-token"
DEV_WEBHOOK_PATH = "T0CAPSTAN/B0CAPSTAN/capstandevwebhook0000001"
_MAX_UPLOAD_BYTES = 50 * 1024 * 1024


@dataclass
class ReceivedMessage:
    """One message the receiver accepted."""

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

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "via": self.via,
            "channel": self.channel,
            "ts": self.ts,
            "text": self.text,
            "blocks": self.blocks,
            "thread_ts": self.thread_ts,
            "files": self.files,
            "extra": self.extra,
            "received_at": self.received_at,
        }


@dataclass
class _Upload:
    file_id: str
    filename: str
    length: int
    content: bytes | None = None


@dataclass
class ReceiverConfig:
    """Who the receiver accepts: tokens, channels (id → name), webhook paths (None = any well-formed path)."""

    tokens: frozenset[str] = frozenset({DEV_TOKEN})
    channels: Mapping[str, str] = field(default_factory=lambda: {"C0ALERTS": "alerts", "C0OPS": "ops"})
    webhook_paths: frozenset[str] | None = None
    webhook_channel: str = "C0ALERTS"


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
        self.messages: list[ReceivedMessage] = []
        self.rejected: list[dict[str, Any]] = []
        self._uploads: dict[str, _Upload] = {}
        self._armed_429 = 0
        self._retry_after = 1
        self._rate: tuple[float, float] | None = None
        self._buckets: dict[str, TokenBucket] = {}
        self.count_429 = 0
        self.base_url = ""  # set by whoever serves the app, used to build upload URLs
        self.app = Starlette(
            routes=[
                Route("/", self._page, methods=["GET"]),
                Route("/services/{path:path}", self._webhook, methods=["POST"]),
                Route("/api/{method}", self._api, methods=["GET", "POST"]),
                Route("/upload/v1/{file_id}", self._upload, methods=["POST"]),
                Route("/_admin/messages", self._admin_messages, methods=["GET", "DELETE"]),
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
            }

    def clear(self) -> None:
        with self._lock:
            self.messages.clear()
            self.rejected.clear()
            self.count_429 = 0

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

    def _store(self, via: str, channel: str, payload: Mapping[str, Any], **more: Any) -> ReceivedMessage:
        with self._lock:
            seq = next(self._seq)
            now = self._clock()
            ts = f"{int(now)}.{seq:06d}"
            text = payload.get("text")
            if isinstance(text, str) and len(text) > MAX_MESSAGE_TEXT:
                text = text[:MAX_MESSAGE_TEXT]  # Slack truncates, it does not refuse
            thread_ts = payload.get("thread_ts")
            message = ReceivedMessage(
                seq=seq,
                via=via,
                channel=channel,
                ts=ts,
                text=text if isinstance(text, str) else None,
                blocks=payload.get("blocks") if isinstance(payload.get("blocks"), list) else None,
                thread_ts=str(thread_ts) if thread_ts else None,
                received_at=now,
                **more,
            )
            self.messages.append(message)
            return message

    @staticmethod
    def _content_problem(payload: Mapping[str, Any]) -> tuple[str, str] | None:
        text, blocks, attachments = payload.get("text"), payload.get("blocks"), payload.get("attachments")
        if blocks is not None and (problem := blocks_problem(blocks)):
            return problem
        if not (isinstance(text, str) and text.strip()) and not blocks and not attachments:
            return ("no_text", "text, blocks or attachments are required")
        return None

    # ---- incoming webhooks -----------------------------------------------------------------------
    async def _webhook(self, request: Request) -> Response:
        path = request.path_params["path"].strip("/")
        known = self.config.webhook_paths
        if not WEBHOOK_PATH.match(path) or (known is not None and path not in known):
            self._reject("webhook", "no_service", path)
            return PlainTextResponse("no_service", status_code=404)
        raw = await request.body()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        if payload is None and request.headers.get("content-type", "").startswith("application/x-www-form"):
            form = await request.form()
            try:
                payload = json.loads(str(form.get("payload", "")))
            except ValueError:
                payload = None
        if not isinstance(payload, dict):
            self._reject("webhook", "invalid_payload", "body is not a JSON object")
            return PlainTextResponse("invalid_payload", status_code=400)
        if problem := self._content_problem(payload):
            self._reject("webhook", *problem)
            return PlainTextResponse(problem[0], status_code=400)
        if (retry := self._throttle("webhook:" + path)) is not None:
            return PlainTextResponse("rate_limited", status_code=429, headers={"Retry-After": str(retry)})
        self._store("webhook", self.config.webhook_channel, payload, extra={"webhook": path})
        return PlainTextResponse("ok")

    # ---- Web API ---------------------------------------------------------------------------------
    @staticmethod
    async def _params(request: Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query_params)
        if request.method == "POST":
            ctype = request.headers.get("content-type", "")
            if ctype.startswith("application/json"):
                raw = await request.body()
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    raise ValueError("invalid_json")
                params.update(body)
            elif ctype.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
                form = await request.form()
                params.update({k: v for k, v in form.items() if isinstance(v, str)})
        return params

    def _auth(self, request: Request, params: Mapping[str, Any]) -> str | None:
        """Slack's auth error for this request, or None when the token is known."""
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else params.get("token")
        if not token:
            return "not_authed"
        return None if token in self.config.tokens else "invalid_auth"

    @staticmethod
    def _error(error: str, **more: Any) -> JSONResponse:
        return JSONResponse({"ok": False, "error": error, **more})

    async def _api(self, request: Request) -> Response:
        method = request.path_params["method"]
        try:
            params = await self._params(request)
        except ValueError:
            self._reject("api", "invalid_json", method)
            return self._error("invalid_json")
        if (auth_error := self._auth(request, params)) is not None:
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

    def _post_message(self, params: Mapping[str, Any]) -> Response:
        channel = self._resolve_channel(params.get("channel"))
        if channel is None:
            self._reject("api", "channel_not_found", str(params.get("channel")))
            return self._error("channel_not_found")
        blocks = params.get("blocks")
        if isinstance(blocks, str):  # form-encoded callers send blocks as a JSON string
            try:
                blocks = json.loads(blocks)
            except ValueError:
                return self._error("invalid_blocks_format")
        payload = {**params, "blocks": blocks}
        if problem := self._content_problem(payload):
            self._reject("api", *problem)
            return self._error(problem[0])
        if (retry := self._throttle("channel:" + channel)) is not None:
            return JSONResponse(
                {"ok": False, "error": "ratelimited"}, status_code=429, headers={"Retry-After": str(retry)}
            )
        message = self._store("api", channel, payload)
        return JSONResponse(
            {
                "ok": True,
                "channel": channel,
                "ts": message.ts,
                "message": {"type": "message", "text": message.text or "", "ts": message.ts},
            }
        )

    def _get_upload_url(self, params: Mapping[str, Any]) -> Response:
        filename = params.get("filename")
        try:
            length = int(params.get("length", ""))
        except (TypeError, ValueError):
            length = -1
        if not filename or length < 0 or length > _MAX_UPLOAD_BYTES:
            return self._error("invalid_arguments")
        with self._lock:
            file_id = f"F{next(self._file_seq):08d}"
            self._uploads[file_id] = _Upload(file_id=file_id, filename=str(filename), length=length)
        return JSONResponse(
            {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{file_id}", "file_id": file_id}
        )

    async def _upload(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        body = await request.body()
        with self._lock:
            upload = self._uploads.get(file_id)
            if upload is None:
                return PlainTextResponse("not found", status_code=404)
            upload.content = body
        return PlainTextResponse(f"OK - {len(body)}")

    def _complete_upload(self, params: Mapping[str, Any]) -> Response:
        files = params.get("files")
        if isinstance(files, str):
            try:
                files = json.loads(files)
            except ValueError:
                return self._error("invalid_arguments")
        if not isinstance(files, list) or not files:
            return self._error("invalid_arguments")
        channel: str | None = None
        if params.get("channel_id") or params.get("channels"):
            wanted = params.get("channel_id") or str(params.get("channels")).split(",")[0]
            channel = self._resolve_channel(wanted)
            if channel is None:
                self._reject("api", "channel_not_found", str(wanted))
                return self._error("channel_not_found")
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
                        "content": upload.content.decode("utf-8", errors="replace"),
                    }
                )
        if channel is not None:
            comment = params.get("initial_comment")
            self._store(
                "api",
                channel,
                {"text": comment if isinstance(comment, str) else None, "thread_ts": params.get("thread_ts")},
                files=shared,
            )
        public = [{k: v for k, v in f.items() if k != "content"} for f in shared]
        return JSONResponse({"ok": True, "files": public})

    # ---- admin HTTP endpoints --------------------------------------------------------------------
    async def _admin_messages(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.clear()
            return JSONResponse({"ok": True})
        return JSONResponse(self.snapshot())

    async def _admin_ratelimit(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
            if not isinstance(body, dict):
                raise ValueError
            if "count" in body:
                self.arm_429(int(body["count"]), int(body.get("retry_after", 1)))
            if "rate" in body:
                rate = body["rate"]
                self.set_rate(None if rate is None else float(rate), float(body.get("burst", 1)))
        except (ValueError, TypeError):
            return JSONResponse(
                {"ok": False, "error": "expected {count, retry_after} or {rate, burst}"}, status_code=400
            )
        return JSONResponse({"ok": True})

    async def _page(self, request: Request) -> Response:
        snap = self.snapshot()
        rows = []
        for m in reversed(snap["messages"][-200:]):
            body = m["text"] or ""
            for block in m["blocks"] or []:
                text = block.get("text") if isinstance(block, dict) else None
                if isinstance(text, dict):
                    body += "\n" + str(text.get("text", ""))
            files = ", ".join(f"{f['name']} ({f['size']} B)" for f in m["files"])
            rows.append(
                f"<tr><td>{m['seq']}</td><td>{html.escape(m['channel'])}</td><td>{html.escape(m['ts'])}</td>"
                f"<td>{html.escape(m['thread_ts'] or '')}</td><td><pre>{html.escape(body)}</pre>"
                f"{html.escape(files)}</td></tr>"
            )
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>capstan dev slack</title>"
            "<style>body{font-family:sans-serif}td{vertical-align:top;border-top:1px solid #ccc}"
            "pre{white-space:pre-wrap;margin:0}</style></head><body>"
            f"<h1>capstan dev slack</h1><p>{len(snap['messages'])} received, "
            f"{len(snap['rejected'])} rejected, "
            f"{snap['count_429']} answered 429. JSON: <a href='/_admin/messages'>/_admin/messages</a></p>"
            "<table><tr><th>#</th><th>channel</th><th>ts</th><th>thread</th><th>message</th></tr>"
            + "".join(rows)
            + "</table></body></html>"
        )
        return HTMLResponse(page)
