"""OpenAI-compatible server backend (vLLM, llama.cpp server, Ollama, …), stdlib HTTP only.

Uses the completions endpoint with the prompt rendered locally (ChatML unless
`openai.chat_template` names the served model's jinja template), so the prompt is the
same text the local backends see, ending at "Score:".

* Servers that return `logprobs`: one request per scene (max_tokens=2, greedy, top-k
  logprobs) → the digit distribution, exactly like the local backends; one request per
  hazard question → P(yes)/(P(yes)+P(no)) from the top-k.
* Servers that don't: `votes` sampled text answers per scene ("Score … Reason … Hazards"),
  parsed by `parse.py`; the vote histogram is the distribution and a hazard's probability
  is the share of votes naming it.

Bounds: every request has `openai.deadline_s` of wall-clock time for connect, every read and
all its retries and backoff (`transport.post` gives each socket read only the time left, so a
server that drips bytes is cut off like a silent one); `openai.call_deadline_s`, when set, caps
a whole `score` call (a batch of scenes). When a deadline passes, the answers already complete
are kept and `JudgeDeadline` hands the other scenes to the rules. A response body over
`openai.max_response_bytes` is dropped. Failures (refused connection, 5xx, garbage JSON, a cut
connection) are retried with exponential backoff while the deadline allows, then raised to
`ConfidentJudge`, which logs one warning per outage and answers with rules. After a failed call
the server is skipped for `cooldown_s` (doubling with each further failed call of the same
outage, at most 8x), so a dead or dripping server costs training one deadline per cooldown. (A
call deadline that passes after some answers came back is a slow batch, not a dead server: no
cooldown.) The API key is read from the env var `openai.api_key_env` and never logged.

Several servers (`openai.base_urls`): each request goes to the next server in turn that is not
cooling down; one that fails (its retries spent) starts its cooldown, with one warning, and the
request moves on to the next server while its deadline lasts, so a dead server among live ones
costs no fallback. The scenes of one call are scored `openai.concurrency` at a time (a thread each;
a scene's score, hazard and reason requests stay in order), which is how a server's parallel slots
(llama.cpp `--parallel`, vLLM's continuous batching) and several servers are kept busy.
"""
from __future__ import annotations

import http.client
import json
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from robo_prm.judge.backends.transport import post
from robo_prm.judge.base import JudgeDeadline, Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.parse import match_hazards, parse_answer
from robo_prm.judge.prompt import build_prompt, chatml, jinja_renderer, scene_text
from robo_prm.judge.scoring import expected_digit, vote_histogram
from robo_prm.types import SceneDescription, TaskText

log = logging.getLogger(__name__)

class ServerUnavailable(RuntimeError):
    pass


def _prob(logprob: object) -> float | None:
    """exp(logprob) for a number a server sent; a log-probability above 0 is clipped, NaN and
    non-numbers (or ints too big for a float) give None."""
    if isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
        return None
    try:
        return math.exp(min(float(logprob), 0.0)) if logprob == logprob else None
    except OverflowError:
        return None


class ClientError(ValueError):
    """A 4xx answer (other than 408/429): the request itself is wrong, retrying will not help."""


class _Server:
    """One server's URL and its health: cooldown until `down_until` after `down`, failed calls in a row."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.down_until = 0.0
        self.down: Exception | None = None
        self.failed_calls = 0


class OpenAIBackend:
    name = "openai"

    def __init__(self, cfg: JudgeConfig):
        self.cfg, self.oc = cfg, cfg.openai
        self.servers = [_Server(u) for u in (self.oc.base_urls or [self.oc.base_url])]
        self.url = self.servers[0].url
        self.where = ", ".join(s.url for s in self.servers)  # named in ConfidentJudge's outage warning
        self.render = jinja_renderer(Path(self.oc.chat_template).read_text()) if self.oc.chat_template else chatml
        self.logprobs: bool | None = None  # unknown until the server answers once
        self._lock = threading.Lock()  # server health, the turn, the call's counters
        self._turn = 0
        self._call_end = math.inf  # time.monotonic() by which the current score() call must end
        self._answered = 0  # requests answered in the current score() call
        self._prompts: dict[tuple, Any] = {}
        self._pool: ThreadPoolExecutor | None = None

    # ---- HTTP ----------------------------------------------------------------------
    def _mark_down(self, server: _Server, exc: Exception) -> Exception:
        with self._lock:
            server.failed_calls += 1
            server.down = exc
            server.down_until = time.monotonic() + self.oc.cooldown_s * min(2 ** (server.failed_calls - 1), 8)
        if len(self.servers) > 1 and server.failed_calls == 1:  # one server of several: the others answer
            log.warning("judge server %s failed (%s); skipping it for %.0f s", server.url, exc, self.oc.cooldown_s)
        return exc

    def _order(self) -> list[_Server]:
        """The servers to try, this request's turn first; those cooling down are left out."""
        with self._lock:
            k = self._turn % len(self.servers)
            self._turn += 1
            now = time.monotonic()
            return [s for s in self.servers[k:] + self.servers[:k] if now >= s.down_until]

    def _post(self, body: dict) -> dict:
        order = self._order()
        if not order:  # every server cools down: the same cause as the failure that started the nearest one
            s = min(self.servers, key=lambda x: x.down_until)
            cls = JudgeDeadline if isinstance(s.down, JudgeDeadline) else ServerUnavailable
            raise cls(f"{s.url} skipped for {s.down_until - time.monotonic():.1f} s more after: {s.down}")
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.oc.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps({"model": self.oc.model, **body}).encode()
        own_end = time.monotonic() + self.oc.deadline_s  # one deadline for the request, whichever server answers
        for i, server in enumerate(order):
            try:
                return self._post_to(server, data, headers, own_end)
            except (ServerUnavailable, JudgeDeadline):
                if i + 1 == len(order) or time.monotonic() >= min(own_end, self._call_end):
                    raise
        raise AssertionError("unreachable")

    def _post_to(self, server: _Server, data: bytes, headers: dict, own_end: float) -> dict:
        deadline = min(own_end, self._call_end)
        url = f"{server.url}/completions"
        delay, last = self.oc.backoff_s, ""
        for attempt in range(self.oc.retries + 1):
            try:
                status, raw = post(url, data, headers, deadline, self.oc.timeout_s, self.oc.max_response_bytes)
            except JudgeDeadline:
                if own_end > self._call_end and self._answered:  # a slow batch: the server itself answers
                    raise JudgeDeadline(f"{url}: the {self.oc.call_deadline_s:g} s call deadline "
                                        f"passed after {self._answered} answered request(s)") from None
                raise self._mark_down(server, JudgeDeadline(
                    f"{url}: no complete answer within the {self.oc.deadline_s:g} s deadline")) from None
            except (OSError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                text = raw.decode("utf-8", errors="replace")
                if 200 <= status < 300:
                    try:
                        out = json.loads(text)
                    except (ValueError, RecursionError) as exc:
                        last = f"bad JSON: {str(exc)[:200]}"
                    else:
                        if isinstance(out, dict):
                            with self._lock:
                                server.failed_calls = 0
                                self._answered += 1
                            return out
                        last = f"bad JSON: {type(out).__name__}, not an object"
                elif 400 <= status < 500 and status not in (408, 429):
                    raise ClientError(f"{url}: HTTP {status}: {text[:300]}")
                else:
                    last = f"HTTP {status}: {text[:300]}"
            if attempt == self.oc.retries or time.monotonic() + delay >= deadline:
                break  # no time for another try: the failure, not the deadline, is the cause
            time.sleep(delay)
            delay *= 2
        raise self._mark_down(server, ServerUnavailable(f"{url}: {last} (after {attempt + 1} tries)"))

    def _complete(self, prompt: str, max_tokens: int, logprobs: bool, temperature: float = 0.0, seed: int | None = None) -> dict:
        body: dict = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                      "seed": self.cfg.seed if seed is None else seed}
        if logprobs:
            body["logprobs"] = self.oc.top_logprobs
        choices = self._post(body).get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ServerUnavailable(f"{self.where}: no choices in the answer")
        return choices[0]

    @staticmethod
    def _top(choice: dict, skip_space: bool) -> dict[str, float] | None:
        """Top-k {token text: prob} at the answer position; past a lone whitespace token
        when the model writes the space separately (SmolLM2: " ", "7")."""
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            return None
        tops, toks = lp.get("top_logprobs"), lp.get("tokens")
        if not isinstance(tops, list) or not tops or not isinstance(tops[0], dict):
            return None
        i = 1 if skip_space and len(tops) > 1 and isinstance(toks, list) and toks and not str(toks[0]).strip() else 0
        if not isinstance(tops[i], dict):
            return None
        return {str(k): p for k, p in ((k, _prob(v)) for k, v in tops[i].items()) if p is not None}

    # ---- scoring -------------------------------------------------------------------
    def _prompt(self, task: TaskText):
        key = task.key
        if key not in self._prompts:
            self._prompts[key] = build_prompt(task, self.render)
        return self._prompts[key]

    def score(self, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str], explain: bool) -> list[Scored]:
        prompt = self._prompt(task)
        call_s = self.oc.call_deadline_s
        self._call_end = time.monotonic() + call_s if call_s is not None and call_s > 0 else math.inf
        self._answered = 0
        out: list[Scored] = []
        try:
            if self.oc.concurrency > 1 and len(scenes) > 1 and self.logprobs is not None:
                out = self._score_parallel(prompt, task, scenes, hazards, explain)
            else:  # one at a time (and always until the first answer says whether the server gives logprobs)
                for scene in scenes:
                    out.append(self._score_one(prompt, task, scene, hazards, explain))
        except JudgeDeadline as exc:
            exc.answered = exc.answered or out  # the scenes finished in time keep their answers
            raise
        finally:
            self._call_end = math.inf
        return out

    def _score_parallel(self, prompt, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str],
                        explain: bool) -> list[Scored]:
        """`concurrency` scenes in flight; a deadline keeps the answers of the first scenes that all finished."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.oc.concurrency, thread_name_prefix="robo_prm-openai")
        futures = [self._pool.submit(self._score_one, prompt, task, scene, hazards, explain) for scene in scenes]
        out: list[Scored] = []
        first: BaseException | None = None
        for f in futures:
            try:
                s = f.result()
            except BaseException as exc:  # noqa: BLE001 — the first failure in scene order is raised below
                first = first or exc
                continue
            if first is None:
                out.append(s)
        if isinstance(first, JudgeDeadline):
            first.answered = out
        if first is not None:
            raise first
        return out

    def _score_one(self, prompt, task: TaskText, scene: SceneDescription, hazards: Sequence[str], explain: bool) -> Scored:
        t0 = time.perf_counter()
        head = prompt.prefix + scene_text(scene)
        s = None
        if self.logprobs is not False:
            s = self._score_logprobs(prompt, head, hazards)
        if s is None:
            s = self._score_votes(task, head + prompt.score_tail, hazards, explain)
        elif explain:  # the raw first line; ConfidentJudge cleans every backend's reason alike
            tail = prompt.reason_tails[expected_digit(s.digits)]
            s.reason = str(self._complete(head + tail, self.cfg.reason_tokens, False).get("text", ""))
        s.latency_ms = (time.perf_counter() - t0) * 1e3
        return s

    def _score_logprobs(self, prompt, head: str, hazards: Sequence[str]) -> Scored | None:
        import numpy as np

        try:
            top = self._top(self._complete(head + prompt.score_tail, 2, True), skip_space=True)
        except ClientError as exc:  # a 4xx for the logprobs field: use text answers from now on
            log.info("%s rejected logprobs (%s); scoring from text answers", self.url, exc)
            top = None
        if top is None:
            if self.logprobs is None:
                log.info("%s returns no logprobs; scoring from %d text votes", self.url, self.cfg.votes)
            self.logprobs = False
            return None
        self.logprobs = True
        p = np.zeros(10)
        for tok, prob in top.items():
            t = tok.strip()
            if len(t) == 1 and t in "0123456789":
                p[int(t)] += prob
        mass = float(p.sum())
        digits = p / mass if mass > 0 else None
        probs = {}
        for name in hazards:
            ht = self._top(self._complete(head + prompt.hazard_tails[name], 1, True), skip_space=False) or {}
            y = sum(v for k, v in ht.items() if k.strip().lower() == "yes")
            n = sum(v for k, v in ht.items() if k.strip().lower() == "no")
            if y + n > 0:  # neither in the top-k: no answer, the rules hazards stand
                probs[name] = y / (y + n)
        return Scored(digits, min(mass, 1.0), probs)

    def _score_votes(self, task: TaskText, text_prompt: str, hazards: Sequence[str], explain: bool) -> Scored:
        known = {h.name: h.text for h in task.hazards}
        answers = []
        for v in range(max(1, self.cfg.votes)):
            # The first vote is greedy so one vote is deterministic; the rest sample (seeded).
            text = self._complete(text_prompt, 16 + self.cfg.reason_tokens, False,
                                  temperature=0.0 if v == 0 else 0.7, seed=self.cfg.seed + v).get("text", "")
            answers.append(parse_answer("Score:" + str(text)))
        scores = [a.score for a in answers]
        hist = vote_histogram(scores)
        digits, share = hist if hist is not None else (None, 0.0)
        got = sorted(d for d in scores if d is not None)
        median = got[(len(got) - 1) // 2] / 9.0 if got else None  # the method's median-of-votes
        probs = {}
        if hazards:
            named = [set(match_hazards(a.hazards, known)) for a in answers]  # the text answer names any hazard
            probs = {n: sum(n in s for s in named) / len(named) for n in hazards}
        reason = next((a.reason for a in answers if a.reason), None) if explain else None
        return Scored(digits, share, probs, reason, progress=median)

    def close(self) -> None:
        self._prompts.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
