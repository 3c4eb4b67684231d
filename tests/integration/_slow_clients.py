"""Clients that never finish sending, shared by the tests of every HTTP server Capstan runs (gateway, simulator)."""

from __future__ import annotations

import socket


def read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes; a server that never closes fails through the socket timeout."""
    data = b""
    while True:  # ends at EOF or at the socket's timeout
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def unfinished_requests_answers(addr: tuple[str, int], path: str) -> bytes:
    """Opens a connection that sends nothing and one that sends half a request head (both must be closed without
    an answer), then one that sends a head and never its body; returns the server's answer to that last one."""
    with socket.create_connection(addr, timeout=15) as s:  # connects, sends nothing
        assert read_until_closed(s) == b""
    with socket.create_connection(addr, timeout=15) as s:  # half a request head
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Ty".encode())
        assert read_until_closed(s) == b""
    with socket.create_connection(addr, timeout=15) as s:  # the head, and never the body
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode())
        return read_until_closed(s)
