"""uvicorn's own log lines pass the redactor: an exception in an app, with a credential in its message, is logged
by uvicorn ("Exception in ASGI application" and the traceback) from every server Capstan runs, on a real loopback
server, and the credential does not reach stderr."""

from __future__ import annotations

import logging
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from capstan.httpserver import server_config

pytestmark = pytest.mark.integration

PLANTED = "postgres://capstan:Pl4nted-uvicorn-pw@db.internal/history"


async def _fails(request: Request) -> Response:
    raise RuntimeError(f"could not open {PLANTED}")


def _serve(config: uvicorn.Config, sock: socket.socket) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # bounded by the deadline
        if time.monotonic() > deadline:
            raise AssertionError("the server did not start")
        time.sleep(0.02)
    return server, thread


@pytest.mark.parametrize("redacted", [True, False], ids=["capstan-config", "uvicorn-default"])
def test_an_app_exception_holding_a_credential_is_logged_redacted(
    capfd: pytest.CaptureFixture[str], redacted: bool
) -> None:
    app = Starlette(routes=[Route("/boom", _fails)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if redacted:
        config = server_config(app, lifespan="off")
    else:
        config = server_config(app, lifespan="off", log_config=uvicorn.config.LOGGING_CONFIG)
    server, thread = _serve(config, sock)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/boom", timeout=10).status_code == 500
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        for handler in logging.getLogger("uvicorn").handlers:
            handler.flush()
    err = capfd.readouterr().err
    assert "Exception in ASGI application" in err and "RuntimeError" in err
    # the same server without Capstan's configuration shows the credential: the check can fail
    assert ("Pl4nted-uvicorn-pw" in err) is not redacted
    if redacted:
        assert "[REDACTED" in err
