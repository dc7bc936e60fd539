"""Garbage-tolerant parsing of text answers (servers without logprobs, explanations).

`parse_answer` never raises and never returns NaN. Score scales it understands, all mapped
to progress in [0, 1] and the 0–9 digit the prompt asks for:

* a digit 0–9 (the prompt's scale): progress = d / 9;
* "n/10" or "n out of 10" (the method's 1–10 scale): progress = (n − 1) / 9;
* other fractions "a/b", "a out of b": progress = a / b;
* percentages "75%": progress = 0.75;
* a bare number in (9, 10]: progress = 1.
Unknown scales (e.g. "Score: 4711") give score None rather than a guess.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

_NUM = r"(\d{1,6}(?:\.\d+)?)"
_SCALE = r"[ \t]*(%|/[ \t]*" + _NUM + r"|[ \t]+out[ \t]+of[ \t]+" + _NUM + r")?"  # on the same line only
_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}
_LABELLED = re.compile(
    r"score\W{0,3}?\s*(?:is|of|=|:|-)?\s*(?:"
    + _NUM + _SCALE + r"|(" + "|".join(_WORDS) + r")\b)",
    re.IGNORECASE,
)
_LEADING = re.compile(r"^\W{0,4}?" + _NUM + _SCALE + r"(?![\d.])")
_REASON = re.compile(r"reason\s*[:\-]\s*(.+?)(?=\n\s*(?:hazards?|score)\s*[:\-]|$)", re.IGNORECASE | re.DOTALL)
_HAZARDS = re.compile(r"hazards?\s*[:\-]\s*([^\n]*)", re.IGNORECASE)
_NONE = {"", "none", "no", "n/a", "na", "nothing", "-", "none.", "no hazards", "no hazard", "null"}


@dataclass(frozen=True)
class ParsedAnswer:
    score: int | None = None  # digit 0–9 (the prompt's scale), None when no score was found
    progress: float | None = None  # in [0, 1]; None when no score was found
    reason: str | None = None
    hazards: tuple[str, ...] = ()  # as written (see `match_hazards`)


def _progress(num: str, suffix: str | None, den1: str | None, den2: str | None) -> float | None:
    value = float(num)
    den = den1 or den2
    if suffix == "%":
        p = value / 100.0
    elif den is not None:
        d = float(den)
        if d <= 0:
            return None
        p = (value - 1.0) / 9.0 if d == 10.0 and value >= 1.0 else value / d
    elif value <= 9.0:
        p = value / 9.0
    elif value <= 10.0:  # "10" (or 9.5) on a 0–9 prompt: the top of the scale
        p = 1.0
    else:
        return None
    return p if math.isfinite(p) and -1e-9 <= p <= 1.0 + 1e-9 else None


def _score(text: str) -> float | None:
    for m in _LABELLED.finditer(text):
        if m.group(5):
            return min(_WORDS[m.group(5).lower()] / 9.0, 1.0)
        if m.group(1):
            p = _progress(m.group(1), (m.group(2) or "").strip() or None, m.group(3), m.group(4))
            if p is not None:
                return p
    m = _LEADING.match(text)  # completions that start right after a "Score:" the prompt wrote
    if m:
        return _progress(m.group(1), (m.group(2) or "").strip() or None, m.group(3), m.group(4))
    return None


def parse_answer(text: object) -> ParsedAnswer:
    """Score, reason and hazards from a model's free text; fields it cannot find are None/()."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str):
            return ParsedAnswer()
        text = text[:20000]
        p = _score(text)
        score = None
        if p is not None:
            p = min(max(p, 0.0), 1.0)
            score = int(round(p * 9.0))
        reason = None
        m = _REASON.search(text)
        if m:
            reason = " ".join(m.group(1).split())[:300] or None
        hazards: list[str] = []
        m = _HAZARDS.search(text)
        if m:
            for part in re.split(r",|;|\band\b", m.group(1)):
                name = part.strip().strip(".*`'\"[]()").strip()
                if name.lower() not in _NONE and name not in hazards:
                    hazards.append(name)
        return ParsedAnswer(score=score, progress=p, reason=reason, hazards=tuple(hazards))
    except Exception:  # a parser that raises would stop training over one odd answer
        return ParsedAnswer()


def _norm(s: str) -> str:
    return re.sub(r"[\s_\-]+", " ", s.lower()).strip()


def match_hazards(found: Iterable[str], known: dict[str, str]) -> tuple[str, ...]:
    """Map hazards as written to task hazard names; `known` is name → text. Unknown ones drop."""
    out: list[str] = []
    for f in found:
        nf = _norm(f)
        if not nf:
            continue
        for name, text in known.items():
            if nf in (_norm(name), _norm(text)) or _norm(name) in nf:
                if name not in out:
                    out.append(name)
    return tuple(out)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def tidy_reason(text: str | None) -> str | None:
    """Drop the loops greedy decoding of a small model falls into ("The task is not finished." five
    times): a sentence already said, and a cut-off tail that only restarts an earlier sentence."""
    if not text:
        return text
    kept: list[str] = []
    seen: set[str] = set()
    parts = _SENTENCE_END.split(text.strip())
    for i, sentence in enumerate(parts):
        key = sentence.lower().rstrip(".!? ")
        if not key or key in seen:
            continue
        last_unfinished = i == len(parts) - 1 and sentence[-1:] not in ".!?"
        if last_unfinished and any(k.startswith(key) for k in seen):
            continue
        seen.add(key)
        kept.append(sentence)
    return " ".join(kept) or None


def clean_reason(text: object) -> str | None:
    """A backend's raw reason as one line: its first non-empty line, whitespace collapsed, loops
    dropped (`tidy_reason`). `ConfidentJudge` applies it to every backend's answer; None stays None."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    line = str(text).strip().split("\n")[0]
    return tidy_reason(" ".join(line.split()))
