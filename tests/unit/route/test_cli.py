"""`capstan route check` and `capstan route simulate` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.cli.main import main

pytestmark = pytest.mark.unit


def test_check_accepts_a_good_config_and_names_a_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "route.yaml"
    good.write_text(
        "endpoints:\n  - {name: r0, url: 'http://127.0.0.1:8100', models: [m]}\n"
        "scheduler:\n  scorers: [{type: prefix, weight: 3}, {type: prefill-cost, weight: 1}]\n"
    )
    main(["route", "check", str(good)])
    assert "ok (1 endpoints" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler:\n  picker: {type: best}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["route", "check", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml: scheduler.picker.type" in err[0]


def test_simulate_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [
        f'{{"timestamp": {i * 100}, "input_length": 1100, "output_length": 4, "hash_ids": [0, {i % 3 + 1}, {i + 10}]}}'
        for i in range(12)
    ]
    trace.write_text("\n".join(lines) + "\n")
    main(["route", "simulate", "--trace", str(trace), "--replicas", "2", "--preset", "tiny-test"])
    out = capsys.readouterr().out
    assert "pooled-cache reference" in out and "default" in out
    # beside round-robin and the pooled reference, with the GPU time as a ratio to round-robin's
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    assert set(rows) == {"default", "round-robin", "pooled reference"}
    assert rows["round-robin"].rstrip(" │").endswith("1.00×") and "÷ round-robin" in out
    main(
        [
            "route",
            "simulate",
            "--trace",
            str(trace),
            "--replicas",
            "2",
            "--preset",
            "tiny-test",
            "--no-baseline",
        ]
    )
    out = capsys.readouterr().out
    assert "round-robin" not in out and "pooled reference" not in out and "default" in out


_ONE = "endpoints:\n  - {name: a, url: 'http://127.0.0.1:8100'}\n"
_BAD_CONFIGS = {
    "ftp-url": ("endpoints:\n  - {name: a, url: 'ftp://x'}\n", "endpoints.0.url", "is not an http(s) URL"),
    "no-host": ("endpoints:\n  - {name: a, url: 'http://'}\n", "endpoints.0.url", "has no host"),
    "bad-port": (
        "endpoints:\n  - {name: a, url: 'http://h:99999'}\n",
        "endpoints.0.url",
        "Port out of range",
    ),
    "query": (
        "endpoints:\n  - {name: a, url: 'http://h:1/?x=1'}\n",
        "endpoints.0.url",
        "no query or fragment",
    ),
    "credentials": (
        "endpoints:\n  - {name: a, url: 'http://me:hunter2@h:1'}\n",
        "endpoints.0.url",
        "'http://me:***@h:1': credentials in the URL are not supported",
    ),
    "empty-name": ("endpoints:\n  - {name: '', url: 'http://h:1'}\n", "endpoints.0.name", "at least 1"),
    "same-name": (
        "endpoints:\n  - {name: a, url: 'http://h:1'}\n  - {name: a, url: 'http://h:2'}\n",
        "(top level)",
        "endpoint names must be distinct: a given twice",
    ),
    "same-url": (
        "endpoints:\n  - {name: a, url: 'http://h:1'}\n  - {name: b, url: 'http://h:1/'}\n",
        "(top level)",
        "endpoint URLs must be distinct",
    ),
    "role": (
        "endpoints:\n  - {name: a, url: 'http://h:1', role: decoder}\n",
        "endpoints.0.role",
        "'prefill'",
    ),
    "filter-role": (
        _ONE + "scheduler: {filters: [{type: role, roles: [prefil]}]}\n",
        "scheduler.filters.0.role.roles.0",
        "'decode'",
    ),
    "kv-events": (
        "endpoints:\n  - {name: a, url: 'http://h:1', kv_events: 'h:5557'}\n",
        "endpoints.0.kv_events",
        "is not a ZMQ address",
    ),
    "kv-events-no-port": (
        "endpoints:\n  - {name: a, url: 'http://h:1', kv_events: 'tcp://h'}\n",
        "endpoints.0.kv_events",
        "expected tcp://HOST:PORT",
    ),
    "kv-events-bind-address": (
        "endpoints:\n  - {name: a, url: 'http://h:1', kv_events: 'tcp://*:5557'}\n",
        "endpoints.0.kv_events",
        "with a host to connect to",
    ),
    "same-kv-events": (
        "endpoints:\n  - {name: a, url: 'http://h:1', kv_events: 'tcp://h:5'}\n"
        "  - {name: b, url: 'http://h:2', kv_events: 'tcp://h:5'}\n",
        "(top level)",
        "endpoint kv_events addresses must be distinct",
    ),
    "precise-without-events": (
        _ONE + "scheduler: {prefix: {kind: precise}}\n",
        "scheduler.prefix.kind precise",
        "no endpoint has 'kv_events'",
    ),
    "no-endpoints": ("scheduler: {seed: 1}\n", "no endpoints", "'discovery.kubernetes'"),
    "endpoints-and-discovery": (
        _ONE + "discovery: {kubernetes: {namespace: ml, selector: app=vllm}}\n",
        "(top level)",
        "either 'endpoints' or 'discovery', not both",
    ),
    "namespace": (
        "discovery: {kubernetes: {namespace: ML_Team, selector: app=vllm}}\n",
        "discovery.kubernetes.namespace",
        "is not a namespace name",
    ),
    "selector-unbalanced": (
        "discovery: {kubernetes: {namespace: ml, selector: 'app in (vllm,sglang'}}\n",
        "discovery.kubernetes.selector",
        "unbalanced '('",
    ),
    "selector-bad-key": (
        "discovery: {kubernetes: {namespace: ml, selector: 'app=vllm,-role=decode'}}\n",
        "discovery.kubernetes.selector",
        "invalid label key",
    ),
}


@pytest.mark.parametrize("case", sorted(_BAD_CONFIGS))
@pytest.mark.parametrize("command", ["check", "serve"])
def test_route_check_rejects_everything_route_serve_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, command: str
) -> None:
    """The same one line from `route check` and from `route serve` (which stops before it listens)."""
    text, where, problem = _BAD_CONFIGS[case]
    path = tmp_path / "route.yaml"
    path.write_text(text)
    argv = ["route", "check", str(path)] if command == "check" else ["route", "serve", "--config", str(path)]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: {where}" in err[0] and problem in err[0], err
    assert "hunter2" not in err[0]


def test_endpoint_options_are_checked_like_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, problem in (
        (
            ["--endpoint", "ftp://x"],
            "--endpoint: endpoints.0.url: Value error, 'ftp://x' is not an http(s) URL",
        ),
        (["--endpoint", "http://h:1", "--endpoint", "http://h:1/"], "endpoint URLs must be distinct"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["route", "serve", *argv])
        assert exit_info.value.code == 2
        assert problem in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "file not found"),
        (b"", "no clusters defined"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
        (b"clusters: [\n  - a: b\n bad", "invalid YAML"),
    ],
    ids=["missing", "empty", "binary", "broken"],
)
def test_route_serve_with_a_bad_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, problem: str
) -> None:
    config = tmp_path / "route.yaml"
    config.write_text("discovery: {kubernetes: {namespace: ml, selector: app=vllm}}\n")
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_bytes(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["route", "serve", "--config", str(config), "--kubeconfig", str(kubeconfig)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"kubeconfig {kubeconfig}" in err[0] and problem in err[0], err
