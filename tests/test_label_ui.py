"""The labelling page refuses what a page on another origin could send it, and answers bad
parameters with 400 instead of a traceback."""
from __future__ import annotations

import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

from robo_prm.finetune.labels import Label, read_labels
from robo_prm.finetune.ui import LabelSession, make_server


@pytest.fixture
def served(tmp_path):
    queue = [Label(task="push_tool_from_edge", scene=f"scene {i}", target=5.0,
                   task_file="push_tool_from_edge") for i in range(2)]
    session = LabelSession(queue, tmp_path / "human.jsonl")
    server = make_server(session, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield session, f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "human.jsonl"
    finally:
        server.shutdown()
        server.server_close()


def _status(url: str, data: bytes | None = None, headers: dict | None = None) -> int:
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {})).status
    except urllib.error.HTTPError as exc:
        return exc.code


def _form(session, **extra) -> bytes:
    return urllib.parse.urlencode({"i": 0, "score": 7, "token": session.token, **extra}).encode()


def test_a_cross_origin_post_is_refused(served):
    session, base, out = served
    assert _status(base + "/label", _form(session), {"Origin": "http://evil.example"}) == 403
    assert _status(base + "/label", _form(session, token="guessed")) == 403
    assert _status(base + "/label", urllib.parse.urlencode({"i": 0, "score": 7}).encode()) == 403  # no token
    assert not out.exists()  # nothing stored
    assert _status(base + "/label", _form(session), {"Origin": base}) == 200  # same origin, token: stored
    assert [lab.target for lab in read_labels(out)] == [7.0]


def test_a_foreign_host_name_is_refused(served):
    """DNS rebinding: a page served as evil.example that resolves to 127.0.0.1 sends Host: evil.example."""
    session, base, _ = served
    port = base.rsplit(":", 1)[1]
    assert _status(base + "/", headers={"Host": f"evil.example:{port}"}) == 403
    assert _status(base + "/label", _form(session), {"Host": f"evil.example:{port}"}) == 403


@pytest.mark.parametrize("query", ["?i=abc", "?i=-5", "?i=99"])
def test_bad_parameters_get_400(served, query):
    _, base, _ = served
    assert _status(base + "/" + query) == 400
    assert _status(base + "/frame" + query) == 400


def test_a_bad_index_in_a_post_gets_400_and_stores_nothing(served):
    session, base, out = served
    assert _status(base + "/label", _form(session, i="5")) == 400
    assert _status(base + "/label", _form(session, score="x")) == 400
    assert not out.exists()
