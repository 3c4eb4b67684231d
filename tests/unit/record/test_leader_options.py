"""`capstan record --leader-elect`: which Lease a recorder campaigns for, and its options' one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capstan.cli.main import main
from capstan.record import RecorderConfig

pytestmark = pytest.mark.unit


def config(**fields: object) -> RecorderConfig:
    return RecorderConfig.model_validate({"store": "h.db", **fields})


def test_replicas_of_one_configuration_share_a_lease_and_shards_get_one_each() -> None:
    everything = config(source="prod", kubernetes={"kinds": ["ConfigMap", "Secret"]})
    assert (
        everything.lease_name()
        == config(source="prod", kubernetes={"kinds": ["Secret", "ConfigMap"]}).lease_name()
    )
    assert everything.lease_name().startswith("capstan-record-prod-")
    shards = [
        config(source="prod", kubernetes={"kinds": ["ConfigMap"], "namespaces": ["a"]}),
        config(source="prod", kubernetes={"kinds": ["ConfigMap"], "exclude_namespaces": ["a"]}),
        config(source="prod", kubernetes={"kinds": ["Secret"]}),
        config(source="prod", redis=[{"name": "cache", "address": "127.0.0.1:6379"}]),
        config(source="prod", redis=[{"name": "queue", "address": "127.0.0.1:6379"}]),
    ]
    names = {s.lease_name() for s in shards} | {everything.lease_name()}
    assert len(names) == len(shards) + 1


@pytest.mark.parametrize(
    ("source", "prefix"),
    [
        ("Prod_EU/1", "capstan-record-prod-eu-1-"),
        ("__", "capstan-record-default-"),
        ("a" * 300, "capstan-record-"),
    ],
)
def test_a_lease_name_is_a_dns_subdomain_whatever_the_source(source: str, prefix: str) -> None:
    from capstan.cli.options import check_lease_name

    name = config(source=source).lease_name()
    assert name.startswith(prefix) and check_lease_name(name) == name


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "kube", "problem"),
    [
        (["--leader-elect"], False, "--leader-elect: the Lease lives in the recorded cluster; this configuration records none"),
        (["--leader-elect", "--once"], True, "--leader-elect: not with --once"),
        (["--leader-elect", "--lease-name", "Capstan_Record"], True, "--lease-name 'Capstan_Record': a Lease name is"),
        (["--leader-elect", "--lease-namespace", "-x"], True, "--lease-namespace '-x': a Lease name is"),
        (["--leader-elect", "--lease-duration", "2s"], True, "--lease-duration '2s': must be at least 3 s"),
        (["--leader-elect", "--lease-duration", "soon"], True, "--lease-duration 'soon': expected seconds"),
    ],
)  # fmt: skip
def test_leader_election_options_that_cannot_work_are_one_line_and_open_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], kube: bool, problem: str
) -> None:
    path = tmp_path / "record.yaml"
    body: dict[str, object] = {
        "store": str(tmp_path / "h.db"),
        "redis": [{"name": "c", "address": "127.0.0.1:1"}],
    }
    if kube:
        body["kubernetes"] = {"kubeconfig": str(tmp_path / "no-such-kubeconfig")}
    path.write_text(json.dumps(body))
    code, err = run(["record", "--config", str(path), *args], capsys)
    assert code == 2 and err.count("\n") == 1 and problem in err, err
    assert not (tmp_path / "h.db").exists()


def test_a_scoped_lease_name_depends_on_the_scope_not_its_order() -> None:
    from capstan.kube import scoped_lease_name

    assert scoped_lease_name("restarts", "prod", ["a", "b"]) == scoped_lease_name(
        "restarts", "prod", ["b", "a"]
    )
    assert scoped_lease_name("restarts", "prod", []) != scoped_lease_name("restarts", "prod", ["ns=a"])
    assert scoped_lease_name("restarts", "prod", []) != scoped_lease_name("record", "prod", [])
