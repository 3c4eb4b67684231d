"""The local Slack receiver's web page: pure HTML of a receiver snapshot (:meth:`SlackReceiver.snapshot`).

Kept apart from the HTTP shell in ``_receiver.py``: it needs no web framework, only the snapshot's JSON shape, and
every value it shows comes from a message someone posted, so each is escaped here and only http(s) URLs become
links.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any, Final

from capstan.notify._slack_message import slack_message_texts

_COLOR: Final = re.compile(r"^#?[0-9A-Fa-f]{3,8}$")
_NAMED_COLORS: Final = {"good": "#2eb67d", "warning": "#ecb22e", "danger": "#e01e5a"}


def _e(value: Any) -> str:
    return html.escape(str(value))


def _link(url: Any, label: Any = None) -> str:
    """A link only for http(s) URLs (anything else is shown as text)."""
    text = _e(label if label else url)
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return f"<a href='{_e(url)}' rel='noreferrer'>{text}</a>"
    return text


def _render_blocks(blocks: Any) -> str:
    out = []
    for block in blocks or []:
        if not isinstance(block, Mapping):
            continue
        texts = "\n".join(slack_message_texts({"blocks": [block]}))
        kind = _e(block.get("type"))
        extra = ""
        if block.get("type") == "image" and block.get("image_url"):
            extra = " " + _link(block["image_url"], "image")
        if block.get("type") == "video" and block.get("video_url"):
            extra = " " + _link(block["video_url"], "video")
        out.append(f"<div class='block'><span class='kind'>{kind}</span>{extra}<pre>{_e(texts)}</pre></div>")
    return "".join(out)


def _render_attachment(item: Mapping[str, Any]) -> str:
    color = item.get("color")
    color = _NAMED_COLORS.get(str(color), str(color)) if color else "#ddd"
    if not _COLOR.match(color):
        color = "#ddd"
    if not color.startswith("#"):
        color = "#" + color
    rows = []
    if item.get("author_name"):
        rows.append(f"<div class='author'>{_link(item.get('author_link'), item['author_name'])}</div>")
    if item.get("title"):
        rows.append(f"<div class='title'><b>{_link(item.get('title_link'), item['title'])}</b></div>")
    if item.get("text") not in (None, ""):
        rows.append(f"<pre>{_e(item['text'])}</pre>")
    fields = [f for f in item.get("fields") or [] if isinstance(f, Mapping)]
    if fields:
        cells = "".join(
            f"<tr><th>{_e(f.get('title', ''))}</th><td><pre>{_e(f.get('value', ''))}</pre></td></tr>"
            for f in fields
        )
        rows.append(f"<table class='fields'>{cells}</table>")
    rows.append(_render_blocks(item.get("blocks")))
    links = [_link(item[k], k) for k in ("image_url", "thumb_url") if item.get(k)]
    if links:
        rows.append("<div>" + " ".join(links) + "</div>")
    if item.get("footer") or item.get("ts"):
        rows.append(f"<div class='footer'>{_e(item.get('footer', ''))} {_e(item.get('ts', ''))}</div>")
    if item.get("fallback"):
        rows.append(f"<div class='fallback'>fallback: {_e(item['fallback'])}</div>")
    pretext = f"<pre>{_e(item['pretext'])}</pre>" if item.get("pretext") else ""
    return f"{pretext}<div class='attachment' style='border-left-color:{_e(color)}'>{''.join(rows)}</div>"


def _render_message(m: Mapping[str, Any]) -> str:
    who = " ".join(_e(v) for v in (m.get("username"), m.get("icon_emoji")) if v) + (
        " " + _link(m["icon_url"], "icon") if m.get("icon_url") else ""
    )
    asked = f" (asked for {_e(m['requested_channel'])})" if m.get("requested_channel") else ""
    body = []
    for name in ("text", "markdown_text"):
        if m.get(name):
            body.append(f"<pre>{_e(m[name])}</pre>")
    if m.get("truncated"):
        body.append("<div class='note'>text truncated at 40,000 characters, as Slack does</div>")
    body.append(_render_blocks(m.get("blocks")))
    for item in m.get("attachments") or []:
        if isinstance(item, Mapping):
            body.append(_render_attachment(item))
    for shared in m.get("files") or []:
        body.append(
            f"<div class='file'><a href='/_admin/files/{_e(shared['id'])}'>{_e(shared['name'])}</a> "
            f"{_e(shared.get('title', ''))} ({_e(shared['size'])} B)</div>"
        )
    return (
        f"<tr><td>{_e(m['seq'])}</td><td>{_e(m['via'])}</td><td>{_e(m['channel'])}{asked}</td>"
        f"<td>{_e(m['ts'])}</td><td>{_e(m.get('thread_ts') or '')}</td><td>{who}</td>"
        f"<td>{''.join(body)}</td></tr>"
    )


def render_page(snapshot: Mapping[str, Any], *, last: int = 200) -> str:
    """The receiver's HTML page: the last ``last`` messages, newest first, every part escaped."""
    messages = snapshot["messages"]
    rows = "".join(_render_message(m) for m in reversed(messages[-last:]))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>capstan dev slack</title>"
        "<style>body{font-family:sans-serif}td{vertical-align:top;border-top:1px solid #ccc}"
        "pre{white-space:pre-wrap;margin:0}.attachment{border-left:4px solid #ddd;padding-left:8px;margin:4px 0}"
        ".kind,.footer,.fallback,.note{color:#666;font-size:smaller}</style></head><body>"
        f"<h1>capstan dev slack</h1><p>{len(messages)} received, {len(snapshot['rejected'])} rejected, "
        f"{snapshot['count_429']} answered 429, {snapshot.get('dropped', 0)} dropped. "
        "JSON: <a href='/_admin/messages'>/_admin/messages</a></p>"
        "<table><tr><th>#</th><th>via</th><th>channel</th><th>ts</th><th>thread</th><th>as</th>"
        "<th>message</th></tr>" + rows + "</table></body></html>"
    )
