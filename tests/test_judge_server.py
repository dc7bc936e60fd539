"""The `openai` judge backend against a real OpenAI-compatible server (llama-cpp-python's,
serving the bundled SmolLM2 GGUF on 127.0.0.1), and against a dead port."""
from __future__ import annotations

import http.client
import contextlib
import logging
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from robo_prm.judge import JudgeConfig, OpenAIConfig, bundled_model_path, make_judge
from robo_prm.judge.parse import parse_answer
from robo_prm.envs.task import load_task
from robo_prm.types import SceneDescription

SCENES = [
    SceneDescription("The gripper is open 10 cm above the hammer. The hammer lies 3 cm from the front edge of the table.",
                     (), 0, 2, hazards=("tool_near_edge",)),
    SceneDescription("The hammer lies in the middle of the table. The gripper is closed 4 cm from it.", (), 2, 2),
]

# `python -m llama_cpp.server`, with llama.cpp's AMX/repack buffers off: on machines that
# advertise AMX without granting it, the stock server segfaults on its first prompt.
SERVER = ("from robo_prm.judge.backends.llamacpp import disable_extra_buffers; disable_extra_buffers(); "
          "import runpy, sys; sys.argv = ['llama_cpp.server'] + sys.argv[1:]; "
          "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")


ALL_HAZARDS = ["tool_near_edge", "tool_fell"]  # push_tool_from_edge


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_servers(folder, n: int = 1, ready_s: float = 90.0):
    """n `llama_cpp.server` processes serving the bundled GGUF on 127.0.0.1 (one thread each); yields their
    /v1 URLs once each answers /models, and stops them at the end."""
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
    ports, procs = [_free_port() for _ in range(n)], []
    for k, port in enumerate(ports):
        with open(folder / f"server{k}.log", "wb") as out:
            procs.append(subprocess.Popen([sys.executable, "-c", SERVER, "--model", bundled_model_path(), "--host",
                                           "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"],
                                          stdout=out, stderr=subprocess.STDOUT))
    urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
    try:
        deadline = time.monotonic() + ready_s
        for k, (proc, url) in enumerate(zip(procs, urls)):
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"server {k} exited with {proc.returncode}: {(folder / f'server{k}.log').read_text()[-2000:]}")
                try:
                    urllib.request.urlopen(f"{url}/models", timeout=1).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"server {k} not ready after {ready_s:.0f} s")
                    time.sleep(0.2)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with llama_servers(tmp_path_factory.mktemp("server"), 1, ready_s=60) as (url,):
        yield url


def test_openai_backend_judges_with_logprobs(server):
    task = load_task("push_tool_from_edge")
    judge = make_judge(JudgeConfig(backend="openai", openai=OpenAIConfig(base_url=server), confidence_threshold=0.0,
                                   hazards_from="union", hazard_answerer="backend"))  # the server's yes/no answers
    out = judge.judge(task.text, SCENES)
    assert judge.backend.logprobs is True  # llama.cpp's server returns top-k logprobs
    for j in out:
        assert 0.0 <= j.progress <= 1.0 and 0.0 < j.confidence <= 1.0 and not j.fallback
        assert {h.name for h in j.hazards} == {"tool_near_edge", "tool_fell"}
        assert all(0.0 <= h.probability <= 1.0 for h in j.hazards)
    again = judge.judge(task.text, SCENES)  # greedy requests: the same answers again
    assert [round(j.progress, 6) for j in again] == [round(j.progress, 6) for j in out]
    assert judge.stats()["fallbacks"] == 0


def test_openai_backend_text_votes(server):
    """A server without logprobs is scored from `votes` parsed text answers."""
    task = load_task("push_tool_from_edge")
    judge = make_judge(JudgeConfig(backend="openai", openai=OpenAIConfig(base_url=server), confidence_threshold=0.0,
                                   votes=3, reason_tokens=16))
    judge.backend.logprobs = False  # as if the server had answered without them
    texts = []
    real = judge.backend._complete

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        texts.append(out.get("text", ""))
        return out

    judge.backend._complete = recording
    [s] = judge.backend.score(task.text, SCENES[:1], hazards=ALL_HAZARDS, explain=True)
    assert len(texts) == 3  # three votes were asked of the real server
    # what the server answered is what the score is made of (the arithmetic itself: the test below)
    votes = [parse_answer("Score:" + t).score for t in texts]
    assert (s.digits is None) == all(v is None for v in votes)
    assert set(s.hazards) == {"tool_near_edge", "tool_fell"}


def test_text_votes_arithmetic():
    """Three text answers → histogram over the parsed digits, the share that parsed, the lower median,
    and each hazard's share of the answers that name it."""
    task = load_task("push_tool_from_edge")
    judge = make_judge(JudgeConfig(backend="openai", openai=OpenAIConfig(base_url="http://127.0.0.1:9/v1"), votes=3))
    answers = iter([" 8\nReason: next to the hammer.\nHazards: tool fell", " 3", " no idea"])
    judge.backend._complete = lambda *a, **k: {"text": next(answers)}
    s = judge.backend._score_votes(task.text, "prompt", ALL_HAZARDS, explain=True)
    eight, three = parse_answer("Score: 8").score, parse_answer("Score: 3").score
    want = np.zeros(10)
    want[[eight, three]] = 0.5
    np.testing.assert_allclose(s.digits, want)
    assert s.digit_mass == pytest.approx(2 / 3) and s.progress == pytest.approx(three / 9)
    assert s.hazards == {"tool_near_edge": 0.0, "tool_fell": pytest.approx(1 / 3)}
    assert s.reason == "next to the hammer."


def test_dead_server_falls_back_to_rules(caplog, monkeypatch):
    task = load_task("push_tool_from_edge")
    cfg = JudgeConfig(backend="openai", openai=OpenAIConfig(base_url=f"http://127.0.0.1:{_free_port()}/v1",
                                                            timeout_s=2.0, retries=1, backoff_s=0.01, cooldown_s=60))
    judge = make_judge(cfg)
    with caplog.at_level(logging.WARNING):
        out = judge.judge(task.text, SCENES)
    assert [j.progress for j in out] == [0.0, 1.0] and all(j.fallback for j in out)
    assert out[0].hazard_names() == ("tool_near_edge",)
    assert "after 2 tries" in caplog.text
    def no_network(*a, **k):
        raise AssertionError("a dead server is not asked again during its cooldown")

    monkeypatch.setattr(http.client.HTTPConnection, "connect", no_network)
    assert all(j.fallback for j in judge.judge(task.text, SCENES))
    st = judge.stats()
    assert st["fallbacks"] == st["fallback_error"] == 4 and st["errors"] == 2 and st["outages"] == 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1  # one warning for the outage
