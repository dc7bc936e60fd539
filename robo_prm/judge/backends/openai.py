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

Failures (refused connection, timeout, 5xx) are retried with exponential backoff, then
raised to `ConfidentJudge`, which logs once and answers with rules. After a failure the
server is skipped for `cooldown_s` so a dead server costs training no more waiting.
The API key is read from the env var `openai.api_key_env` and never logged.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from robo_prm.judge.base import Scored
from robo_prm.judge.config import JudgeConfig
from robo_prm.judge.parse import match_hazards, parse_answer
from robo_prm.judge.prompt import build_prompt, chatml, jinja_renderer, scene_text
from robo_prm.judge.scoring import vote_histogram
from robo_prm.types import SceneDescription, TaskText

log = logging.getLogger(__name__)

class ServerUnavailable(RuntimeError):
    pass


class OpenAIBackend:
    name = "openai"

    def __init__(self, cfg: JudgeConfig):
        self.cfg, self.oc = cfg, cfg.openai
        self.url = self.oc.base_url.rstrip("/")
        self.render = jinja_renderer(Path(self.oc.chat_template).read_text()) if self.oc.chat_template else chatml
        self.logprobs: bool | None = None  # unknown until the server answers once
        self._down_until = 0.0
        self._prompts: dict[tuple, Any] = {}

    # ---- HTTP ----------------------------------------------------------------------
    def _post(self, body: dict) -> dict:
        if time.monotonic() < self._down_until:
            raise ServerUnavailable(f"{self.url} failed recently; retrying after the cooldown")
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.oc.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps({"model": self.oc.model, **body}).encode()
        delay, last = self.oc.backoff_s, ""
        for attempt in range(self.oc.retries + 1):
            req = urllib.request.Request(f"{self.url}/completions", data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.oc.timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8", errors="replace"))
            except urllib.error.HTTPError as exc:
                text = exc.read().decode("utf-8", errors="replace")[:300]
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    raise ValueError(f"{self.url}/completions: HTTP {exc.code}: {text}") from None
                last = f"HTTP {exc.code}: {text}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, json.JSONDecodeError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if attempt < self.oc.retries:
                time.sleep(delay)
                delay *= 2
        self._down_until = time.monotonic() + self.oc.cooldown_s
        raise ServerUnavailable(f"{self.url}/completions: {last} (after {self.oc.retries + 1} tries)")

    def _complete(self, prompt: str, max_tokens: int, logprobs: bool, temperature: float = 0.0, seed: int | None = None) -> dict:
        body: dict = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                      "seed": self.cfg.seed if seed is None else seed}
        if logprobs:
            body["logprobs"] = self.oc.top_logprobs
        choices = self._post(body).get("choices") or [{}]
        return choices[0] if isinstance(choices[0], dict) else {}

    @staticmethod
    def _top(choice: dict, skip_space: bool) -> dict[str, float] | None:
        """Top-k {token text: prob} at the answer position; past a lone whitespace token
        when the model writes the space separately (SmolLM2: " ", "7")."""
        lp = choice.get("logprobs") or {}
        tops, toks = lp.get("top_logprobs") or [], lp.get("tokens") or []
        if not tops or not isinstance(tops[0], dict):
            return None
        i = 1 if skip_space and len(tops) > 1 and toks and not str(toks[0]).strip() else 0
        if not isinstance(tops[i], dict):
            return None
        return {str(k): math.exp(v) for k, v in tops[i].items() if isinstance(v, (int, float)) and v == v}

    # ---- scoring -------------------------------------------------------------------
    def _prompt(self, task: TaskText):
        key = task.key
        if key not in self._prompts:
            self._prompts[key] = build_prompt(task, self.render)
        return self._prompts[key]

    def score(self, task: TaskText, scenes: Sequence[SceneDescription], hazards: Sequence[str], explain: bool) -> list[Scored]:
        import numpy as np

        prompt = self._prompt(task)
        out = []
        for scene in scenes:
            t0 = time.perf_counter()
            head = prompt.prefix + scene_text(scene)
            s = None
            if self.logprobs is not False:
                s = self._score_logprobs(prompt, head, hazards)
            if s is None:
                s = self._score_votes(task, head + prompt.score_tail, hazards, explain)
            elif explain:
                d = int(round(float(np.dot(s.digits, np.arange(10))))) if s.digits is not None else 0
                text = self._complete(head + prompt.reason_tails[d], self.cfg.reason_tokens, False).get("text", "")
                s.reason = " ".join(str(text).strip().split("\n")[0].split()) or None
            s.latency_ms = (time.perf_counter() - t0) * 1e3
            out.append(s)
        return out

    def _score_logprobs(self, prompt, head: str, hazards: Sequence[str]) -> Scored | None:
        import numpy as np

        try:
            top = self._top(self._complete(head + prompt.score_tail, 2, True), skip_space=True)
        except ValueError as exc:  # a 4xx for the logprobs field: use text answers from now on
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
            if len(t) == 1 and t.isdigit():
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
