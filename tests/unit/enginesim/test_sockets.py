"""Replica listening sockets give accepted connections TCP_NODELAY (else Nagle + delayed ACK add ~40 ms).

White-box: the option is set on the listener :func:`capstan.enginesim._serve._bind` makes, and only the server side
of a connection can read it, so the test holds the listener itself (over a real loopback socket).
"""

from __future__ import annotations

import socket

import pytest

from capstan.enginesim._serve import _bind

pytestmark = pytest.mark.unit


def test_accepted_connections_are_tcp_with_nodelay() -> None:
    listener = _bind("127.0.0.1", 0)
    try:
        listener.setblocking(True)
        listener.listen(1)
        client = socket.create_connection(listener.getsockname(), timeout=5)
        conn, _ = listener.accept()
        try:
            # asyncio sets TCP_NODELAY only on sockets whose proto is TCP; Linux also inherits it from the listener.
            assert conn.proto == socket.IPPROTO_TCP
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            conn.close()
            client.close()
    finally:
        listener.close()
