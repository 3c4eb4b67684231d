"""A scenario that fails to set up is reported in one line; that line leaves through the redactor, because the API
server's message may quote what a manifest carried (a Secret's stringData, a password in an env value)."""

from __future__ import annotations

from capstan.faults._runner import SetupFailed, _one_line
from capstan.kube import ApiError

PLANTED = "Pl4nted-s3cret-Zq"


def test_an_api_servers_rejection_is_one_redacted_line() -> None:
    exc = ApiError(
        422,
        "Invalid",
        f'Secret "db" is invalid: data[url]: postgres://admin:{PLANTED}@db:5432\n  and password={PLANTED}',
    )
    line = _one_line(exc)
    assert line.startswith('API server: 422 Invalid: Secret "db" is invalid') and "\n" not in line
    assert PLANTED not in line


def test_any_other_failure_is_redacted_too_and_bounded() -> None:
    line = _one_line(SetupFailed(f"waited 60s for pod api (token={PLANTED}) " + "x" * 1000))
    assert PLANTED not in line and len(line) <= 400
