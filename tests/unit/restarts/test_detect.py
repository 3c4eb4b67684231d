"""Restart detection: per container, by name, no replay, no resync alerts, restarts while down flagged."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capstan.restarts import ContainerRestart, detect_restarts, detect_while_down
from tests.unit.restarts.podkit import pod, status

pytestmark = pytest.mark.unit


def test_add_and_resync_report_nothing() -> None:
    current = pod(containers=[status("app", 7)])
    assert detect_restarts(None, current) == []  # initial list: no replay of old restarts
    assert detect_restarts(current, copy.deepcopy(current)) == []  # resync: same counts


def test_only_the_container_that_restarted_is_reported() -> None:
    old = pod(containers=[status("app", 2), status("proxy", 0)])
    new = pod(containers=[status("app", 2), status("proxy", 1, reason="Error", exit_code=1)])
    [restart] = detect_restarts(old, new)
    assert (restart.container, restart.container_type, restart.previous_count, restart.restart_count) == (
        "proxy",
        "container",
        0,
        1,
    )


def test_init_sidecar_and_ephemeral_containers() -> None:
    old = pod(
        init=[status("migrate", 0), status("log-shipper", 1)],
        sidecars=("log-shipper",),
        ephemeral=[status("debugger", 0)],
    )
    new = pod(
        init=[status("migrate", 1), status("log-shipper", 2)],
        sidecars=("log-shipper",),
        ephemeral=[status("debugger", 3)],
    )
    found = {(r.container, r.container_type) for r in detect_restarts(old, new)}
    assert found == {("migrate", "init"), ("log-shipper", "sidecar")}


def test_recreated_pod_with_the_same_name_is_not_a_restart() -> None:
    old = pod(uid="uid-1", containers=[status("app", 5)])
    new = pod(uid="uid-2", containers=[status("app", 6)])
    assert detect_restarts(old, new) == []


def test_several_restarts_between_updates_keep_their_numbers() -> None:
    [restart] = detect_restarts(pod(containers=[status("app", 3)]), pod(containers=[status("app", 5)]))
    assert list(restart.restart_numbers) == [4, 5] and restart.restarts == 2


def test_container_first_seen_with_restarts_counts_from_zero() -> None:
    old = pod(containers=[])
    new = pod(containers=[status("app", 1)])
    [restart] = detect_restarts(old, new)
    assert restart.previous_count == 0


def test_restarts_while_down_are_flagged_and_new_containers_are_a_baseline() -> None:
    current = pod(containers=[status("app", 4), status("proxy", 9)])
    [restart] = detect_while_down(current, {("uid-1", "app"): 2})
    assert restart == ContainerRestart("default", "web-7d9f8-abcde", "app", "uid-1", "container", 2, 4, True)
    assert detect_while_down(current, {("uid-1", "app"): 4}) == []


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=30))
def test_every_increment_is_counted_exactly_once(steps: list[int]) -> None:
    count, previous = 0, pod(containers=[status("app", 0)])
    seen: list[int] = []
    for step in steps:
        count += step
        current = pod(containers=[status("app", count)])
        for r in detect_restarts(previous, current):
            seen.extend(r.restart_numbers)
        previous = current
    assert seen == list(range(1, count + 1))
