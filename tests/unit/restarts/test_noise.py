"""Filters and mute windows: anchored patterns, label selectors, digests that lose nothing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capstan.kube import parse_label_selector
from capstan.restarts import ContainerRestart
from capstan.restarts._noise import NoiseGate, RestartFilter
from tests.unit.restarts.podkit import pod

pytestmark = pytest.mark.unit


def _r(pod_name: str = "web-1", count: int = 1, container: str = "app") -> ContainerRestart:
    return ContainerRestart("default", pod_name, container, "uid-" + pod_name, "container", count - 1, count)


def test_namespace_patterns_are_anchored() -> None:
    f = RestartFilter(include_namespaces=(re.compile("default"),))
    assert f.admits_pod(pod(namespace="default"))
    assert not f.admits_pod(pod(namespace="my-default-x"))
    ex = RestartFilter(exclude_pods=(re.compile(r"batch-.*"),))
    assert not ex.admits_pod(pod(name="batch-1")) and ex.admits_pod(pod(name="web-batch-1"))


def test_exit_code_zero_is_optional() -> None:
    assert RestartFilter().admits_exit_code(0)
    assert not RestartFilter(ignore_exit_code_zero=True).admits_exit_code(0)
    assert RestartFilter(ignore_exit_code_zero=True).admits_exit_code(137)


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web,tier!=db", {"app": "web"}, True),
        ("app in (web, api),!legacy", {"app": "api"}, True),
        ("app in (web, api),!legacy", {"app": "api", "legacy": "1"}, False),
        ("env notin (prod)", {}, True),
        ("team", {"team": "ml"}, True),
        ("team", {}, False),
        ("example.com/gpu=true", {"example.com/gpu": "true"}, True),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], matches: bool) -> None:
    f = RestartFilter(selector=parse_label_selector(selector))
    assert f.admits_pod(pod(labels=labels)) is matches


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ("app=web,,x", "empty requirement"),
        ("app in (a,", "unbalanced"),
        ("app in ()", "empty value"),
        ("-bad=x", "invalid label key"),
        ("app=we b", "not a label requirement"),
        ("app=" + "v" * 70, "invalid label value"),
    ],
)
def test_label_selector_errors(selector: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_label_selector(selector)


def test_mute_window_counts_then_digests() -> None:
    gate = NoiseGate(mute_seconds=600, restart_cap=30)
    assert gate.admit("default/Deployment/web", _r("web-1"), 0) == "report"
    assert gate.admit("default/Deployment/web", _r("web-2"), 10) == "digest"  # other replica, same owner
    assert gate.admit("default/Deployment/web", _r("web-1", 2), 20) == "digest"
    assert gate.admit("default/Deployment/api", _r("api-1"), 30) == "report"  # other workload not muted
    assert gate.due(599) == []
    [digest] = gate.due(600)
    assert digest.owner_key == "default/Deployment/web" and digest.restart_count == 2
    assert (digest.opened_at, digest.closed_at, digest.reason) == (0, 600, "mute")
    assert gate.admit("default/Deployment/web", _r("web-1", 3), 601) == "report"


def test_restart_after_window_end_does_not_lose_the_pending_digest() -> None:
    gate = NoiseGate(mute_seconds=60, restart_cap=0)
    gate.admit("w", _r(count=1), 0)
    gate.admit("w", _r(count=2), 30)
    assert gate.admit("w", _r(count=3), 100) == "report"  # window ended, due() was not called in between
    [digest] = gate.due(100)
    assert [r.restart_count for r in digest.restarts] == [2]


def test_cap_switches_to_digest_and_never_drops() -> None:
    gate = NoiseGate(mute_seconds=0, restart_cap=30, cap_window_seconds=300)
    assert gate.admit("w", _r(count=30), 0) == "report"
    assert gate.admit("w", _r(count=31), 5) == "digest"
    assert gate.admit("w", _r(count=32), 50) == "digest"
    [digest] = gate.due(305)
    assert digest.reason == "cap" and [r.restart_count for r in digest.restarts] == [31, 32]


def test_no_mute_reports_everything() -> None:
    gate = NoiseGate(mute_seconds=0, restart_cap=0)
    assert [gate.admit("w", _r(count=i), i) for i in range(1, 6)] == ["report"] * 5
    assert gate.open_windows == 0


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 60), st.floats(0, 50)),
        max_size=80,
    ),
    st.sampled_from([0.0, 30.0, 120.0]),
    st.sampled_from([0, 20]),
)
def test_every_restart_is_reported_or_digested_exactly_once(
    events: list[tuple[str, int, float]], mute: float, cap: int
) -> None:
    gate = NoiseGate(mute_seconds=mute, restart_cap=cap, cap_window_seconds=45)
    now, reported, digested = 0.0, [], []
    for seq, (owner, count, gap) in enumerate(events):
        now += gap
        restart = _r(f"{owner}-{seq}", count)
        if gate.admit(owner, restart, now) == "report":
            reported.append(restart)
        for d in gate.due(now):
            digested.extend(d.restarts)
    for d in gate.flush(now + 1):
        digested.extend(d.restarts)
    assert sorted(reported + digested) == sorted(_r(f"{o}-{i}", c) for i, (o, c, _) in enumerate(events))
    assert gate.open_windows == 0


def test_long_digest_is_split_and_lists_every_restart() -> None:
    from capstan.notify import blocks_problem, render_discord, render_slack
    from capstan.restarts._noise import Digest
    from capstan.restarts._render import digest_notices, restart_token
    from tests.integration.notify.receivers import discord_problem

    restarts = [_r(f"worker-{i:03d}-" + "x" * 40, 31 + i % 3) for i in range(100)]
    notices = digest_notices(Digest("ml/Deployment/worker", 0, 600, restarts, "cap"), "dev")
    assert len(notices) == 3 and notices[0].title.endswith("(part 1/3)")
    for notice in notices:
        assert blocks_problem(render_slack(notice)["blocks"]) is None
        assert discord_problem(render_discord(notice)) is None
    slack_text = "\n".join(
        b["text"]["text"]
        for n in notices
        for b in render_slack(n)["blocks"]
        if b["type"] == "section" and "text" in b
    )
    assert all(restart_token(r) in slack_text for r in restarts)


def test_combined_digests_and_reports_still_name_every_restart() -> None:
    """When the drainer combines queued messages, the briefs carry every restart token (accounting still works)."""
    from capstan.notify import SlackWebhookSink, blocks_problem, combine_notices, render_slack
    from capstan.restarts._noise import Digest
    from capstan.restarts._render import digest_notices, restart_token

    capacity = SlackWebhookSink("s", "https://hooks.slack.com/services/T/B/x").capacity
    restarts = [_r(f"worker-{i:03d}", 1 + i % 3) for i in range(40)]
    notices = digest_notices(Digest("ml/Deployment/worker", 0, 600, restarts, "mute"), "dev")
    notices += digest_notices(Digest("ml/Deployment/other", 0, 600, restarts[:5], "mute"), "dev")
    assert sum(n.brief_size() for n in notices) <= capacity.text_chars
    combined = combine_notices(notices)
    assert combined.title.startswith("Restart digest: ")  # receivers still see a digest
    rendered = render_slack(combined)
    assert blocks_problem(rendered["blocks"]) is None
    text = "\n".join(b["text"]["text"] for b in rendered["blocks"] if b["type"] == "section" and "text" in b)
    assert all(restart_token(r) in text for r in restarts)
