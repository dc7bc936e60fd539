"""From next-token logits to progress and confidence, without decoding an integer.

The assistant turn is written up to ``Score:`` and the distribution of the next token is
read over the digit tokens 0–9 (one token each in these tokenizers; "10" would be two, so
the scale is 0–9): ``progress = E[digit] / 9``, ``score = 1 + 9·progress``.

Confidence (see `summarize`) = P(|digit − median| ≤ 1) × (share of the next-token mass on
digit tokens). The first factor is the probability that a sampled answer lands within one
point of the median – the agreement the method's median-of-3 vote relies on, read exactly
from the distribution instead of sampled. The second factor discounts a model that would
not answer with a digit at all. Both are in [0, 1]; text-only backends fill the same
formula from their vote histogram, so the threshold means the same for every backend.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

Tokenize = Callable[[str], list[int]]
DIGITS = tuple(str(d) for d in range(10))


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def digit_probs(logits: np.ndarray, digit_ids: Sequence[int]) -> tuple[np.ndarray, float]:
    """(distribution over 0–9 renormalised on the digits, share of all mass on the digits)."""
    p = softmax(logits)[list(digit_ids)]
    mass = float(p.sum())
    if not mass > 0.0:  # all digits underflowed: no information, uniform and zero mass
        return np.full(10, 0.1), 0.0
    return p / mass, min(mass, 1.0)


def normalised(digits: np.ndarray | None) -> np.ndarray | None:
    """`digits` as a distribution over 0–9 (NaN and negatives dropped, scaled before summing so
    huge values cannot overflow); None when nothing positive is left."""
    if digits is None:
        return None
    p = np.clip(np.nan_to_num(np.asarray(digits, dtype=np.float64).ravel()[:10]), 0.0, None)
    top = p.max(initial=0.0)
    if not top > 0.0:
        return None
    p = p / top
    return p / p.sum()


def summarize(digits: np.ndarray, mass: float) -> tuple[float, float]:
    """(progress in [0, 1], confidence in [0, 1]) from a distribution over 0–9."""
    p = normalised(digits)
    if p is None:
        return 0.0, 0.0
    progress = float(np.dot(p, np.arange(10)) / 9.0)
    median = int(np.searchsorted(np.cumsum(p), 0.5 - 1e-12))
    agree = float(p[max(median - 1, 0): median + 2].sum())
    conf = agree * float(np.clip(np.nan_to_num(mass), 0.0, 1.0))
    return float(np.clip(progress, 0.0, 1.0)), float(np.clip(conf, 0.0, 1.0))


def digits_around(progress: float, sigma: float = 0.5) -> np.ndarray:
    """A narrow distribution over 0–9 around `progress` (in [0, 1]): how a backend with a single number answers
    (the distilled head, the CLIP score), so `summarize` gives back the progress with confidence ≈ 1."""
    t = 9.0 * float(np.clip(progress, 0, 1))
    w = np.exp(-0.5 * ((np.arange(10) - t) / sigma) ** 2)
    return w / w.sum()


def expected_digit(digits: np.ndarray | None) -> int:
    """The digit 0–9 nearest E[digit]: what "Score: <d>" says before a reason is generated (every
    backend writes the reason after this one digit). 0 when there is no usable distribution."""
    p = normalised(digits)
    return 0 if p is None else int(np.clip(round(float(np.dot(p, np.arange(p.size)))), 0, 9))


def yes_probability(logits: np.ndarray, yes_ids: Sequence[int], no_ids: Sequence[int]) -> float:
    """P(yes) / (P(yes) + P(no)) at the answer position; 0.5 when both vanish."""
    p = softmax(logits)
    y, n = float(p[list(yes_ids)].sum()), float(p[list(no_ids)].sum())
    return y / (y + n) if y + n > 0.0 else 0.5


def digit_ids(tokenize: Tokenize, tail: str) -> tuple[list[int], list[int]]:
    """(ids of `tail` as the model sees them just before answering, [id of "0", …, "9"]).

    The digits are tokenized *with* the tail, so the answer is read the way the model would
    write "Score: 7": if " 7" is one token (some BPEs), the tail ends at "Score:" and " 7" is
    read; if the tokenizer splits it into " ", "7" (SmolLM2), the space joins the tail and
    "7" is read. Without a space ("Score:7") is the second choice.
    """
    for sep in (" ", ""):
        seqs = [tokenize(tail + sep + d) for d in DIGITS]
        head = seqs[0][:-1]
        if all(s[:-1] == head for s in seqs) and len({s[-1] for s in seqs}) == 10:
            return head, [s[-1] for s in seqs]
    raise ValueError("the tokenizer has no single-token digits 0-9 after the score prompt")


def yes_no_ids(tokenize: Tokenize, tail: str) -> tuple[list[int], list[int], list[int]]:
    """(head ids, yes-ids, no-ids) for a hazard question.

    The head is the longest common start of `tail + " yes"` and `tail + " no"`; the next
    token decides the answer (" yes" vs " no" in SmolLM2; "y" vs "n" after " " in a byte
    tokenizer). " Yes"/" No" count too where they share that head.
    """
    seqs = {o: tokenize(tail + o) for o in (" yes", " no", " Yes", " No")}
    a, b = seqs[" yes"], seqs[" no"]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    if n >= min(len(a), len(b)):
        raise ValueError("the tokenizer cannot tell yes from no after the hazard question")
    head = a[:n]
    pick = {o: s[n] for o, s in seqs.items() if len(s) > n and s[:n] == head}
    yes = sorted({t for o, t in pick.items() if o.strip().lower() == "yes"})
    no = sorted({t for o, t in pick.items() if o.strip().lower() == "no"} - set(yes))
    return head, yes, no


def vote_histogram(digits: Sequence[int | None]) -> tuple[np.ndarray, float] | None:
    """Text votes → (histogram over 0–9, share of votes that parsed); None if none parsed."""
    got = [d for d in digits if d is not None]
    if not got:
        return None
    hist = np.bincount(np.clip(got, 0, 9), minlength=10).astype(np.float64)
    return hist / hist.sum(), len(got) / max(len(digits), 1)


# Hazard kinds a calibrated threshold is kept for: a hazard's name (then its text) is matched against these words, so a
# task file's own hazard names ("hammer_close_to_edge") find the threshold of their kind; "*" is every other hazard.
HAZARD_KINDS = (("edge", ("edge",)), ("fell", ("fell", "fall", "dropped", "off_table", "off the")),
                ("tipped", ("tip", "over")), ("moved", ("moved", "disturb", "bystander", "shift")),
                ("touch", ("touch", "close_to", "bump", "hit")), ("fast", ("fast", "speed")), ("high", ("high", "height")))


def hazard_kind(name: str, text: str = "") -> str:
    for where in (name.lower(), text.lower()):
        for kind, words in HAZARD_KINDS:
            if any(w in where for w in words):
                return kind
    return "*"


@dataclass(frozen=True)
class Calibrator:
    """Monotone piecewise-linear map of raw progress (e.g. an isotonic fit): JSON {"x": [...], "y": [...]},
    and optionally {"hazard_thresholds": {kind: t}}: P(yes) of a hazard of that kind (`hazard_kind`) is mapped
    piecewise-linearly so that its fitted threshold t lands on 0.5, the threshold the safety penalty uses."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    hazard_thresholds: tuple[tuple[str, float], ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> "Calibrator":
        data = json.loads(Path(path).read_text())
        x, y = tuple(map(float, data["x"])), tuple(map(float, data["y"]))
        if len(x) != len(y) or len(x) < 2 or any(b < a for a, b in zip(x, x[1:])):
            raise ValueError(f"{path}: calibrator needs increasing x and equal-length y (≥ 2 points)")
        th = data.get("hazard_thresholds") or {}
        if not all(isinstance(v, (int, float)) and 0.0 < v < 1.0 for v in th.values()):
            raise ValueError(f"{path}: hazard_thresholds must be numbers strictly between 0 and 1")
        return cls(x, y, tuple(sorted((str(k), float(v)) for k, v in th.items())))

    def __call__(self, progress: float) -> float:
        return float(np.clip(np.interp(progress, self.x, self.y), 0.0, 1.0))

    def hazard(self, name: str, p: float, text: str = "") -> float:
        """P(yes) rescaled so the threshold fitted for this hazard's kind becomes 0.5 (unchanged without one)."""
        th = dict(self.hazard_thresholds)
        t = th.get(hazard_kind(name, text), th.get("*"))
        if t is None or not p == p:
            return p
        return float(0.5 * p / t if p < t else 0.5 + 0.5 * (p - t) / (1.0 - t))
