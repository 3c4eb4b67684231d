"""``capstan record --once`` and ``capstan history …`` end to end, against a real Redis."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from capstan.cli.main import main
from capstan.kube import KubeClient, resources
from capstan.sandbox import RedisServer, free_port

pytestmark = pytest.mark.integration


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_record_once_then_query_engine_entries_and_gaps(
    tmp_path: Path, redis_factory: Callable[..., RedisServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = redis_factory("--slowlog-log-slower-than", "0", "--slowlog-max-len", "4")
    db = tmp_path / "h.db"
    config = tmp_path / "record.yaml"
    config.write_text(
        f"store: {db}\nredis:\n  - name: cache\n    address: {server.address}\n    logs: [slowlog]\n"
        f"  - name: down\n    address: 127.0.0.1:{free_port()}\n    timeout_s: 1\n"
    )
    code, out, _ = run(["record", "--config", str(config), "--once"], capsys)
    assert code == 1  # one target is down
    assert "cache: ok" in out
    assert "down" in out and "unreachable" in out
    client = redis.Redis(host="127.0.0.1", port=server.port)
    for i in range(20):
        client.set(f"k{i}", "v")
    code, _, _ = run(["record", "--config", str(config), "--once"], capsys)
    code, out, _ = run(["history", "engine", "--store", str(db), "--target", "cache", "-o", "json"], capsys)
    assert code == 0
    items = json.loads(out)["items"]
    assert any(e["payload"]["args"][:1] == ["SET"] for e in items)
    code, out, _ = run(["history", "gaps", "--store", str(db), "-o", "json"], capsys)
    gaps = json.loads(out)["items"]
    assert len(gaps) == 1 and gaps[0]["lost"] > 0
    code, out, _ = run(["history", "gaps", "--store", str(db)], capsys)
    assert code == 0 and "ring overwrote" in out


def test_valkey_commandlog_recorded_and_shown_with_the_server_it_came_from(
    tmp_path: Path, valkey_factory: Callable[..., RedisServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = valkey_factory(
        "--enable-debug-command",
        "yes",
        "--commandlog-execution-slower-than",
        "50000",
        "--commandlog-slow-execution-max-len",
        "4",
    )  # fmt: skip  (50 ms: no ordinary command crosses it on a busy machine, so the gap count is exact)
    db = tmp_path / "h.db"
    config = tmp_path / "record.yaml"
    config.write_text(
        f"store: {db}\nredis:\n  - name: vk\n    address: {server.address}\n    logs: [commandlog]\n"
    )
    assert run(["record", "--config", str(config), "--once"], capsys)[0] == 0
    client = redis.Redis(host="127.0.0.1", port=server.port)
    version = str(client.info("server")["valkey_version"])
    for _ in range(6):
        client.execute_command("DEBUG", "SLEEP", "0.06")  # type: ignore[no-untyped-call]
    assert run(["record", "--config", str(config), "--once"], capsys)[0] == 0
    code, out, _ = run(
        ["history", "engine", "--store", str(db), "--log", "commandlog-slow", "-o", "json"], capsys
    )
    items = json.loads(out)["items"]
    assert code == 0 and [e["payload"]["args"] for e in items] == [["DEBUG", "SLEEP", "0.06"]] * 4
    assert {(e["payload"]["server"], e["payload"]["server_version"]) for e in items} == {("valkey", version)}
    code, out, _ = run(["history", "gaps", "--store", str(db), "-o", "json"], capsys)
    # the ring keeps 4 of the 6: a gap with the exact count
    assert [(g["log"], g["lost"]) for g in json.loads(out)["items"]] == [("commandlog-slow", 2)]
    code, out, _ = run(["history", "engine", "--store", str(db), "--log", "commandlog-slow"], capsys)
    assert code == 0 and "valkey" in out and version in out and "server_version" not in out


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["history", "timeline", "--store", "mysql://x@127.0.0.1/db"], capsys)
    assert code == 2 and err.count("\n") == 1 and "unsupported scheme" in err
    code, _, err = run(["history", "timeline", "--store", str(tmp_path / "h.db"), "--since", "soon"], capsys)
    assert code == 2 and "--since" in err
    config = tmp_path / "bad.yaml"
    config.write_text(f"store: {tmp_path / 'h.db'}\nredis:\n  - name: a\n    adress: 127.0.0.1:1\n")
    code, _, err = run(["record", "--config", str(config), "--once"], capsys)
    assert code == 2 and err.count("\n") == 1 and "adress" in err and "bad.yaml" in err


READERS: list[list[str]] = [
    ["history", "timeline"],
    ["history", "events"],
    ["history", "engine"],
    ["history", "gaps"],
    ["history", "object", "Pod", "p"],
    ["history", "diff", "Pod", "p", "--since", "1h"],
    ["restarts", "outbox"],
]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: " ".join(r[:2]))
def test_a_reader_given_a_store_that_does_not_exist_says_so_and_creates_nothing(
    tmp_path: Path, reader: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "typo.db"
    code, _, err = run([*reader, "--store", str(db)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert str(db) in err and "no such file" in err and "capstan record" in err
    assert not db.exists() and list(tmp_path.iterdir()) == []  # no file, no -wal/-shm either


def test_a_reader_given_a_database_without_a_store_says_so(
    history_store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing but empty SQLite file, or an empty PostgreSQL database: no tables are created by a read."""
    from sqlalchemy import create_engine, inspect

    from capstan.store import parse_database_url

    url = parse_database_url(history_store_url)
    if url.get_backend_name() == "sqlite":
        Path(str(url.database)).touch()
    code, _, err = run(["history", "gaps", "--store", history_store_url], capsys)
    assert code == 2 and err.count("\n") == 1 and "holds no Capstan store" in err, err
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
    finally:
        engine.dispose()
    # a writer creates it; then the reader reads it
    assert run(["history", "migrate", "--store", history_store_url], capsys)[0] == 0
    code, out, _ = run(["history", "gaps", "--store", history_store_url, "-o", "json"], capsys)
    assert code == 0 and json.loads(out) == {"items": [], "next_cursor": None}


def _commands_with_store(tmp_path: Path, store: str) -> dict[str, list[str]]:
    """Every command that opens a store, given ``store``."""
    record = tmp_path / "record.yaml"
    record.write_text(json.dumps({"store": store}))
    restarts = tmp_path / "restarts.yaml"
    restarts.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
    # a kubeconfig that reads well (its server is never called): restarts run checks it before the store
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return {
        **{" ".join(r[:2]): [*r, "--store", store] for r in READERS},
        "history migrate": ["history", "migrate", "--store", store],
        "record --once": ["record", "--config", str(record), "--once"],
        "restarts run": [
            "restarts", "run", "--config", str(restarts), "--kubeconfig", str(kubeconfig), "--store", store,
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("store", "problem"),
    [
        ("postgresql://u:hunter2@127.0.0.1:notaport/db", "not a valid URL"),
        ("postgresql://u:hunter2@[::1/db", "not a valid URL"),
        ("mysql://u:hunter2@127.0.0.1/db", "unsupported scheme"),
        ("postgresql://u:hunter2@127.0.0.1:{port}/db", "Connection refused"),
        ("/no/such/dir/h.db", "does not exist|no such file"),
    ],
    ids=["bad-port", "bad-host", "scheme", "unreachable", "no-dir"],
)
def test_every_command_says_what_is_wrong_with_its_store_in_one_line(
    tmp_path: Path, store: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store.format(port=free_port())
    for name, argv in _commands_with_store(tmp_path, store).items():
        if name == "restarts run" and problem == "Connection refused":
            continue  # a long-running component waits for its store instead (test_unreachable_at_start.py)
        code, _, err = run(argv, capsys)
        assert code == 2 and err.count("\n") == 1, f"{name}: {err!r}"
        assert re.search(problem, err) and "hunter2" not in err, f"{name}: {err!r}"


CAPSTAN = Path(sys.executable).with_name("capstan")

_KUBECONFIGS: dict[str, tuple[bytes | None, str]] = {
    "missing": (None, "file not found"),
    "empty": (b"", "no clusters defined"),
    "binary": (bytes(range(256)) * 4, "not UTF-8 text"),
    "broken": (b"clusters: [\n  - a: b\n bad", "invalid YAML"),
    "no-context": (
        b"clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        b"contexts: [{name: x, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n",
        "no current-context set",
    ),
    "unknown-cluster": (
        b"clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        b"contexts: [{name: x, context: {cluster: d, user: u}}]\nusers: [{name: u, user: {}}]\n"
        b"current-context: x\n",
        "context 'x' names cluster 'd', not defined",
    ),
}


@pytest.mark.parametrize("mode", ["once", "daemon"])
@pytest.mark.parametrize("case", sorted(_KUBECONFIGS))
def test_record_with_a_kubeconfig_that_cannot_work_is_one_line_and_exit_2(
    tmp_path: Path, case: str, mode: str
) -> None:
    """With --once (which said nothing and exited 0) and as a daemon (which restarted the collector for ever)."""
    content, problem = _KUBECONFIGS[case]
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_bytes(content)
    config = tmp_path / "record.yaml"
    config.write_text(
        json.dumps({"store": str(tmp_path / "h.db"), "kubernetes": {"kubeconfig": str(kubeconfig)}})
    )
    argv = [
        str(CAPSTAN),
        "--log-text",
        "record",
        "--config",
        str(config),
        *(["--once"] if mode == "once" else []),
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"still running after 60 s (a crash-restart loop?): {str(exc.stderr)[-500:]}")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-800:]
    assert lines[0].startswith(f"capstan: error: kubeconfig {kubeconfig}") and problem in lines[0]
    assert not (tmp_path / "h.db").exists()  # refused before anything was opened


def test_record_with_a_kubernetes_section_and_no_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "record.yaml"
    config.write_text(json.dumps({"store": str(tmp_path / "h.db"), "kubernetes": {"kinds": ["Pod"]}}))
    code, _, err = run(["record", "--config", str(config), "--once"], capsys)
    assert (
        code == 2
        and err
        == f"capstan: error: {config}: kubernetes.kubeconfig: not set (set it, or give --kubeconfig; in a pod, the pod's service account is used)\n"
    )


async def test_record_once_records_the_cluster_once(
    tmp_path: Path, kubeconfig: Path, kube: KubeClient, namespace: str
) -> None:
    """--once lists every configured kind, writes it with its cursor and exits: the history has the objects."""
    await kube.create(
        resources.CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace}},
    )
    db = tmp_path / "h.db"
    config = tmp_path / "record.yaml"
    config.write_text(
        json.dumps(
            {
                "store": str(db),
                "kubernetes": {"kinds": ["ConfigMap"], "events": False, "namespace": namespace},
            }
        )
    )
    proc = await asyncio.to_thread(
        subprocess.run,
        [str(CAPSTAN), "record", "--config", str(config), "--kubeconfig", str(kubeconfig), "--once"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0 and "kubernetes/default: ok" in proc.stdout, proc.stdout + proc.stderr
    out = subprocess.run(
        [str(CAPSTAN), "history", "timeline", "--store", str(db), "--kind", "ConfigMap", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    names = {(i["namespace"], i["name"]) for i in json.loads(out)["items"]}
    assert (namespace, "settings") in names


@pytest.mark.parametrize("case", sorted(_KUBECONFIGS))
def test_restarts_run_with_a_kubeconfig_that_cannot_work_is_one_line_and_creates_no_store(
    tmp_path: Path, case: str
) -> None:
    content, problem = _KUBECONFIGS[case]
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_bytes(content)
    config = tmp_path / "restarts.yaml"
    config.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
    db = tmp_path / "r.db"
    argv = ["restarts", "run", "--config", str(config), "--kubeconfig", str(kubeconfig), "--store", str(db)]
    proc = subprocess.run([str(CAPSTAN), *argv], capture_output=True, text=True, timeout=60, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and problem in lines[0], proc.stderr[-800:]
    assert not db.exists()
