"""`capstan enginesim serve` rejects what it cannot serve with one line and exit 2, before binding anything."""

from __future__ import annotations

import pytest

from capstan.cli.main import main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--time-scale", "nan"], "--time-scale: must be a positive number, got nan"),
        (["--time-scale", "inf"], "--time-scale: must be a positive number, got inf"),
        (["--time-scale", "-inf"], "--time-scale: must be a positive number"),
        (["--time-scale", "0"], "--time-scale: must be a positive number"),
        (
            ["--port", "8300", "--kv-events-port", "8300"],
            "replica 0's KV-event port 8300 is also replica 0's HTTP",
        ),
        (
            ["--port", "8300", "--replicas", "3", "--kv-events-port", "8302"],
            "replica 2's HTTP port 8302 is also replica 0's KV-event port",
        ),
        (["--port", "0", "--replicas", "2"], "--port: 0..1 are not all TCP ports"),
        (["--port", "65535", "--replicas", "2"], "--port: 65535..65536 are not all TCP ports"),
        (["--kv-events-port", "70000"], "--kv-events-port: 70000..70000 are not all TCP ports"),
    ],
)
def test_serve_rejects_bad_settings_with_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["enginesim", "serve", "--preset", "tiny-test", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
