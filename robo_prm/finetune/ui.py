"""`robo-prm label ui`: a minimal local labelling page (http.server on 127.0.0.1).

It walks through a queue of scenes (a label JSONL, e.g. from `label auto`, whose targets are ignored
and shown only as a hint) and shows the frame (if the item has one), the task text and the scene
description; the form records a 1–10 score and the hazards present as a `source: "human"` label in
the output JSONL (the same format as every other label).

It listens on 127.0.0.1 only, answers only requests whose Host is this server (no DNS rebinding),
and stores a label only from a POST that carries this session's token (hidden in the page, which
another origin cannot read) and, when the browser sends one, an Origin of this server.
"""
from __future__ import annotations

import html
import mimetypes
import secrets
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from robo_prm.finetune.labels import Label, read_labels, write_labels

PAGE = """<!doctype html><meta charset="utf-8"><title>robo-prm labels</title>
<style>body{{font-family:sans-serif;max-width:780px;margin:2em auto}} .t{{color:#555;font-size:90%}}</style>
<h3>Scene {i} of {n} <span class="t">({done} labelled → {out})</span></h3>
{frame}<p class="t"><b>Goal:</b> {goal}</p><p><b>Scene:</b> {scene}</p>
<form method="post" action="/label"><input type="hidden" name="i" value="{i0}"><input type="hidden" name="token" value="{token}">
<p>Progress (1 = not started, 10 = goal reached): {scores}</p><p>Hazards present: {hazards}</p>
<p><button>Save and next</button> <a href="/?i={next}">skip</a></p></form>"""


class LabelSession:
    def __init__(self, queue: list[Label], out: str | Path):
        self.queue, self.out = queue, Path(out)
        self.token = secrets.token_urlsafe(16)
        self.done = len(read_labels(self.out)) if self.out.exists() else 0

    def page(self, i: int) -> str:
        if i >= len(self.queue):
            return f"<p>All {len(self.queue)} scenes seen; {self.done} labels in {html.escape(str(self.out))}.</p>"
        lab = self.queue[i]
        spec = lab.judge_text()
        frame = f'<img src="/frame?i={i}" width="480">' if lab.frame else ""
        scores = " ".join(f'<label><input type="radio" name="score" value="{s}" required>{s}</label>' for s in range(1, 11))
        hazards = " ".join(f'<label title="{html.escape(h.text)}"><input type="checkbox" name="hazard" value="{html.escape(h.name)}">'
                           f"{html.escape(h.name)}</label>" for h in spec.hazards) or "none defined"
        return PAGE.format(i=i + 1, i0=i, n=len(self.queue), done=self.done, out=html.escape(str(self.out)), frame=frame,
                           goal=html.escape(spec.goal), scene=html.escape(lab.scene), scores=scores, hazards=hazards,
                           next=i + 1, token=self.token)

    def record(self, i: int, score: float, hazards: list[str]) -> Label:
        src = self.queue[i]
        known = {h.name for h in src.judge_text().hazards}
        bad = [h for h in hazards if h not in known]
        if bad:
            raise ValueError(f"unknown hazard(s) {bad}")
        lab = Label(task=src.task, scene=src.scene, target=float(score), hazards=hazards, source="human",
                    task_text=src.task_text, task_file=src.task_file, frame=src.frame, split=src.split,
                    base_task=src.base_task, variant=src.variant, episode=src.episode, step=src.step)
        write_labels([lab], self.out, append=True)
        self.done += 1
        return lab


def make_server(session: LabelSession, port: int = 8765) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8", location: str | None = None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
            if self.headers.get("Host") not in self._allowed_hosts():
                return self._send(403, b"wrong Host")
            url = urlparse(self.path)
            try:
                i = self._index(parse_qs(url.query), len(session.queue))
            except ValueError as exc:
                return self._send(400, f"bad request: {html.escape(str(exc))}".encode())
            if url.path == "/frame":
                frame = session.queue[i].frame if i < len(session.queue) else None
                if not frame or not Path(frame).exists():
                    return self._send(404, b"no frame")
                return self._send(200, Path(frame).read_bytes(), mimetypes.guess_type(frame)[0] or "image/png")
            if url.path != "/":
                return self._send(404, b"not found")
            self._send(200, session.page(i).encode())

        def do_POST(self):
            origin = self.headers.get("Origin")
            if self.headers.get("Host") not in self._allowed_hosts() or (
                    origin is not None and origin.removeprefix("http://") not in self._allowed_hosts()):
                return self._send(403, b"cross-origin request refused")
            if urlparse(self.path).path != "/label":
                return self._send(404, b"not found")
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= 65536:
                return self._send(413, b"form too large")
            form = parse_qs(self.rfile.read(length).decode("utf-8", errors="replace"))
            if not secrets.compare_digest(form.get("token", [""])[0], session.token):
                return self._send(403, b"missing or wrong session token")
            try:
                i = self._index(form, len(session.queue) - 1)
                session.record(i, float(form["score"][0]), form.get("hazard", []))
            except (KeyError, ValueError, IndexError) as exc:
                return self._send(400, f"bad label: {html.escape(str(exc))}".encode())
            self._send(303, b"", location=f"/?i={i + 1}")

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve(queue_path: str | Path, out: str | Path, port: int = 8765, echo=print) -> None:
    session = LabelSession(read_labels(queue_path), out)
    server = make_server(session, port)
    echo(f"labelling {len(session.queue)} scenes → {out}: open http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
