"""Run an ASGI app with uvicorn on a loopback port in a background thread: for the local Slack receiver,
the integration tests' receivers and the storm harness, which all need a real HTTP server they can start
and stop.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn

from capstan.logs import uvicorn_log_config


@dataclass
class RunningServer:
    """A started server; ``url`` is ``http://127.0.0.1:<port>``."""

    url: str
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(app: Any, *, port: int = 0, start_timeout: float = 10.0) -> RunningServer:
    """Bind 127.0.0.1:``port`` (0: any free one), serve ``app`` in a daemon thread, wait until it listens."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    bound_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", access_log=False, log_config=uvicorn_log_config()
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="loopback-http"
    )
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:  # bounded by the deadline below
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError(f"loopback server on port {bound_port} did not start")
        time.sleep(0.01)
    url = f"http://127.0.0.1:{bound_port}"
    return RunningServer(url=url, port=bound_port, _server=server, _thread=thread)
