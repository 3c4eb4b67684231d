"""The one redactor: names, shapes, keyed markers, structures, idempotence, and never mutating its input."""

from __future__ import annotations

import copy
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.record import DiffPolicy, make_patch, normalize, plan_config
from capstan.redact import RedactingFilter, RedactionPolicy, Redactor

pytestmark = pytest.mark.unit

KEY = b"k" * 32
R = Redactor(key=KEY)

# One planted secret of every built-in shape, each in the text that carries it.
SHAPED = {
    "url password": ("postgres://app:Pl4nted-url-pw@db:5432/x", "Pl4nted-url-pw"),
    "key=value": ("db password=Pl4ntedKv9 host=x", "Pl4ntedKv9"),
    "json pair": ('{"client_secret": "Pl4ntedJs0n"}', "Pl4ntedJs0n"),
    "bearer": ("Authorization: Bearer Pl4ntedBearerToken", "Pl4ntedBearerToken"),
    "basic": ("Authorization: Basic dXNlcjpQbDRudGVk", "dXNlcjpQbDRudGVk"),
    "aws key": ("used AKIAPL4NTEDAWSKEY000 to sign", "AKIAPL4NTEDAWSKEY000"),
    "github": ("token ghp_Pl4ntedGithubToken0123456789abcdef ok", "ghp_Pl4ntedGithubToken0123456789abcdef"),
    "github pat": ("github_pat_Pl4nted0123456789_abcdefghij", "github_pat_Pl4nted0123456789_abcdefghij"),
    "slack token": ("xoxb-1234567890-Pl4ntedSlack", "xoxb-1234567890-Pl4ntedSlack"),
    "slack webhook": ("POST https://hooks.slack.com/services/T0/B0/Pl4ntedHook", "Pl4ntedHook"),
    "openai": ("OPENAI sk-proj-Pl4ntedOpenAiKey0123456789", "sk-proj-Pl4ntedOpenAiKey0123456789"),
    "huggingface": ("hf_Pl4ntedHuggingFaceToken0123456789", "hf_Pl4ntedHuggingFaceToken0123456789"),
    "google": ("AIzaPl4ntedGoogleKey0123456789abcdefghi", "AIzaPl4ntedGoogleKey0123456789abcdefghi"),
    "jwt": (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJQbDRudGVkIn0.Pl4ntedSignature_abc",
        "Pl4ntedSignature_abc",
    ),
    "pem": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIPl4ntedPem\n-----END RSA PRIVATE KEY-----",
        "MIIPl4ntedPem",
    ),
    "pem cut off": ("log tail\n-----BEGIN PRIVATE KEY-----\nMIIPl4ntedCut", "MIIPl4ntedCut"),
    "discord": (
        "https://discord.com/api/webhooks/123456789/Pl4ntedDiscordToken-abc",
        "Pl4ntedDiscordToken-abc",
    ),
    "teams": (
        "https://contoso.webhook.office.com/webhookb2/abc@def/IncomingWebhook/Pl4ntedTeams0123/xyz",
        "Pl4ntedTeams0123",
    ),
}


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_every_built_in_shape_is_redacted_and_the_text_around_it_kept(name: str) -> None:
    text, secret = SHAPED[name]
    out = R.text(text)
    assert secret not in out
    assert "[REDACTED:" in out
    assert R.text(out) == out  # idempotent: a marker is never redacted again
    first_word = text.split()[0]
    if secret not in first_word and "BEGIN" not in first_word:
        assert out.startswith(first_word)


def test_markers_are_keyed_hashes_equal_for_equal_values_and_unkeyed_without_a_key() -> None:
    a = R.text("password=Pl4nted-one")
    assert a == R.text("password=Pl4nted-one")
    assert a != R.text("password=Pl4nted-two")
    assert a != Redactor(key=b"j" * 32).text("password=Pl4nted-one")  # another store, another marker
    assert Redactor().text("password=Pl4nted-one") == "password=[REDACTED]"


def test_plain_text_is_left_alone() -> None:
    for text in (
        'Readiness probe failed: Get "http://10.0.0.1:8080/healthz": dial tcp: connection refused',
        "Back-off restarting failed container server in pod vllm-0_inference(0b7c4a7e)",
        "2026-11-30T10:00:05Z INFO loaded model meta-llama/Llama-3.1-8B in 41.2 s",
        "cache key=abc123 hit",  # "key" alone names a key, not a secret
        "image vllm/vllm-openai:v0.11.0 pulled",
        "--token-file '/run/secrets/token': empty",  # a path that ends in a sensitive word is not a key
        "'http://me:***@h:1': credentials in the URL are not supported",  # already masked
    ):
        assert R.text(text) == text


def test_names_by_default_patterns_exemptions_and_configuration() -> None:
    sensitive = [
        "requirepass",
        "masterauth",
        "DB_PASSWORD",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "tls-key-file-pass",
    ]
    plain = [
        "PATH",
        "HOME",
        "PWD",
        "key",
        "secretName",
        "notify-keyspace-events",
        "tls-key-file",
        "maxmemory",
    ]
    assert all(R.is_sensitive_name(n) for n in sensitive)
    assert not any(R.is_sensitive_name(n) for n in plain)
    custom = Redactor(RedactionPolicy(extra_sensitive_names=["*DSN"], not_sensitive_names=["HF_TOKEN"]))
    assert custom.is_sensitive_name("SENTRY_DSN") and not custom.is_sensitive_name("HF_TOKEN")


def test_a_configured_value_pattern_is_redacted() -> None:
    r = Redactor(RedactionPolicy(extra_value_patterns=[r"acct-(?P<secret>\d{6})"]))
    assert r.text("billing acct-123456 charged") == "billing acct-[REDACTED] charged"


def test_kubernetes_objects_env_args_configmaps_annotations_and_custom_fields() -> None:
    last_applied = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "DB_PASS", "value": "e1"}]}]}}
        },
    }
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "api",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(last_applied),
                "example.com/api-token": "Pl4ntedAnnotation",
                "example.com/note": "call with password=Pl4ntedNote",
            },
        },
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [
                        {"name": "init", "command": ["sh", "-c", "login --token Pl4ntedInit"]}
                    ],
                    "containers": [
                        {
                            "name": "c",
                            "image": "api:1",
                            "args": ["--db-password=Pl4ntedArg", "--api-key", "Pl4ntedArg2", "--port", "80"],
                            "env": [
                                {"name": "DB_PASSWORD", "value": "Pl4ntedEnv"},
                                {"name": "DSN", "value": "postgres://u:Pl4ntedDsn@db/x"},
                                {"name": "MODE", "value": "production"},
                                {
                                    "name": "HF_TOKEN",
                                    "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
                                },
                            ],
                        }
                    ],
                }
            }
        },
    }
    original = copy.deepcopy(deploy)
    out = R.kube_object(deploy)
    text = json.dumps(out)
    for planted in ("e1", "Pl4ntedAnnotation", "Pl4ntedNote", "Pl4ntedInit", "Pl4ntedArg", "Pl4ntedArg2"):
        assert f'"{planted}"' not in text and f"={planted}" not in text and f" {planted}" not in text
    assert "Pl4nted" not in text
    assert deploy == original  # never mutated
    container = out["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][2] == {"name": "MODE", "value": "production"}
    assert container["env"][3]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}  # names a key
    assert container["args"][3:] == ["--port", "80"]
    cm = {
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"redis_password": "Pl4ntedCm", "mode": "x"},
    }
    assert R.kube_object(cm)["data"] == {"redis_password": R.value("Pl4ntedCm"), "mode": "x"}
    crd = {"kind": "Database", "spec": {"auth": {"password": "Pl4ntedCrd"}, "size": "10Gi"}}
    assert "Pl4ntedCrd" not in json.dumps(R.kube_object(crd))


def test_an_object_without_secrets_is_returned_as_it_is() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "nginx:1", "env": [{"name": "MODE", "value": "production"}]}
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        },
        "status": {"phase": "Running", "startTime": "2026-11-30T10:00:00Z"},
    }
    assert R.kube_object(pod) is pod


def test_a_changed_secret_value_is_a_change_the_same_value_is_not() -> None:
    def deploy(value: str) -> dict[str, object]:
        env = [{"name": "API_TOKEN", "value": value}]
        return {
            "kind": "Deployment",
            "metadata": {"name": "d", "uid": "u"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "env": env}]}}},
        }

    policy = DiffPolicy()
    before = normalize(deploy("Pl4nted-a"), policy, R)
    assert make_patch(before, normalize(deploy("Pl4nted-a"), policy, R)) == []
    patch = make_patch(before, normalize(deploy("Pl4nted-b"), policy, R))
    assert [op["path"] for op in patch] == ["/spec/template/spec/containers/0/env/0/value"]
    assert "Pl4nted" not in json.dumps(patch)


def test_redis_commands() -> None:
    v = R.value
    assert R.redis_command(["AUTH", "Pl4nted"]) == ["AUTH", v("Pl4nted")]
    assert R.redis_command(["AUTH", "alice", "Pl4nted"]) == ["AUTH", "alice", v("Pl4nted")]
    assert R.redis_command(["HELLO", "3", "AUTH", "alice", "Pl4nted"]) == [
        "HELLO",
        "3",
        "AUTH",
        "alice",
        v("Pl4nted"),
    ]
    assert R.redis_command(["MIGRATE", "h", "6379", "k", "0", "5000", "AUTH", "Pl4nted"])[-1] == v("Pl4nted")
    assert R.redis_command(["MIGRATE", "h", "6379", "k", "0", "5000", "AUTH2", "u", "Pl4nted"])[-2:] == [
        v("u"),
        v("Pl4nted"),
    ]
    assert R.redis_command(["CONFIG", "SET", "masterauth", "Pl4nted", "maxmemory", "1gb"]) == [
        "CONFIG",
        "SET",
        "masterauth",
        v("Pl4nted"),
        "maxmemory",
        "1gb",
    ]
    assert R.redis_command(["ACL", "SETUSER", "bob", "on", ">Pl4nted", "~*"])[4] == ">" + v("Pl4nted")
    assert R.redis_command(["HSET", "user:1", "password", "Pl4nted", "name", "bob"])[3:] == [
        v("Pl4nted"),
        "name",
        "bob",
    ]
    assert R.redis_command(["SET", "k", "postgres://u:Pl4nted@h/db"]) == [
        "SET",
        "k",
        R.text("postgres://u:Pl4nted@h/db"),
    ]
    assert R.redis_command(["GET", "k"]) == ["GET", "k"]


def test_config_changes_of_secret_parameters_are_recorded_as_keyed_hashes_only() -> None:
    _, cursor = plan_config(
        "t", "run", None, {"requirepass": "Pl4nted-a", "maxmemory": "0"}, observed_at=1, redact=R.named
    )
    assert "Pl4nted" not in json.dumps(cursor.state)
    entries, cursor = plan_config(
        "t", "run", cursor, {"requirepass": "Pl4nted-b", "maxmemory": "0"}, observed_at=2, redact=R.named
    )
    [entry] = entries
    assert entry.payload["parameter"] == "requirepass"
    assert entry.payload["old"] != entry.payload["new"]
    assert "Pl4nted" not in json.dumps([entry.payload, cursor.state])
    # a snapshot stored before redaction existed (clear text) is compared redacted: the same value is no change
    legacy = cursor.__class__("t", "config", "run", 5, {"config": {"requirepass": "Pl4nted-b"}})
    entries, _ = plan_config("t", "run", legacy, {"requirepass": "Pl4nted-b"}, observed_at=3, redact=R.named)
    assert entries == []


def test_the_logging_filter_redacts_messages_arguments_extra_fields_and_exceptions() -> None:
    record = logging.LogRecord(
        "capstan.x", logging.ERROR, "f", 1, "connect %s failed", ("redis://:Pl4nted@h",), None
    )
    record.__dict__["error"] = "password=Pl4nted2"
    record.__dict__["api_token"] = "Pl4nted3"
    try:
        raise RuntimeError("Authorization: Bearer Pl4ntedExc0123")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    assert RedactingFilter(R).filter(record)
    rendered = logging.Formatter().format(record)
    assert "Pl4nted" not in rendered and "[REDACTED:" in rendered
    assert "Pl4nted" not in record.__dict__["error"] + record.__dict__["api_token"]


_WORDS = st.text(alphabet="abcdefghij klmnop:=/@.-_\n", max_size=40)


@settings(max_examples=300, deadline=None)
@given(before=_WORDS, after=_WORDS, which=st.sampled_from(sorted(SHAPED)))
def test_a_planted_secret_never_survives_whatever_surrounds_it(before: str, after: str, which: str) -> None:
    text, secret = SHAPED[which]
    out = R.text(f"{before} {text} {after}")
    assert secret not in out
    assert R.text(out) == out


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    once = R.text(text)
    assert R.text(once) == once


@pytest.mark.parametrize(
    "text",
    [
        "FATAL: password=Pl4nted-pw rejected",
        "FATAL:password=Pl4nted-pw",
        'msg: "password": "Pl4nted-pw"',
        "a: b: c= password=Pl4nted-pw",
        "url=https://h/x?api_token=Pl4nted-pw&q=1",
        "error: login failed: DB_PASSWORD='Pl4nted-pw'",
    ],
)
def test_a_sensitive_pair_inside_another_pairs_value_is_found(text: str) -> None:
    """A pair whose key is not sensitive (``FATAL:``) must not swallow the sensitive pair that is its value."""
    out = R.text(text)
    assert "Pl4nted" not in out and "[REDACTED:" in out
    assert R.text(out) == out


@settings(max_examples=300, deadline=None)
@given(
    before=_WORDS,
    gap=st.sampled_from([" ", "\n", ": ", ":", ", ", "; ", '"', "'", "="]),
    key=st.sampled_from(["password", "api_token", "SECRET_KEY", "auth"]),
    sep=st.sampled_from(["=", ": ", ":", '": "', "='"]),
)
def test_a_sensitive_pair_after_any_prefix_is_redacted(before: str, gap: str, key: str, sep: str) -> None:
    out = R.text(f"{before}{gap}{key}{sep}Pl4nted-pw-value rest")
    assert "Pl4nted" not in out
    assert R.text(out) == out
