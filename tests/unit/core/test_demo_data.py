"""``capstan demo`` finds its traces in the samples shipped with Capstan (never through ../shared), takes another
directory of the same layout with --data-dir, and says in one line what such a directory lacks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import capstan
from capstan.cli.demo import CAPACITY_TRACE, ROUTING_TRACE, demo_traces, packaged_data_dir
from capstan.cli.main import main
from capstan.errors import UserError
from capstan.logs import configure_logging, logging_to_file

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces"


def test_the_shipped_samples_are_the_heads_of_the_public_traces() -> None:
    capacity, routing = demo_traces(packaged_data_dir())
    assert packaged_data_dir().is_relative_to(Path(capstan.__file__).parent)  # inside the package, shipped
    for sample, lines in ((capacity, 1501), (routing, 400)):
        text = sample.read_text().splitlines()
        assert len(text) == lines
        rel = sample.relative_to(packaged_data_dir())
        full = (SHARED / rel).read_text().splitlines()
        assert text == full[:lines], rel
    nodes = packaged_data_dir() / CAPACITY_TRACE.parent / "openb_node_list_all_node.csv"
    assert nodes.read_bytes() == (SHARED / CAPACITY_TRACE.parent / nodes.name).read_bytes()


def test_another_data_directory_of_the_same_layout_is_taken(tmp_path: Path) -> None:
    for rel in (CAPACITY_TRACE, ROUTING_TRACE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    assert demo_traces(tmp_path) == (tmp_path / CAPACITY_TRACE, tmp_path / ROUTING_TRACE)
    (tmp_path / ROUTING_TRACE).unlink()
    with pytest.raises(UserError, match=r"no mooncake-fast25/conversation_trace.jsonl"):
        demo_traces(tmp_path)


def test_demo_with_a_data_directory_that_lacks_a_trace_is_one_line_before_any_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--data-dir", str(tmp_path / "nowhere"), "--dir", str(tmp_path / "state")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no alibaba-openb-2023/openb_pod_list_default.csv" in err[0]
    assert not (tmp_path / "state").exists()  # no sandbox was started


def test_log_lines_go_to_the_file_while_tables_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", json_output=True)
    log = tmp_path / "demo.log"
    with logging_to_file(log):
        logging.getLogger("capstan.demo-test").warning("token=hunter2hunter2 in a line")
    logging.getLogger("capstan.demo-test").warning("after the block")
    assert "hunter2" not in log.read_text() and "in a line" in log.read_text()
    err = capsys.readouterr().err
    assert "in a line" not in err and "after the block" in err


def test_other_libraries_log_lines_are_redacted_and_a_later_basic_config_adds_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, ours = logging.getLogger(), logging.getLogger("capstan")
    saved = (root.handlers[:], ours.handlers[:], ours.level, ours.propagate)
    try:
        configure_logging("INFO", json_output=True)
        handlers = root.handlers[:]
        logging.basicConfig(
            handlers=[logging.StreamHandler()]
        )  # what the MCP SDK does when its server is made
        assert root.handlers == handlers
        logging.getLogger("thirdparty.client").warning("retrying with password=Pl4ntedThird0 set")
        logging.getLogger("thirdparty.client").info("below the others' level")
    finally:
        root.handlers[:], ours.handlers[:] = saved[0], saved[1]
        ours.setLevel(saved[2])
        ours.propagate = saved[3]
    err = capsys.readouterr().err
    assert "retrying with password" in err and "Pl4ntedThird0" not in err
    assert "below the others' level" not in err
