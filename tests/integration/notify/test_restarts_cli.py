"""`capstan restarts outbox` over a real SQLite store, and `check-config` refusing a bad setting by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capstan.cli.restarts import app
from capstan.notify import Notice

pytestmark = pytest.mark.integration


def _capstan(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_outbox_lists_pending_and_dead(tmp_path: Path) -> None:
    store_mod = pytest.importorskip("capstan.store")
    db = str(tmp_path / "capstan.db")
    store = store_mod.open_store(db)
    a = store.outbox.enqueue("slack", Notice(title="restart a", summary="s").to_json(), "a", now=100.0)
    b = store.outbox.enqueue("slack", Notice(title="restart b", summary="s").to_json(), "b", now=100.0)
    c = store.outbox.enqueue("teams", Notice(title="restart c", summary="s").to_json(), "c", now=100.0)
    store.outbox.mark_dead(b.id, "slack: channel_not_found", now=200.0)
    store.outbox.mark_sent(c.id, now=200.0)
    store.close()

    runner = CliRunner()
    result = runner.invoke(app, ["outbox", "--store", db, "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["id"], r["state"], r["last_error"], r["title"]) for r in rows] == [
        (a.id, "pending", None, "restart a"),
        (b.id, "dead", "slack: channel_not_found", "restart b"),
    ]
    everything = json.loads(
        runner.invoke(app, ["outbox", "--store", db, "--state", "all", "-o", "json"]).output
    )
    assert [r["state"] for r in everything] == ["pending", "dead", "sent"]
    table = runner.invoke(app, ["outbox", "--store", db, "--state", "dead"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "channel_not_found" in table.output and "restart a" not in table.output
    full = runner.invoke(app, ["outbox", "--store", db, "--show", str(c.id)])
    assert full.exit_code == 0 and full.output.splitlines()[:2] == [
        f"#{c.id} to teams (sent, 0 attempt(s))",
        "restart c",
    ]
    missing = _capstan("restarts", "outbox", "--store", db, "--show", "999")
    assert missing.returncode != 0 and f"no message with id 999 in {db}" in missing.stderr


def test_check_config(tmp_path: Path) -> None:
    good = tmp_path / "restarts.yaml"
    good.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
    ok = CliRunner().invoke(app, ["check-config", str(good)])
    assert ok.exit_code == 0 and "OK" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n"
        "filters: {include_pods: ['web-(']}\n"
    )
    refused = _capstan("restarts", "check-config", str(bad))
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"capstan: error: {bad}: filters.include_pods: Value error, pattern[0] 'web-('")
