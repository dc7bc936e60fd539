"""Fault injection: the `openai` judge against a misbehaving server, through `make_judge` and
through `BlendedReward`, and the answer parsers under arbitrary input (hypothesis).

The fake server is stdlib `http.server` on 127.0.0.1 (a free port, one thread per request); its
`mode` decides the answer: ok / flat (a real completions body), 500, hang, drip (one byte every
0.5 s after the headers), drip_headers (the status line itself dripped), garbage (bad JSON),
huge (a body past the cap, no Content-Length), huge_declared (Content-Length past the cap),
disconnect (the connection cut mid-body). Each handler loop is bounded in count and time, and
ends when the test's server is stopped.

Time bounds are derived from the config, not measured speeds: with `deadline_s` = 1 s a judge
call that meets a hanging or dripping server must return within the deadline plus 1 s of slack,
and the calls after it (the server's cooldown) at once, so an outage costs one deadline.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robo_prm.envs.task import load_task
from robo_prm.judge import ConfidentJudge, JudgeConfig, OpenAIConfig, Scored, make_judge
from robo_prm.judge.backends.openai import OpenAIBackend
from robo_prm.judge.parse import clean_reason, parse_answer
from robo_prm.judge.scoring import expected_digit, summarize, vote_histogram
from robo_prm.reward import RewardConfig
from robo_prm.reward.blend import BlendedReward
from robo_prm.types import Judgement, SceneDescription

DEADLINE = 1.0
SLACK = 1.0  # scheduling, thread start, loopback: far below a second
LIMIT_S = 10.0  # no fake-server handler runs longer than this, whatever the test does

SCENES = [SceneDescription("The gripper is open 10 cm above the hammer.", (), 0, 2, hazards=("tool_near_edge",)),
          SceneDescription("The hammer lies in the middle of the table.", (), 2, 2)]
OTHER_SCENES = [SceneDescription("The hammer lies 3 cm from the front edge.", (), 1, 2)]


def _completion(top: dict[str, float]) -> bytes:
    """A llama.cpp-server style completions body: SmolLM2 writes " " then the digit."""
    lp = {"tokens": [" ", max(top, key=top.get)], "top_logprobs": [{" ": -0.01}, {k: math.log(v) for k, v in top.items()}]}
    return json.dumps({"choices": [{"text": " 7", "index": 0, "logprobs": lp}]}).encode()


OK_BODY = _completion({"7": 0.95, "6": 0.03, "8": 0.02})
FLAT_BODY = _completion({str(d): 0.1 for d in range(10)})


class FakeServer:
    def __init__(self):
        self.mode = "ok"
        self.script: list[str] = []  # modes for the next requests, then `mode`
        self.requests = 0
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(min(n, 1 << 20))
                fake.requests += 1
                mode = fake.script.pop(0) if fake.script else fake.mode
                try:
                    getattr(fake, "_" + mode)(self)
                except OSError:  # the client hung up: what it should do at the deadline or the cap
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    # ---- modes -------------------------------------------------------------------------------
    @staticmethod
    def _send(h, status: int, body: bytes, length: int | None = None):
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        h.wfile.write(body)

    def _ok(self, h):
        self._send(h, 200, OK_BODY)

    def _flat(self, h):
        self._send(h, 200, FLAT_BODY)

    def _500(self, h):
        self._send(h, 500, b'{"error": "boom"}')

    def _garbage(self, h):
        self._send(h, 200, b'{"choices": [{"text": " 7", "logprobs": {"top_logprobs": [{"7": -0.1')

    def _slow(self, h):  # a working server that needs 0.4 s per answer
        if not self.stop.wait(0.4):
            self._ok(h)

    def _hang(self, h):
        self.stop.wait(LIMIT_S)

    def _drip(self, h):
        h.send_response(200)
        h.send_header("Content-Length", "4096")
        h.end_headers()
        self._drip_bytes(h, b" " * 4096)

    def _drip_headers(self, h):
        self._drip_bytes(h, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{}")

    def _drip_bytes(self, h, data: bytes):
        for i in range(min(len(data), int(LIMIT_S / 0.5))):
            h.wfile.write(data[i:i + 1])
            h.wfile.flush()
            if self.stop.wait(0.5):
                return

    def _huge(self, h):  # no Content-Length: the size shows only while reading
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b'{"choices": [{"text": "')
        for _ in range(128):  # 8 MiB at most
            if self.stop.is_set():
                return
            h.wfile.write(b"7" * 65536)

    def _huge_declared(self, h):
        self._send(h, 200, b'{"choices": [', length=10**9)

    def _disconnect(self, h):
        h.send_response(200)
        h.send_header("Content-Length", str(len(OK_BODY)))
        h.end_headers()
        h.wfile.write(OK_BODY[:20])
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)
        h.close_connection = True


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def task():
    return load_task("push_tool_from_edge")


def _judge(url: str, **openai):
    oc = dict(base_url=url, deadline_s=DEADLINE, retries=1, backoff_s=0.05, cooldown_s=60.0, max_response_bytes=64 * 1024)
    oc.update(openai)
    # milestones_only: an unsure answer gets the rules (what these tests count); the default would band it instead
    return make_judge(JudgeConfig(backend="openai", hazards_from="rules", confidence_threshold=0.5,
                                  fallback="milestones_only", openai=OpenAIConfig(**oc)))


def _timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - t0


FAULTS = {  # mode → (the cause counted, words the one warning names)
    "500": ("error", "HTTP 500"),
    "garbage": ("error", "bad JSON"),
    "huge": ("error", "cap"),
    "huge_declared": ("error", "cap"),
    "disconnect": ("error", "IncompleteRead"),
    "hang": ("deadline", "deadline"),
    "drip": ("deadline", "deadline"),
    "drip_headers": ("deadline", "deadline"),
}


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("mode", list(FAULTS))
def test_judge_answers_with_rules_when_the_server_misbehaves(fake, task, mode, caplog):
    cause, words = FAULTS[mode]
    fake.mode = mode
    judge = _judge(fake.url)
    with caplog.at_level(logging.DEBUG):
        first, t_first = _timed(judge.judge, task.text, SCENES)
        later, t_later = _timed(judge.judge, task.text, SCENES + OTHER_SCENES, explain=True)
    for j in first + later:
        assert isinstance(j, Judgement) and j.fallback and math.isfinite(j.progress) and j.backend == "openai"
    assert [j.progress for j in first] == [0.0, 1.0]  # the rules' milestones
    assert t_first < DEADLINE + SLACK  # one call: at most the deadline, retries and backoff included
    assert t_later < SLACK  # the cooldown: the server is not waited for again in this outage
    assert ("past its deadline" if cause == "deadline" else "unavailable") in later[0].reason
    st = judge.stats()
    assert st[f"fallback_{cause}"] == 5 and st["fallbacks"] == 5 and st["calls"] == 5
    assert st["fallback_error"] + st["fallback_deadline"] + st["fallback_low_confidence"] == st["fallbacks"]
    assert st["errors"] == 2 and st["outages"] == 1
    [warning] = _warnings(caplog)  # one per outage, naming the server and the reason
    assert fake.url in warning and words in warning
    assert 1 <= fake.requests <= 2  # retries=1; nothing during the cooldown
    judge.close()


@pytest.mark.parametrize("mode", list(FAULTS))
def test_blended_reward_stays_finite_and_counts_apart(fake, task, mode, caplog):
    cause, _ = FAULTS[mode]
    fake.mode = mode
    judge = _judge(fake.url)
    blend = BlendedReward(task.text, judge, RewardConfig(judge_every=1, cache=False), n_envs=2)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            infos = [{"description": s} for s in SCENES]
            rewards = blend([0.0, 0.0], [False, False], infos)
            assert rewards.shape == (2,) and np.isfinite(rewards).all()
            assert all(info["judgement"].fallback and math.isfinite(info["reward_terms"]["total"]) for info in infos)
    assert time.monotonic() - t0 < DEADLINE + SLACK  # three judged steps, one outage: one deadline at most
    st = blend.stats()
    # the blend's counts and the judge's live side by side (summary.json, TensorBoard)
    assert st["blend_judge_calls"] == 6 and st["blend_judge_errors"] == 0 and st["nan_rewards"] == 0
    assert st["judge_calls"] == 6 and st[f"judge_fallback_{cause}"] == 6 and st["judge_errors"] == 3
    assert st["judge_outages"] == 1 and len(_warnings(caplog)) == 1
    judge.close()


def test_one_warning_per_outage_and_one_info_on_recovery(fake, task, caplog):
    judge = _judge(fake.url, cooldown_s=0.2)
    fake.mode = "500"
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert all(j.fallback for j in judge.judge(task.text, SCENES))
        time.sleep(0.25)  # past the cooldown
        fake.mode = "ok"
        good = judge.judge(task.text, SCENES)
        fake.mode = "hang"
        _, t = _timed(judge.judge, task.text, OTHER_SCENES)  # new text: not in the answer cache
    assert not any(j.fallback for j in good) and good[0].progress == pytest.approx((0.95 * 7 + 0.03 * 6 + 0.02 * 8) / 9)
    assert t < DEADLINE + SLACK
    warnings = _warnings(caplog)
    assert len(warnings) == 2 and "HTTP 500" in warnings[0] and "deadline" in warnings[1]
    assert sum("recovered after 3 failed call(s)" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO) == 1
    st = judge.stats()
    assert (st["outages"], st["errors"], st["fallback_error"], st["fallback_deadline"]) == (2, 4, 6, 1)
    with caplog.at_level(logging.INFO):
        judge.close()
    assert "still failing at close: 1 failed call(s)" in caplog.text


def test_low_confidence_is_its_own_cause(fake, task):
    fake.mode = "flat"  # a uniform digit distribution: confidence 0.3 under the threshold 0.5
    judge = _judge(fake.url)
    out = judge.judge(task.text, SCENES)
    assert all(j.fallback for j in out) and "LLM confidence 0.30" in judge.judge(task.text, SCENES[:1], explain=True)[0].reason
    st = judge.stats()
    assert st["fallback_low_confidence"] == 3 and st["fallback_error"] == st["fallback_deadline"] == 0
    assert st["errors"] == st["outages"] == 0


def test_a_deadline_keeps_the_answers_finished_in_time(fake, task):
    fake.script = ["ok"]  # the first scene's request is answered, the second hangs
    fake.mode = "hang"
    judge = _judge(fake.url)
    out, t = _timed(judge.judge, task.text, SCENES)
    assert not out[0].fallback and out[1].fallback and t < DEADLINE + SLACK
    assert judge.stats()["fallback_deadline"] == 1 and judge.stats()["fallback_low_confidence"] == 0


def test_a_call_deadline_bounds_a_slow_batch_without_a_cooldown(fake, task):
    fake.mode = "slow"
    scenes = [SceneDescription(f"The hammer is {d} cm from the bin.", (), 1, 2) for d in range(1, 5)]
    judge = _judge(fake.url, call_deadline_s=DEADLINE)
    out, t = _timed(judge.judge, task.text, scenes)  # 4 × 0.4 s of work, 1 s allowed
    assert t < DEADLINE + SLACK and not out[0].fallback and out[-1].fallback
    assert judge.stats()["fallback_deadline"] == sum(j.fallback for j in out) >= 1
    [j] = judge.judge(task.text, scenes[-1:])  # no cooldown: the server answers, it was the batch that was slow
    assert not j.fallback and fake.requests == sum(not j.fallback for j in out) + 2


def test_retries_and_backoff_stay_inside_the_deadline(fake, task):
    fake.mode = "500"
    judge = _judge(fake.url, retries=10, backoff_s=0.3)  # unbounded, 0.3+0.6+1.2+… s of backoff
    out, t = _timed(judge.judge, task.text, SCENES)
    assert all(j.fallback for j in out) and t < DEADLINE + SLACK
    assert judge.stats()["fallback_error"] == 2 and fake.requests <= 3  # the failure, not the clock, is the cause


# ---- arbitrary answers (hypothesis) ----------------------------------------------------------
SCORE_LIKE = st.from_regex(r"\A(Score|score|SCORE)?\W{0,3}(is|of|=|:|-)?\s*\d{1,7}(\.\d{1,3})?"
                           r"( ?%| ?/ ?\d{1,4}| out of \d{1,4})?\Z")
TEXTS = st.one_of(st.text(max_size=300), SCORE_LIKE,
                  st.builds(lambda a, b, c: a + b + c, st.text(max_size=40), SCORE_LIKE, st.text(max_size=40)),
                  st.binary(max_size=200))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=20)
TOP = st.dictionaries(st.sampled_from([" ", "7", " 3", "yes", "no", "x", "10"]) | st.text(max_size=3),
                      st.floats() | st.integers(-10**6, 10**6) | JSON, max_size=8)
@functools.lru_cache(maxsize=1)
def _task_text():
    return load_task("push_tool_from_edge").text


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(TEXTS)
def test_parse_answer_never_raises_and_stays_on_the_scale(text):
    a = parse_answer(text)
    if a.score is None:
        assert a.progress is None
    else:
        assert 0 <= a.score <= 9 and math.isfinite(a.progress) and 0.0 <= a.progress <= 1.0
        assert a.score == round(a.progress * 9)
    assert a.reason is None or (isinstance(a.reason, str) and len(a.reason) <= 300)
    assert all(isinstance(h, str) and h for h in a.hazards)
    r = clean_reason(text)
    assert r is None or (isinstance(r, str) and "\n" not in r)


@FUZZ
@given(st.lists(TEXTS, max_size=7))
def test_votes_give_a_distribution_or_none(texts):
    hist = vote_histogram([parse_answer(t).score for t in texts])
    if hist is not None:
        digits, share = hist
        assert digits.shape == (10,) and abs(digits.sum() - 1.0) < 1e-9 and (digits >= 0).all() and 0.0 < share <= 1.0
        progress, conf = summarize(digits, share)
        assert 0.0 <= progress <= 1.0 and 0.0 <= conf <= 1.0


@FUZZ
@given(st.lists(TEXTS, min_size=1, max_size=5), st.lists(TOP, max_size=3), JSON)
def test_openai_answer_reading_never_raises(texts, tops, anything):
    """The backend's own reading of a completion (text votes, top logprobs) on whatever a server
    might send: a distribution summing to 1 or None, probabilities in [0, 1], never an exception."""
    task = _task_text()
    backend = OpenAIBackend(JudgeConfig(backend="openai", votes=len(texts)))
    answers = iter([{"text": t} for t in texts])
    backend._complete = lambda *a, **k: next(answers)
    prompt = backend._prompt(task)
    s = backend._score_votes(task, "head", ["tool_near_edge", "tool_fell"], explain=True)
    assert s.digits is None or abs(s.digits.sum() - 1.0) < 1e-9
    assert s.progress is None or 0.0 <= s.progress <= 1.0
    assert all(0.0 <= p <= 1.0 for p in s.hazards.values()) and 0 <= expected_digit(s.digits) <= 9
    choices = [{"logprobs": {"tokens": [" ", "7"], "top_logprobs": tops}}, {"logprobs": anything}, {"logprobs": tops}]
    for choice in choices:
        top = OpenAIBackend._top(choice, skip_space=True)
        assert top is None or all(0.0 <= p <= 1.0 for p in top.values())
        backend._complete = lambda *a, _c=choice, **k: _c
        backend.logprobs = None
        s = backend._score_logprobs(prompt, "head", ["tool_near_edge"])
        if s is not None:
            assert s.digits is None or abs(s.digits.sum() - 1.0) < 1e-9
            assert 0.0 <= s.digit_mass <= 1.0 and all(0.0 <= p <= 1.0 for p in s.hazards.values())


@FUZZ
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=10, max_size=10) | st.none(), st.floats())
def test_expected_digit_and_summary_stay_in_range(values, mass):
    digits = None if values is None else np.array(values)
    assert 0 <= expected_digit(digits) <= 9
    if digits is not None:
        progress, conf = summarize(digits, mass)
        assert 0.0 <= progress <= 1.0 and 0.0 <= conf <= 1.0


# ---- one clean-up for every backend (issue 11) --------------------------------------------
class _RawReason:
    """A backend that hands back a model's reason as raw text: leading blank line, a loop, more lines."""

    name = "raw"

    def score(self, task, scenes, hazards, explain):
        text = "\n  The task is not finished.   The task is not finished.\nHazards: none" if explain else None
        return [Scored(np.eye(10)[7], 1.0, {}, text) for _ in scenes]

    def close(self):
        pass


def test_reasons_are_cleaned_and_digits_rounded_in_one_place(task):
    j = ConfidentJudge(_RawReason(), JudgeConfig(confidence_threshold=0.5))
    [out] = j.judge(task.text, SCENES[:1], explain=True)
    assert out.reason == "The task is not finished." and not out.fallback
    from pathlib import Path

    import robo_prm.judge.backends as backends

    for name in ("llamacpp.py", "hf.py", "openai.py"):  # each reason prompt starts at scoring.expected_digit
        src = (Path(backends.__file__).parent / name).read_text()
        assert "expected_digit(" in src and "np.arange(10)" not in src and 'split("\\n")' not in src, name
