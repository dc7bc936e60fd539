"""Bounded HTTP for the `openai` backend (stdlib `http.client` only): one POST with a wall-clock
deadline over connect, send and every read, and a cap on the response size.

A plain `urlopen(timeout=t)` limits each socket operation, not the request: a server that sends
a byte every t/2 seconds never times out, and `read()` takes a body of any size. Here every read
of the socket (status line, headers and body alike) gets the time left before the deadline as
its timeout, and none left raises `JudgeDeadline`; the body is read in chunks and dropped as
soon as it passes `max_bytes`. `read_timeout` still caps each single wait (a silent server is an
error before the deadline when it is shorter). Name lookup (getaddrinfo) is the system
resolver's and not bounded here; IP addresses and `localhost` do not ask a DNS server.
"""
from __future__ import annotations

import http.client
import io
import socket
import time
import urllib.parse

from robo_prm.judge.base import JudgeDeadline

CHUNK = 64 * 1024


class ResponseTooLarge(OSError):
    pass


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise JudgeDeadline(f"deadline passed {what}")
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket's own raw stream (`makefile`, which keeps the socket open until this closes),
    with the time left before the deadline set as the timeout of every read."""

    def __init__(self, sock: socket.socket, deadline: float, read_timeout: float):
        super().__init__()
        self.sock, self.deadline, self.read_timeout = sock, deadline, read_timeout
        self.raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
        super().close()

    def readinto(self, buf) -> int:
        self.sock.settimeout(min(_left(self.deadline, "while reading the response"), self.read_timeout))
        try:
            return self.raw.readinto(buf)
        except TimeoutError:
            if time.monotonic() >= self.deadline:
                raise JudgeDeadline("deadline passed while reading the response") from None
            raise TimeoutError(f"no data for {self.read_timeout:g} s") from None


class _BoundedSocket:
    """What `HTTPResponse` reads from: only `makefile` is used, and it returns the bounded stream."""

    def __init__(self, sock: socket.socket, deadline: float, read_timeout: float):
        self.sock, self.deadline, self.read_timeout = sock, deadline, read_timeout

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline, self.read_timeout), CHUNK)


def post(url: str, data: bytes, headers: dict[str, str], deadline: float, read_timeout: float,
         max_bytes: int) -> tuple[int, bytes]:
    """(HTTP status, body) of a POST, all of it before `deadline` (time.monotonic()).

    Raises `JudgeDeadline` when the time is up, `ResponseTooLarge` past `max_bytes`, `OSError` /
    `http.client.HTTPException` for network and protocol failures. Bodies of error statuses are
    cut to their first 300 bytes."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=min(_left(deadline, "before connecting"), read_timeout))
    conn.response_class = lambda sock, *a, **kw: http.client.HTTPResponse(  # type: ignore[assignment]
        _BoundedSocket(sock, deadline, read_timeout), *a, **kw)
    try:
        conn.connect()
        conn.sock.settimeout(min(_left(deadline, "after connecting"), read_timeout))  # sendall: one total limit
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=data, headers=headers)
        resp = conn.getresponse()
        if resp.status >= 400:
            return resp.status, resp.read(300)
        declared = resp.getheader("Content-Length") or ""
        if declared.strip().isdigit() and int(declared) > max_bytes:
            raise ResponseTooLarge(f"response of {int(declared)} bytes declared, over the {max_bytes}-byte cap")
        chunks, total = [], 0
        while True:
            chunk = resp.read(min(CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise ResponseTooLarge(f"response over the {max_bytes}-byte cap")
        if resp.length:  # the server closed before its Content-Length
            raise http.client.IncompleteRead(b"".join(chunks), resp.length)
        return resp.status, b"".join(chunks)
    finally:
        conn.close()
