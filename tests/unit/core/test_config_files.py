"""Configuration files that cannot be what their author meant are one line naming the file and the line: bytes that
are not UTF-8, a key given twice (at any depth), characters YAML forbids, alias bombs, files that are not
configuration at all. Every command that reads a configuration file says so the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capstan.config import MAX_CONFIG_BYTES, read_mapping
from capstan.errors import UserError

pytestmark = pytest.mark.unit

CAPSTAN = Path(sys.executable).with_name("capstan")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            b"port: 1\nname: x\nport: 2\n",
            "line 3 column 1: invalid YAML: duplicate key 'port' (first at line 1)",
        ),
        (
            b"a:\n  b:\n    c: 1\n    c: 2\n",
            "line 4 column 5: invalid YAML: duplicate key 'c' (first at line 3)",
        ),
        (
            b"items:\n  - {k: 1, k: 2}\n",
            "line 2 column 12: invalid YAML: duplicate key 'k' (first at line 2)",
        ),
        (b'{"a": 1, "b": {"x": 1, "x": 2}}', "duplicate key 'x'"),
        (b"1: a\n1: b\n", "line 2 column 1: invalid YAML: duplicate key 1"),
        (b"name: caf\xe9\n", "line 1: not UTF-8 text (byte 0xe9 at offset 9)"),
        (b"a: 1\nb: 2\n\xff\xfe\x00\x01", "line 3: not UTF-8 text (byte 0xff"),
        (b"a: 1\nb: \x00\n", "line 2: invalid YAML: character #x0000 is not allowed"),
        (
            b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b ["
            + b"*a, " * 9
            + b"*a]\nc: ["
            + b"*b, " * 1000
            + b"*b]\n",
            "invalid YAML: more than 1000 aliases",
        ),
    ],
    ids=["top", "nested", "flow-in-list", "json", "int-key", "latin-1", "binary", "nul", "alias-bomb"],
)
def test_a_bad_file_is_one_line_naming_file_and_line(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(UserError) as info:
        read_mapping(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message


def test_what_yaml_allows_still_loads(tmp_path: Path) -> None:
    """A key overriding one merged in with ``<<``, the same key in two mappings, and a UTF-8 BOM are fine."""
    path = tmp_path / "c.yaml"
    path.write_bytes("\ufeffbase: &b {k: 1, j: 2}\nx:\n  <<: *b\n  k: 3\ny: {k: 4}\nname: café\n".encode())
    assert read_mapping(path) == {
        "base": {"k": 1, "j": 2},
        "x": {"k": 3, "j": 2},
        "y": {"k": 4},
        "name": "café",
    }


def test_what_is_not_a_configuration_file(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as fh:
        fh.truncate(MAX_CONFIG_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(UserError, match=r"huge.yaml: larger than 16 MiB"):
        read_mapping(huge)
    with pytest.raises(UserError, match=r"cannot read \(Is a directory\)"):
        read_mapping(tmp_path)


def _commands(config: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that reads a configuration file, given ``config``."""
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 32, "output_length": 4, "hash_ids": [1, 2]}\n')
    return {
        "route check": ["route", "check", str(config)],
        "route serve": ["route", "serve", "--config", str(config)],
        "route simulate": ["route", "simulate", "--trace", str(trace), "--config", str(config)],
        "restarts check-config": ["restarts", "check-config", str(config)],
        "restarts run": [
            "restarts", "run", "--config", str(config), "--kubeconfig", str(config), "--store", str(tmp_path / "h.db"),
        ],
        "record": ["record", "--config", str(config), "--once"],
        "sandbox up": ["sandbox", "up", "--spec", str(config), "--dir", str(tmp_path / "sandbox")],
        "capacity simulate": ["capacity", "simulate", "--trace", "synthetic:agentic:0.1", "--nodes", str(config)],
        "replay agentic": ["replay", "agentic", "--config", str(config), "--out", str(tmp_path / "r.jsonl")],
        "replay shared-prefix": ["replay", "shared-prefix", "--config", str(config), "--out", str(tmp_path / "r.jsonl")],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"a: 1\nb: 2\na: 3\n", "line 3 column 1: invalid YAML: duplicate key 'a'"),
        (b"a: \xff\n", "not UTF-8"),
    ],
    ids=["duplicate-key", "not-utf-8"],
)
def test_every_command_reading_a_config_file_says_which_file_and_line(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_bytes(content)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("CAPSTAN_")}
    failures = []
    for name, argv in _commands(config, tmp_path).items():
        proc = subprocess.run(
            [str(CAPSTAN), *argv], capture_output=True, text=True, timeout=120, check=False, env=env
        )
        lines = proc.stderr.strip().splitlines()
        if not (proc.returncode == 2 and len(lines) == 1 and str(config) in lines[0] and problem in lines[0]):
            failures.append(f"{name}: exit {proc.returncode}: {proc.stderr[-400:]!r}")
    assert not failures, "\n".join(failures)


def test_every_command_reading_a_trace_or_request_file_names_the_line_of_a_bad_byte(tmp_path: Path) -> None:
    """Mooncake traces, request files and openb CSVs go through one reader (capstan.config.decoded_lines)."""
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_bytes(
        b'{"timestamp": 0, "input_length": 32, "output_length": 4, "hash_ids": [1]}\n\xff\xfe\n'
    )
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(
        b'{"t": 0, "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}\n'
        b'{"t": 1, "body": {"model": "m", "messages": [{"role": "user", "content": "caf\xe9"}]}}\n'
    )
    openb = tmp_path / "openb_pod_list_x.csv"
    openb.write_bytes(
        b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        b"scheduled_time\np\xe91,1000,1000,1,1000,,LS,Running,0,100,0\n"
    )
    commands = {
        "route simulate": (["route", "simulate", "--trace", str(mooncake)], f"{mooncake}:2: not UTF-8 text"),
        "replay mooncake": (["replay", "mooncake", str(mooncake), "--out", str(tmp_path / "o.jsonl")], f"{mooncake}:2:"),
        "capacity simulate (mooncake)": (["capacity", "simulate", "--trace", str(mooncake)], f"{mooncake}:2:"),
        "capacity simulate (requests)": (["capacity", "simulate", "--trace", str(requests)], f"{requests}:2:"),
        "capacity simulate (openb)": (["capacity", "simulate", "--trace", str(openb)], f"{openb}:2:"),
        "replay run": (["replay", "run", str(requests), "--target", "http://127.0.0.1:9"], f"{requests}:2:"),
    }  # fmt: skip
    failures = []
    for name, (argv, problem) in commands.items():
        proc = subprocess.run([str(CAPSTAN), *argv], capture_output=True, text=True, timeout=120, check=False)
        lines = proc.stderr.strip().splitlines()
        if not (
            proc.returncode == 2 and len(lines) == 1 and problem in lines[0] and "not UTF-8 text" in lines[0]
        ):
            failures.append(f"{name}: exit {proc.returncode}: {proc.stderr[-300:]!r}")
    assert not failures, "\n".join(failures)
