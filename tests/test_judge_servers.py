"""The `openai` backend over several servers: two real `llama_cpp.server` processes on loopback
(started as in test_judge_server.py, llama.cpp's extra buffers off), requests spread over them and
sent concurrently with the answers one server gives one request at a time; a dead server's share
moves to the live one without a fallback; a hanging one costs one deadline, then its cooldown."""
from __future__ import annotations

import logging
import time

import pytest

from robo_prm.envs.task import load_task
from robo_prm.judge import JudgeConfig, OpenAIConfig, make_judge
from robo_prm.types import SceneDescription
from test_judge_faults import DEADLINE, SLACK, FakeServer
from test_judge_server import _free_port, llama_servers

SCENES = [SceneDescription(f"The gripper is open {5 + 3 * i} cm above the hammer. The hammer lies {2 + i % 3} cm from "
                           f"the front edge of the table.", (), i % 3, 2) for i in range(5)]


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    with llama_servers(tmp_path_factory.mktemp("servers"), 2) as urls:
        yield urls


@pytest.fixture
def posts(monkeypatch):
    """Every POST the openai backend sends, by server root (the real transport still sends it)."""
    import robo_prm.judge.backends.openai as oa

    seen: list[str] = []
    real = oa.post

    def counting(url, *args, **kwargs):
        seen.append(url.rsplit("/completions", 1)[0])
        return real(url, *args, **kwargs)

    monkeypatch.setattr(oa, "post", counting)
    return seen


def _judge(hazards_from="rules", **openai):
    return make_judge(JudgeConfig(backend="openai", confidence_threshold=0.0, hazards_from=hazards_from,
                                  hazard_answerer="backend", openai=OpenAIConfig(**openai)))  # hazard questions are posts too


def test_requests_spread_over_two_servers_with_one_servers_answers(two_servers, posts):
    task = load_task("push_tool_from_edge").text
    alone = _judge(base_url=two_servers[0], concurrency=1, hazards_from="union", deadline_s=600, timeout_s=600)
    want = alone.judge(task, SCENES[:3])
    posts.clear()
    # generous deadlines: the point here is the answers, on a machine that may be busy
    both = _judge(base_urls=two_servers, concurrency=4, hazards_from="union", deadline_s=600, timeout_s=600)
    both.judge(task, SCENES[:1])  # the first answer tells whether the servers give logprobs
    got = both.judge(task, SCENES[:3])
    assert both.backend.logprobs is True and both.stats()["fallbacks"] == 0
    per_server = [posts.count(u) for u in two_servers]
    # score + 2 hazards per scene (the first scene's answer is cached since the warm-up call), in turn
    assert sum(per_server) == 3 * 3 and min(per_server) >= 4
    for a, b in zip(want, got):
        assert abs(a.progress - b.progress) < 1e-3 and abs(a.confidence - b.confidence) < 1e-3
        assert {h.name: round(h.probability, 3) for h in a.hazards} == pytest.approx(
            {h.name: round(h.probability, 3) for h in b.hazards}, abs=2e-3)


def test_a_dead_server_among_live_ones_costs_no_fallback(two_servers, posts, caplog):
    task = load_task("push_tool_from_edge").text
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    judge = _judge(base_urls=[dead, two_servers[1]], concurrency=2, retries=0, cooldown_s=600)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING):
        judge.judge(task, SCENES[:1])
        out = judge.judge(task, SCENES[1:])
    assert not any(j.fallback for j in out) and judge.stats()["fallbacks"] == 0
    assert posts.count(dead) == 1  # refused once, then cooling down: every other request went to the live one
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        r.getMessage() for r in caplog.records if dead in r.getMessage()][:1]
    assert judge.backend.servers[0].down_until > t0 + 500


def test_a_hanging_server_costs_one_deadline_then_its_cooldown():
    """Two fake servers (test_judge_faults.py): one hangs, one answers at once. The first request meets the
    hanging one (one deadline, that scene from the rules); from then on it cools down and the other answers."""
    task = load_task("push_tool_from_edge").text
    hang, ok = FakeServer(), FakeServer()
    hang.mode = "hang"
    try:
        judge = _judge(base_urls=[hang.url, ok.url], concurrency=2, deadline_s=DEADLINE, cooldown_s=60)
        t0 = time.monotonic()
        [first] = judge.judge(task, SCENES[:1])
        first_s = time.monotonic() - t0
        t0 = time.monotonic()
        out = judge.judge(task, SCENES[1:])
        rest_s = time.monotonic() - t0
    finally:
        hang.close()
        ok.close()
    assert first.fallback and first_s < DEADLINE + SLACK
    assert hang.requests == 1 and ok.requests == len(SCENES) - 1 and not any(j.fallback for j in out)
    assert rest_s < SLACK  # the hanging server is not asked again during its cooldown
    st = judge.stats()
    assert st["fallback_deadline"] == 1 and st["fallbacks"] == 1
