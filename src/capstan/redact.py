"""The one redactor: every path that stores, serves, sends or logs passes what it emits through a :class:`Redactor`.

Two kinds of rule, both configurable (:class:`RedactionPolicy`):

- **by name**: a value whose *name* says it is secret is replaced whole. Names are matched case-insensitively
  against glob patterns (``*PASSWORD*``, ``*PASS``, ``*TOKEN*``, ``*SECRET*``, ``*KEY*``, ``*AUTH*``,
  ``*CREDENTIAL*`` by default): environment variable names, ConfigMap keys, annotation keys, JSON object keys,
  Redis/Valkey parameters and command arguments that name a field (``HSET h password …``), command-line flags
  (``--db-password=…``, ``--token …``).
- **by shape**: secrets found inside any text: URLs with a password (``postgres://u:…@h``), ``key=value`` and
  ``"key": "value"`` pairs whose key is a sensitive name, ``Authorization: Bearer/Basic …``, cloud access keys
  (AWS ``AKIA…``/``ASIA…``, Google ``AIza…``), GitHub (``ghp_…``, ``github_pat_…``), GitLab, Slack (``xox…``
  tokens and webhook URLs, Discord and Teams webhook URLs), OpenAI-style ``sk-…`` and Hugging Face ``hf_…`` keys,
  JWTs and PEM private keys.

A redacted value becomes ``[REDACTED:<h>]`` where ``<h>`` is a keyed hash (HMAC-SHA256, 12 hex digits) of the value
under a random key the history store keeps (:meth:`capstan.store.RedactionKeys.redaction_key`): a changed secret still
shows as a change, and equal values as equal, but without the key nobody can test a guess offline. A redactor
without a key (chat-only paths, logs) writes ``[REDACTED]``.

Redaction is idempotent (a marker is never redacted again), so data read back from the store and redacted once
more is unchanged, and it never mutates its input: containers are copied only on the way to what changed.

Why one module of ~700 lines: the rules above are one policy that every output must apply identically, and the
`Redactor`'s entry points (`text`, `json`, `served`, `args`, `redis_command`, `kube_object`, `secret`, and the
`RedactingFilter` for log records) share its compiled patterns and the one marker format; split across modules they
would invite a second, drifting copy of a rule — the failure this module exists to prevent. The container-editing
walkers are small private helpers at the bottom.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, Final

from pydantic import Field, field_validator

from capstan.config import StrictModel

MARKER: Final = "[REDACTED"
_MARKER_RE: Final = re.compile(r"\[REDACTED(?::[0-9a-f]{12})?\]")
HASH_CHARS: Final = 12
_NAME_MEMO: Final = 4096
_TEXT_MEMO: Final = 65_536
_TEXT_MEMO_CHARS: Final = 512
_UNSEEN: Final[Any] = object()
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"

DEFAULT_SENSITIVE_NAMES: Final = (
    "*PASSWORD*",
    "*PASSWD*",
    "*PASS",
    "*TOKEN*",
    "*SECRET*",
    "*KEY*",
    "*AUTH*",
    "*CREDENTIAL*",
    "*PRIVATE*",
    "*COOKIE*",
)
# Names the patterns above catch that are known not to hold secrets: Kubernetes API fields that *refer* to a key or a
# Secret by name, and Redis/Valkey parameters whose value is a setting or a file path. (A value that looks like a
# secret is still caught by its shape.)
DEFAULT_NOT_SENSITIVE_NAMES: Final = (
    "key",
    "keys",
    "secretName",
    "*SecretName",
    "*KeyRef",
    "*SecretRef",
    "secretRef",
    "automountServiceAccountToken",
    "notify-keyspace-events",
    "tls-auth-clients",
    "*-file",
    "*_FILE",
    "*-dir",
    "*_DIR",
    "*_PATH",
    "*-path",
    "pod-template-hash",
)

# Redis/Valkey commands whose arguments after the command name are credentials (Redis itself hides them in
# SLOWLOG since 7.0, older servers and forks may not).
_REDIS_ALL_ARGS_SECRET: Final = frozenset({"AUTH"})


class RedactionPolicy(StrictModel):
    """What counts as secret (the ``redaction:`` section of the recorder and restarts configurations)."""

    sensitive_names: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SENSITIVE_NAMES),
        description="Glob patterns (case-insensitive) of names whose values are secret.",
    )
    extra_sensitive_names: list[str] = Field(default_factory=list)
    not_sensitive_names: list[str] = Field(
        default_factory=lambda: list(DEFAULT_NOT_SENSITIVE_NAMES),
        description="Glob patterns of names the sensitive patterns match that do not hold secrets.",
    )
    extra_value_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions of secret shapes; a (?P<secret>...) group limits what is replaced.",
    )

    @field_validator("extra_value_patterns")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value


def _glob_regex(patterns: Iterable[str]) -> re.Pattern[str] | None:
    parts = [fnmatch.translate(p).removeprefix("(?s:").removesuffix(")\\Z") for p in patterns]
    if not parts:
        return None
    return re.compile("(?:" + "|".join(f"(?:{p})" for p in parts) + r")\Z", re.IGNORECASE | re.DOTALL)


def _name_fragment(pattern: str) -> str:
    """A glob of a name (``*PASSWORD*``) as a regex matching such a name inside text (``[\\w.-]*PASSWORD[\\w.-]*``)."""
    return "".join(r"[\w.-]*" if ch == "*" else r"[\w.-]" if ch == "?" else re.escape(ch) for ch in pattern)


# Secret shapes: (literals one of which any match contains, lower-cased; the pattern). A ``secret`` (or ``pem``)
# group limits what is replaced; without one the whole match is the secret.
_SHAPES: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    # PEM private keys (also a block cut off before its end, as in a log tail)
    (
        ("-----begin",),
        r"(?P<pem>-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY"
        r"(?: BLOCK)?-----|[\s\S]*\Z))",
    ),
    # URLs with a password in their userinfo: keep scheme, user and host
    (
        ("://",),
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,20}+://[^\s:/@\"'<>]*+:(?P<secret>[^\s@/\"'<>]+)@",
    ),
    # Authorization headers and bearer tokens
    (("bearer", "basic", "token"), r"(?i:\b(?:bearer|basic|token)\s+)(?P<secret>[A-Za-z0-9._~+/-]{8,}=*)"),
    # Slack incoming-webhook URLs and tokens
    (
        ("hooks.slack.com",),
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_-]{8,})",
    ),
    (("xox",), r"\bxox[abposre]-[A-Za-z0-9-]{8,}"),
    (("xapp-",), r"\bxapp-[0-9]-[A-Za-z0-9-]{8,}"),
    # Discord, Teams and Power Automate webhook URLs (the path or the signature is the credential)
    (("discord",), r"discord(?:app)?\.com/api/webhooks/\d+/(?P<secret>[A-Za-z0-9_-]{8,})"),
    (("webhook.office.com",), r"webhook\.office\.com/webhookb2/(?P<secret>[^\s\"'<>]{8,})"),
    (("sig=",), r"[?&]sig=(?P<secret>[^&\s\"'<>]{8,})"),
    # cloud and forge keys
    (
        tuple(f"a{p}" for p in ("kia", "sia", "bia", "cca", "gpa", "ida", "roa", "npa", "nva", "ipa")),
        r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
    ),
    (("aiza",), r"\bAIza[0-9A-Za-z_-]{35}\b"),
    (tuple(f"gh{c}_" for c in "pousr"), r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b"),
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"),
    (("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    (("sk-",), r"\bsk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{20,}\b"),
    (("k_live_",), r"\b[sr]k_live_[A-Za-z0-9]{16,}\b"),
    (("hf_",), r"\bhf_[A-Za-z0-9]{30,}\b"),
    # JSON Web Tokens
    (("eyj",), r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}"),
)


class Redactor:
    """Applies a :class:`RedactionPolicy`; ``key`` makes markers carry a keyed hash (see the module docstring).

    Thread-safe and cheap to share: it holds only compiled patterns and the key.
    """

    def __init__(self, policy: RedactionPolicy | None = None, *, key: bytes | None = None) -> None:
        self.policy = policy or RedactionPolicy()
        self._key = key
        self._names: dict[str, bool] = {}  # is_sensitive_name's answers (names repeat: env names, JSON keys)
        # text()'s answers: an object's next version repeats almost all of its strings (bounded; cleared when full)
        self._texts: dict[str, str | None] = {}  # None: the text holds no secret

    # ---- compiled rules (built once, on first use) ------------------------------------------------------------
    @cached_property
    def _sensitive(self) -> re.Pattern[str] | None:
        return _glob_regex([*self.policy.sensitive_names, *self.policy.extra_sensitive_names])

    @cached_property
    def _exempt(self) -> re.Pattern[str] | None:
        return _glob_regex(self.policy.not_sensitive_names)

    @cached_property
    def _shapes(self) -> re.Pattern[str]:
        shapes = [*(pattern for _, pattern in _SHAPES), *self.policy.extra_value_patterns]
        # every pattern's own ``secret``/``pem`` groups are renamed so one alternation can hold them all
        parts = []
        for index, pattern in enumerate(shapes):
            pattern = pattern.replace("(?P<secret>", f"(?P<s{index}>").replace("(?P<pem>", f"(?P<s{index}>")
            parts.append(f"(?P<m{index}>{pattern})")
        return re.compile("|".join(parts))

    @cached_property
    def _pairs(self) -> re.Pattern[str]:
        """key=value, key: value, "key": "value", key="value" with any word as the key; whether the key names a
        secret is decided in the replacement (a regex of every sensitive pattern inside words backtracks badly).
        Applied after the shapes, so a value's own shape (a URL's password) is already replaced by then and a
        marker (``[``…) is never taken for a value."""
        return re.compile(
            r"(?<![\w./-])(?P<key>[\w.-]{2,64}+)[\"']?\s{0,3}[:=]\s{0,3}[\"']?"
            r"(?:(?i:bearer|basic|token)\s+)?(?!(?i:bearer|basic|token)\b)(?P<secret>[^\s\"',;&<>{}\[\]]{3,})"
        )

    @cached_property
    def _trigger(self) -> re.Pattern[str] | None:
        """A cheap first test on lower-cased text: text holding none of these literals has no secret of a built-in
        shape (None with user shapes configured: then every text gets the full test)."""
        if self.policy.extra_value_patterns:
            return None
        names = [*self.policy.sensitive_names, *self.policy.extra_sensitive_names]
        literals = {literal for triggers, _ in _SHAPES for literal in triggers}
        # the literal parts of the sensitive names (a key=value pair must contain one)
        for pattern in names:
            literals.update(part.lower() for part in re.split(r"[*?\[\]]+", pattern) if part)
        return re.compile("|".join(re.escape(x) for x in sorted(literals, key=lambda x: (-len(x), x))))

    @cached_property
    def _group_names(self) -> dict[str, str | None]:
        """Each alternative's match group -> its secret group (None: the whole match is the secret)."""
        names = self._shapes.groupindex
        count = sum(1 for n in names if n.startswith("m"))
        return {f"m{i}": (f"s{i}" if f"s{i}" in names else None) for i in range(count)}

    # ---- markers ----------------------------------------------------------------------------------------------
    def marker(self, secret: str) -> str:
        """What replaces ``secret``: ``[REDACTED:<keyed hash>]``, or ``[REDACTED]`` without a key."""
        if self._key is None:
            return "[REDACTED]"
        digest = hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
        return f"[REDACTED:{digest[:HASH_CHARS]}]"

    def digest(self, data: Any) -> str:
        """A keyed hash of ``data``'s canonical JSON (``hmac-sha256:…``; ``redacted`` without a key)."""
        canon = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
        if self._key is None:
            return "redacted"
        return "hmac-sha256:" + hmac.new(self._key, canon.encode(), hashlib.sha256).hexdigest()

    # ---- names ------------------------------------------------------------------------------------------------
    def is_sensitive_name(self, name: str) -> bool:
        """Whether a value called ``name`` is secret by its name alone."""
        known = self._names.get(name)
        if known is None:
            known = self._sensitive is not None and self._sensitive.match(name) is not None
            known = known and (self._exempt is None or self._exempt.match(name) is None)
            if len(self._names) >= _NAME_MEMO:
                self._names.clear()
            self._names[name] = known
        return known

    def value(self, value: str) -> str:
        """``value`` replaced whole (its name said it is secret); an empty value or a marker stays as it is."""
        if not value or _is_marker(value):
            return value
        return self.marker(value)

    def named(self, name: str, value: str) -> str:
        """A value with a name: replaced whole if the name is sensitive, else its secrets by shape."""
        return self.value(value) if self.is_sensitive_name(name) else self.text(value)

    # ---- text -------------------------------------------------------------------------------------------------
    def text(self, text: str) -> str:
        """``text`` with every secret found by shape replaced (the rest kept, so the message still reads)."""
        if len(text) < 8:
            return text
        memo = self._texts
        known = memo.get(text, _UNSEEN)
        if known is not _UNSEEN:
            return text if known is None else known
        out = self._scan(text)
        if len(memo) >= _TEXT_MEMO:
            memo.clear()
        if len(text) <= _TEXT_MEMO_CHARS:
            memo[text] = None if out == text else out
        return text if out == text else out

    def _scan(self, text: str) -> str:
        trigger = self._trigger
        if trigger is not None and trigger.search(text.lower()) is None:
            return text
        groups = self._group_names

        def shape(m: re.Match[str]) -> str:
            whole = m.group(0)
            secret_group = groups.get(m.lastgroup or "")
            if secret_group is None:
                return whole if _is_marker(whole) else self.marker(whole)
            start, end = m.span(secret_group)
            secret = m.group(secret_group)
            if start < 0 or _is_marker(secret) or secret.startswith(MARKER) or _masked(secret):
                return whole
            base = m.start(0)
            return whole[: start - base] + self.marker(secret) + whole[end - base :]

        return self._redact_pairs(self._shapes.sub(shape, text))

    def _redact_pairs(self, text: str) -> str:
        """Every pair whose key names a secret, its value replaced. A pair whose key does not (``FATAL:`` in
        ``FATAL: password=…``, ``msg:`` in ``msg: "password": "…"``) does not consume its value: the search goes
        on right after its key, so a sensitive pair inside that value is still found. Bounded: every step moves
        past a key of at least two characters."""
        pattern, kept, scan = self._pairs, 0, 0
        out: list[str] = []
        while (m := pattern.search(text, scan)) is not None:
            secret = m.group("secret")
            if self.is_sensitive_name(m.group("key")) and not _masked(secret):
                start, end = m.span("secret")
                out += (text[kept:start], self.marker(secret))
                kept = scan = end
            else:
                scan = m.end("key")
        out.append(text[kept:])
        return "".join(out)

    def contains_secret(self, text: str) -> bool:
        """Whether :meth:`text` would change ``text``."""
        return self.text(text) != text

    # ---- structured data --------------------------------------------------------------------------------------
    def json(self, data: Any) -> Any:
        """Any JSON value: object members with a sensitive name are replaced whole (scalars) or redacted inside
        (containers); every string is redacted by shape. Returns ``data`` itself when nothing changed."""
        return self._walk(data)

    def strings(self, data: Any) -> Any:
        """Any JSON value with every string redacted by shape only: for Capstan's own structures (notices, records
        as served), whose member names are Capstan's (``thread_key`` is not a secret for being called a key)."""
        kind = type(data)
        if kind is str:
            return self.text(data)
        if kind is dict:
            out = {k: self.strings(v) for k, v in data.items()}
            return data if all(out[k] is v for k, v in data.items()) else out
        if kind is list or kind is tuple:
            items = [self.strings(v) for v in data]
            return data if all(a is b for a, b in zip(items, data, strict=True)) else items
        return data

    def served(self, data: Any) -> Any:
        """Capstan's records in their JSON form, as the CLI and the HTTP API serve them (defence in depth over
        what was redacted when it was written, and the only redaction of what a store holds from before): an
        embedded Kubernetes object through :meth:`kube_object`, a ``config`` change of a secret parameter with
        both values replaced, Event and engine payloads through :meth:`json`, and every other string by shape."""
        kind = type(data)
        if kind is dict:
            if isinstance(data.get("kind"), str) and isinstance(data.get("metadata"), dict):
                return self.kube_object(data)
            parameter = data.get("parameter")
            if isinstance(parameter, str) and "old" in data and "new" in data:
                return {
                    **self.strings(data),
                    "old": self.named(parameter, data["old"])
                    if isinstance(data["old"], str)
                    else data["old"],
                    "new": self.named(parameter, data["new"])
                    if isinstance(data["new"], str)
                    else data["new"],
                }
            if isinstance(data.get("op"), str) and isinstance(data.get("path"), str) and "value" in data:
                # a JSON-patch operation: its value is a piece of a Kubernetes object
                return {**self.strings(data), "value": self.json(data["value"])}
            out = {k: (self._payload(v) if k == "payload" else self.served(v)) for k, v in data.items()}
            return data if all(out[k] is v for k, v in data.items()) else out
        if kind is list:
            items = [self.served(v) for v in data]
            return data if all(a is b for a, b in zip(items, data, strict=True)) else items
        if kind is str:
            return self.text(data)
        return data

    def _payload(self, payload: Any) -> Any:
        """An Event's or an engine entry's payload: a config change by its parameter, anything else by name and
        shape."""
        if isinstance(payload, dict) and isinstance(payload.get("parameter"), str):
            return self.served(payload)
        return self.json(payload)

    def _walk(self, node: Any) -> Any:
        # NOTE: the hot path of recording (every string of every object version): exact type checks, the text memo
        # read inline, and containers copied only when something inside them changed.
        kind = type(node)
        if kind is str:
            return self.text(node)
        if kind is dict:
            out: dict[str, Any] | None = None
            memo = self._texts
            names = self._names
            for key, value in node.items():
                vkind = type(value)
                if vkind is str:
                    sensitive = names.get(key)
                    if sensitive is None:
                        sensitive = self.is_sensitive_name(key) if type(key) is str else False
                    if sensitive:
                        new: Any = self.value(value)
                    elif len(value) < 8:
                        continue
                    else:
                        known = memo.get(value, _UNSEEN)
                        if known is None:
                            continue
                        new = self.text(value) if known is _UNSEEN else known
                elif vkind is dict or vkind is list:
                    new = self._walk(value)
                else:
                    continue
                if new is not value:
                    if out is None:
                        out = dict(node)
                    out[key] = new
            # a name/value pair (container env, and the same shape in custom resources): the name says
            pair_name, pair_value = node.get("name"), node.get("value")
            if type(pair_name) is str and type(pair_value) is str and self.is_sensitive_name(pair_name):
                redacted = self.value(pair_value)
                if redacted != pair_value:
                    out = dict(node) if out is None else out
                    out["value"] = redacted
            return node if out is None else out
        if kind is list:
            out_list: list[Any] | None = None
            for index, value in enumerate(node):
                vkind = type(value)
                if vkind is str:
                    known = self._texts.get(value, _UNSEEN)
                    if len(value) < 8 or known is None:
                        continue
                    new = self.text(value) if known is _UNSEEN else known
                elif vkind is dict or vkind is list:
                    new = self._walk(value)
                else:
                    continue
                if new is not value:
                    if out_list is None:
                        out_list = list(node)
                    out_list[index] = new
            return node if out_list is None else out_list
        if isinstance(node, str | dict | list):  # subclasses (rare): the same rules, by isinstance
            return self._walk(
                str(node) if isinstance(node, str) else dict(node) if isinstance(node, dict) else list(node)
            )
        return node

    def args(self, args: Sequence[str]) -> list[str]:
        """Command-line arguments: ``--name=value`` and ``--name value`` with a sensitive flag name, an argument
        naming a sensitive field followed by its value, and every argument by shape."""
        out = list(args)
        for index, arg in enumerate(args):
            if arg.startswith("-") and "=" in arg:
                flag, _, value = arg.partition("=")
                if self.is_sensitive_name(flag.lstrip("-")):
                    out[index] = f"{flag}={self.value(value)}"
                    continue
            elif (
                index + 1 < len(args)
                and self.is_sensitive_name(arg.lstrip("-"))
                and not args[index + 1].startswith("-")
            ):
                out[index + 1] = self.value(args[index + 1])
            if out[index] == arg:
                out[index] = self.text(arg)
        return out

    def redis_command(self, args: Sequence[str]) -> list[str]:
        """A Redis/Valkey command as logged by SLOWLOG/COMMANDLOG (name first): credentials of AUTH, HELLO …
        AUTH, MIGRATE … AUTH/AUTH2 and ACL SETUSER, values of sensitive CONFIG SET parameters, values after a
        sensitive field or key name, and every argument by shape."""
        if not args:
            return []
        out = [self.text(a) for a in args]
        command = args[0].upper()
        if command in _REDIS_ALL_ARGS_SECRET:
            # AUTH <password> | AUTH <username> <password>: the username stays
            keep = 2 if len(args) == 3 else 1
            return [*out[:keep], *(self.value(a) for a in args[keep:])]
        upper = [a.upper() for a in args]
        if command == "CONFIG" and len(args) > 1 and upper[1] == "SET":
            for i in range(2, len(args) - 1, 2):
                out[i + 1] = self.named(args[i], args[i + 1])
            return out
        if command == "ACL" and len(args) > 1 and upper[1] == "SETUSER":
            for i in range(3, len(args)):
                if args[i][:1] in (">", "<", "#", "!"):
                    out[i] = args[i][0] + self.value(args[i][1:])
            return out
        for i in range(1, len(args)):
            if upper[i] in ("AUTH", "AUTH2") and command in ("HELLO", "MIGRATE"):
                take = 2 if (upper[i] == "AUTH2" or command == "HELLO") else 1
                for j in range(i + 1, min(len(args), i + 1 + take)):
                    if command == "HELLO" and j == i + 1:
                        continue  # HELLO … AUTH <username> <password>: the username stays
                    out[j] = self.value(args[j])
            elif i + 1 < len(args) and self.is_sensitive_name(args[i]):
                out[i + 1] = self.value(args[i + 1])
        return out

    def kube_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A Kubernetes object as it may be stored or shown: a Secret reduced to its key names and keyed hashes;
        every other kind with container ``env`` values, ``args``/``command`` credentials, ConfigMap ``data``
        values, annotation values (``last-applied-configuration`` redacted as the object it holds) and any member
        with a sensitive name redacted, and every string redacted by shape. Returns ``obj`` itself (as a dict)
        when nothing changed."""
        if obj.get("kind") == "Secret":
            return self.secret(obj)
        node: dict[str, Any] = obj if isinstance(obj, dict) else dict(obj)
        node = _edit_containers(node, self._container)
        if node.get("kind") == "ConfigMap":
            node = _edit(node, "data", self._named_map)
            node = _edit(node, "binaryData", self._named_map)
        meta = node.get("metadata")
        if isinstance(meta, dict):
            new_meta = _edit(meta, "annotations", self._annotations)
            if new_meta is not meta:
                node = {**node, "metadata": new_meta}
        walked: dict[str, Any] = self._walk(node)
        return walked

    def secret(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A Secret reduced to metadata, type, key names and a keyed hash per value; no value survives.

        ``kubectl apply`` copies the whole manifest (values included) into the last-applied annotation, so that
        annotation is replaced by its keyed hash as well.
        """
        out: dict[str, Any] = {
            k: copy.deepcopy(v) for k, v in obj.items() if k in ("apiVersion", "kind", "type", "immutable")
        }
        meta = copy.deepcopy(obj.get("metadata") or {})
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for name, value in list(annotations.items()):
                if name == LAST_APPLIED:
                    annotations[name] = self.digest(value)
                elif isinstance(value, str):
                    annotations[name] = self.named(name, value)
        out["metadata"] = self._walk(meta)
        for field_name in ("data", "stringData"):
            values = obj.get(field_name)
            if isinstance(values, dict):
                out[field_name] = {
                    str(k): v if _is_marker(v) else self.marker(str(v)) for k, v in sorted(values.items())
                }
        return out

    # ---- Kubernetes parts -------------------------------------------------------------------------------------
    def _container(self, container: dict[str, Any]) -> dict[str, Any]:
        out = container
        env = container.get("env")
        if isinstance(env, list):
            new_env = [self._env_var(e) for e in env]
            if any(a is not b for a, b in zip(new_env, env, strict=True)):
                out = {**out, "env": new_env}
        for field_name in ("args", "command"):
            values = container.get(field_name)
            if isinstance(values, list) and all(isinstance(v, str) for v in values):
                new = self.args(values)
                if new != values:
                    out = {**out, field_name: new}
        return out

    def _env_var(self, var: Any) -> Any:
        if not isinstance(var, dict) or not isinstance(var.get("value"), str):
            return var
        name = str(var.get("name", ""))
        new = self.named(name, var["value"])
        return var if new == var["value"] else {**var, "value": new}

    def _named_map(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = {str(k): (self.named(str(k), v) if isinstance(v, str) else v) for k, v in data.items()}
        return data if all(out[str(k)] is v for k, v in data.items()) else out

    def _annotations(self, annotations: Any) -> Any:
        if not isinstance(annotations, dict):
            return annotations
        out: dict[str, Any] = {}
        changed = False
        for name, value in annotations.items():
            new = value
            if name == LAST_APPLIED and isinstance(value, str):
                new = self._last_applied(value)
            elif isinstance(value, str):
                new = self.named(str(name), value)
            changed = changed or new is not value
            out[name] = new
        return out if changed else annotations

    def _last_applied(self, text: str) -> str:
        try:
            manifest = json.loads(text)
        except ValueError:
            return self.text(text)
        if not isinstance(manifest, dict):
            return self.text(text)
        redacted = self.kube_object(manifest)
        if redacted is manifest:
            return text
        return json.dumps(redacted, separators=(",", ":"), sort_keys=True)


def _masked(secret: str) -> bool:
    """Already masked by whoever wrote the text (``***``): nothing left to hide."""
    return secret.strip("*") == ""


def _is_marker(value: Any) -> bool:
    return isinstance(value, str) and _MARKER_RE.fullmatch(value) is not None


def _edit(node: dict[str, Any], key: str, fn: Callable[[Any], Any]) -> dict[str, Any]:
    if key not in node:
        return node
    new = fn(node[key])
    return node if new is node[key] else {**node, key: new}


_POD_SPEC_PATHS: Final = (
    ("spec",),  # Pod
    ("spec", "template", "spec"),  # Deployment, ReplicaSet, StatefulSet, DaemonSet, Job
    ("spec", "jobTemplate", "spec", "template", "spec"),  # CronJob
)


def _edit_containers(obj: dict[str, Any], fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """``obj`` with ``fn`` applied to every container of its pod spec (wherever the kind keeps it)."""
    for path in _POD_SPEC_PATHS:
        spec: Any = obj
        for part in path:
            spec = spec.get(part) if isinstance(spec, dict) else None
        if not isinstance(spec, dict):
            continue
        new_spec = spec
        for key in ("containers", "initContainers", "ephemeralContainers"):
            containers = spec.get(key)
            if not isinstance(containers, list):
                continue
            new = [fn(c) if isinstance(c, dict) else c for c in containers]
            if any(a is not b for a, b in zip(new, containers, strict=True)):
                new_spec = {**new_spec, key: new}
        if new_spec is not spec:
            return _replace_at(obj, path, new_spec)
    return obj


def _replace_at(obj: dict[str, Any], path: Sequence[str], value: Any) -> dict[str, Any]:
    if not path:
        return dict(value)
    head, rest = path[0], path[1:]
    return {**obj, head: _replace_at(obj[head], rest, value) if rest else value}


class RedactingFilter(logging.Filter):
    """A logging filter that redacts every record's message, arguments and extra fields by shape, so Capstan's own
    logs carry no secret an exception text or a server's reply happened to hold."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._redactor = redactor or Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        r = self._redactor
        if record.args:
            message = record.getMessage()
            record.msg, record.args = r.text(message), None
        elif isinstance(record.msg, str):
            record.msg = r.text(record.msg)
        for key, value in list(record.__dict__.items()):
            if key in _LOG_RECORD_FIELDS or key.startswith("_"):
                continue
            if isinstance(value, str):
                record.__dict__[key] = r.named(key, value)
            elif isinstance(value, dict | list):
                record.__dict__[key] = r.json(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = r.text(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = r.text(record.exc_text)
        return True


_LOG_RECORD_FIELDS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
}
