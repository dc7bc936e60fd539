"""`robo-prm label ui`: the local labelling page (http.server on 127.0.0.1, no network, no CDN).

It walks through a queue of scenes (a label JSONL, e.g. from `label auto`, whose targets are ignored and
never shown) and shows each scene's frame, the task text with its dimensions, the scene description and
the episode's other labelled frames as a filmstrip; keys 1–9/0 give the 1–10 score, h/j/k… toggle
hazards, ← → move, u undoes. Each answer is one `source: "human"` line in the output JSONL
(`ui_session.py`: append-only, later answers win); once an item is answered the judge's score, reason
and hazards appear beside the person's. The page itself is package data (`ui_static/`).

Security: it listens on 127.0.0.1 only, answers only requests whose Host is this server (no DNS
rebinding), and changes nothing except for a POST that carries this session's token (in the page,
which another origin cannot read) and, when the browser sends one, an Origin of this server.
"""
from __future__ import annotations

import html
import json
import mimetypes
import secrets
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from robo_prm.finetune.labels import read_labels
from robo_prm.finetune.ui_session import LabelSession

__all__ = ["LabelSession", "make_server", "serve"]
STATIC = ("label.js", "label.css")


def _static(name: str) -> bytes:
    return (resources.files("robo_prm.finetune") / "ui_static" / name).read_bytes()


def index_page(session: LabelSession, start: int) -> bytes:
    page = _static("label.html").decode("utf-8")
    return page.replace("__TOKEN__", html.escape(session.token)).replace("__START__", str(start)).encode("utf-8")


def make_server(session: LabelSession, port: int = 8765, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    server = _Server((host, port), _Handler)
    server.session = session
    return server


class _Handler(BaseHTTPRequestHandler):
    """One request; `self.server.session` is the LabelSession served."""

    def log_message(self, *a):  # quiet
        pass

    def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj, code: int = 200):
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _allowed_hosts(self) -> set[str]:
        port = self.server.server_address[1]
        return {f"127.0.0.1:{port}", f"localhost:{port}"}

    def _index(self, q: dict, limit: int) -> int:
        """The item index of a request; a bad one is answered with 400 by the caller."""
        i = int(q.get("i", ["0"])[0])
        if not 0 <= i <= limit:
            raise ValueError(f"i must be in 0..{limit}")
        return i

    def do_GET(self):
        session: LabelSession = self.server.session
        if self.headers.get("Host") not in self._allowed_hosts():
            return self._send(403, b"wrong Host")
        url = urlparse(self.path)
        if url.path.startswith("/static/") and url.path[8:] in STATIC:
            name = url.path[8:]
            return self._send(200, _static(name), mimetypes.guess_type(name)[0] or "text/plain")
        try:
            i = self._index(parse_qs(url.query), len(session.queue))
        except ValueError as exc:
            return self._send(400, f"bad request: {html.escape(str(exc))}".encode())
        if url.path == "/":
            return self._send(200, index_page(session, i))
        if url.path == "/api/items":
            return self._json(session.items())
        if i >= len(session.queue):
            return self._send(404, b"no such item")
        if url.path == "/frame":
            png = session.frame_png(i)
            return self._send(200, png, "image/png") if png else self._send(404, b"no frame")
        if url.path == "/api/judge":
            try:
                return self._json(session.judged(i))
            except PermissionError as exc:
                return self._json({"error": str(exc)}, 409)
            except LookupError as exc:
                return self._json({"error": str(exc)}, 404)
        self._send(404, b"not found")

    def do_POST(self):
        session: LabelSession = self.server.session
        origin = self.headers.get("Origin")
        if self.headers.get("Host") not in self._allowed_hosts() or (
                origin is not None and origin.removeprefix("http://") not in self._allowed_hosts()):
            return self._send(403, b"cross-origin request refused")
        path = urlparse(self.path).path
        if path not in ("/label", "/undo"):
            return self._send(404, b"not found")
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= 65536:
            return self._send(413, b"form too large")
        form = parse_qs(self.rfile.read(length).decode("utf-8", errors="replace"))
        if not secrets.compare_digest(form.get("token", [""])[0], session.token):
            return self._send(403, b"missing or wrong session token")
        if path == "/undo":
            try:
                return self._json({"i": session.undo(), "done": session.done})
            except LookupError as exc:
                return self._json({"error": str(exc)}, 409)
        try:
            i = self._index(form, len(session.queue) - 1)
            lab = session.record(i, float(form["score"][0]), form.get("hazard", []))
        except (KeyError, ValueError, IndexError) as exc:
            return self._send(400, f"bad label: {html.escape(str(exc))}".encode())
        self._json({"i": i, "answer": {"score": lab.target, "hazards": lab.hazards}, "done": session.done})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    session: LabelSession

    def handle_error(self, request, client_address):
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the browser moved on before the answer was sent (a frame, a page left)
        super().handle_error(request, client_address)


def serve(queue_path: str | Path, out: str | Path, port: int = 8765, judge=None, echo=print) -> None:
    session = LabelSession(read_labels(queue_path), out, judge=judge)
    server = make_server(session, port)
    echo(f"labelling {len(session.queue)} scenes ({session.done} answered) → {out}: "
         f"open http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if judge is not None:
            judge.close()
