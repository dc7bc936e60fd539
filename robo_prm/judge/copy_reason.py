"""Reasons copied from the scene: the judge picks the scene sentences it finds likeliest as its reason.

The bundled 135M judge writes free reasons that read well on scenes like its labels' and drift on others: over
whole tidy_table episodes it said "The glass cup has reached the end of the scene", "The previous scene was not
started" and "The hammer is no longer in the scene" while the gripper held it (docs/BENCHMARKS.md, "Session 22:
reasons copied from the scene"). Its fine-tuning targets were the scene's own sentences that drive the score
(`finetune.labels.reason_target`), so here it may only copy: every sentence of the scene is scored as the reason's
continuation after "Score: d\\nReason:" (the mean log-probability of its tokens), and the `k` best, in the scene's
order, are the reason. Every claim is then one the scene makes and no sentence comes twice; the model still chooses
which — the gripper's, the milestone line, the object it works on.

Greedy decoding held to the scene's sentences was tried first and is worse: its first content token decides, and
the small model's next-token favourite after "The" was the glass cup in 54 of 60 tidy_table scenes
("The glass cup stands in the middle of the table." whatever the arm did).

A sentence that opens with "It" is given its subject ("It is over the green tray." after "The hammer is held 20 cm
above the table." → "The hammer is over the green tray."), so a copied sentence reads on its own.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

_SUBJECT = re.compile(r"^(the [\w\- ]+?) (?:is|lies|stands|has|rests|sits)\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """A scene's or a reason's sentences (also split at ";" and newlines)."""
    return [s.strip() for s in re.split(r"(?<=[.!?;])\s+|\n+", text or "") if s.strip()]


def reason_units(scene: str) -> list[str]:
    """The scene text's sentences, each able to stand alone (an "It …" sentence given the previous subject)."""
    units: list[str] = []
    subject = None
    for sent in sentences(scene):
        if re.match(r"^it\b", sent, re.IGNORECASE) and subject:
            sent = subject + sent[2:]
        elif m := _SUBJECT.match(sent):
            subject = m.group(1)[0].upper() + m.group(1)[1:]
        if sent not in units:
            units.append(sent)
    return units


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


def copied_reason(units: Sequence[str], token_logprobs: Sequence[Sequence[float]], k: int = 2) -> str | None:
    """The `k` units with the highest mean token log-probability, in the scene's order (None for no units)."""
    scored = [(float(np.mean(lp)), i) for i, lp in enumerate(token_logprobs) if len(lp)]
    best = sorted(i for _, i in sorted(scored, reverse=True)[:k])
    return " ".join(units[i] for i in best) or None
