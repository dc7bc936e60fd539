"""How a reward model is judged (DESIGN.md, "How to judge a reward model"), each metric defined once.

Imported by the library (judge evaluation and calibration in finetune/, perception training) and by
every benchmark script. Undefined values are None (no predicted positives: no precision), except
where a number has a natural value (a constant progress curve orders nothing: VOC 0.0).
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ (ties get mean ranks); 0.0 for fewer than 3 pairs or when either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return 0.0
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def voc(progress: Sequence[float]) -> float:
    """Value-order correlation: Spearman ρ between progress and the time index (0.0 when constant or < 3 steps)."""
    return spearman(np.arange(len(progress)), progress)


def precision_recall_f1(tp: int, fp: int, fn: int) -> dict[str, float | None]:
    """From counts. Precision is None with no predicted positives, recall None with no true ones; F1 is None
    when either is, and 0.0 when either is 0."""
    p = tp / (tp + fp) if tp + fp else None
    r = tp / (tp + fn) if tp + fn else None
    if p is None or r is None:
        f = None
    else:
        f = 2 * p * r / (p + r) if p and r else 0.0
    return {"precision": p, "recall": r, "f1": f}


def confusion(pred: np.ndarray, true: np.ndarray) -> tuple[int, int, int]:
    """(tp, fp, fn) of two boolean arrays."""
    pred, true = np.asarray(pred, dtype=bool), np.asarray(true, dtype=bool)
    return int((pred & true).sum()), int((pred & ~true).sum()), int((~pred & true).sum())


def set_confusion(pairs: Iterable[tuple[Iterable[str], Iterable[str]]]) -> tuple[int, int, int]:
    """(tp, fp, fn) pooled over (predicted names, true names) pairs, e.g. hazards per judged scene."""
    tp = fp = fn = 0
    for pred, true in pairs:
        p, t = set(pred), set(true)
        tp, fp, fn = tp + len(p & t), fp + len(p - t), fn + len(t - p)
    return tp, fp, fn


def prf(pred: np.ndarray, true: np.ndarray) -> dict:
    """Precision, recall, F1 of boolean predictions, with the number of positives and of items."""
    true = np.asarray(true, dtype=bool)
    return {**precision_recall_f1(*confusion(pred, true)), "positives": int(true.sum()), "n": int(len(true))}


def ece(pred: Sequence[float], target: Sequence[float], bins: int = 10) -> float:
    """Expected calibration error of progress: Σ_bins (n_b/N) · |mean pred − mean target|, equal-width bins
    on pred (clipped to [0, 1]); NaN for no items."""
    p, t = np.clip(np.asarray(pred, float), 0, 1), np.asarray(target, float)
    if len(p) == 0:
        return float("nan")
    idx = np.minimum((p * bins).astype(int), bins - 1)
    err = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            err += m.sum() / len(p) * abs(p[m].mean() - t[m].mean())
    return float(err)


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve: the chance that a random positive scores above a random negative
    (ties count half), via the Mann–Whitney U statistic; None without both classes. A hazard
    probability can rank perfectly (AUROC 1.0) while its 0.5 threshold is useless: report both."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(s)  # average ranks: ties count half
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def mae(pred: Sequence[float], target: Sequence[float]) -> float | None:
    """Mean absolute error; None for no items."""
    p, t = np.asarray(pred, float), np.asarray(target, float)
    return float(np.abs(p - t).mean()) if len(p) else None


def accuracy(pred: np.ndarray, target: np.ndarray, ignore: int = -1) -> tuple[float | None, int]:
    """(share of pred == target, items counted) over the items whose target is not `ignore`; None for none."""
    pred, target = np.asarray(pred), np.asarray(target)
    m = target != ignore
    return (float((pred[m] == target[m]).mean()) if m.any() else None), int(m.sum())


def reason_faithfulness(pairs) -> dict:
    """Over (reason, scene facts, scene text) triples: the share of reasons whose every distance, relation and
    state claim agrees with the scene ("faithfulness"; None for no reasons), with the counts of reasons, claims,
    wrong claims and reasons that repeat a sentence. The claim reader is robo_prm/judge/faithfulness.py."""
    from robo_prm.judge.faithfulness import reason_faithfulness as _faithfulness

    return _faithfulness(pairs)


_VERB = re.compile(r"\b(is|lies|stands|has)\b")


def caption_facts(text: str) -> set[str]:
    """The facts a scene caption (describe/render.py) states: one per clause, keyed by its sentence's subject.
    'The gripper is open, 20 cm from the hammer.' → {'The gripper | is open', 'The gripper | 20 cm from the hammer'};
    an 'It is moving fast.' sentence takes the subject before it. Per-fact F1 (`fact_f1`) credits every clause read
    right, where exact match needs the whole caption."""
    facts, subject = set(), ""
    for sentence in (s.strip() for s in re.split(r"(?<=\.)\s+", text.strip()) if s.strip()):
        sentence = sentence.rstrip(".")
        m = _VERB.search(sentence)
        head = sentence[: m.start()].strip() if m else sentence
        if head != "It":
            subject = head
        rest = sentence[m.start():] if m else ""
        for clause in (c.strip() for c in rest.split(",")):
            facts.add(f"{subject} | {clause}")
    return facts


def fact_f1(pairs: Iterable[tuple[str, str]]) -> dict[str, float | None]:
    """Precision, recall, F1 of caption facts pooled over (predicted caption, true caption) pairs."""
    return precision_recall_f1(*set_confusion((caption_facts(p), caption_facts(t)) for p, t in pairs))
