"""Train the progress reader (robo_prm/judge/progress_reader.py): `robo-prm finetune-progress`.

Rows are judge labels (`robo-prm label auto`, generated families included): (the task's goal and dimensions, the
label's scene without its milestone line) → the label's progress, (target − 1) / 9, fitted with binary
cross-entropy on that soft target. The `train` split trains; the `heldout` split (held-out task families,
phrasings and tasks) is reported after every epoch: mean absolute error and the value-order correlation of the
reader's progress along each held-out episode, by episode source (scripted successes should rise, random ones not).
"""
from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robo_prm.config_flags import opt
from robo_prm.finetune.hazard_reader import ReaderTrainConfig, net_probabilities, optimiser


@dataclass
class ProgressTrainConfig(ReaderTrainConfig):
    """The heldout split is reported after every epoch."""

    epochs: int = opt(4, min=1, help="passes over the training labels")
    batch_size: int = opt(64, min=1, help="labels per step")


def rows(labels) -> tuple[list[str], list[str], np.ndarray]:
    """(task words, scene texts, progress targets in [0, 1]) of labels."""
    from robo_prm.judge.hazard_reader import strip_milestones
    from robo_prm.judge.progress_reader import task_words

    tasks = [task_words(lab.judge_text()) for lab in labels]
    scenes = [strip_milestones(lab.scene) for lab in labels]
    return tasks, scenes, np.array([(lab.target - 1.0) / 9.0 for lab in labels], dtype=np.float32)


def episode_voc(labels, progress: np.ndarray) -> dict[str, dict]:
    """Mean value-order correlation of `progress` along each labelled episode (≥ 4 labelled states), by source."""
    from robo_prm.metrics import voc

    episodes: dict[tuple, list] = defaultdict(list)
    for lab, p in zip(labels, progress):
        episodes[(lab.episode, lab.task, lab.variant)].append((lab.step, float(p), lab.source))
    by_source: dict[str, list[float]] = defaultdict(list)
    for states in episodes.values():
        if len(states) >= 4:
            states.sort()
            by_source[states[0][2]].append(voc([p for _, p, _ in states]))
    return {s: {"voc": float(np.mean(v)), "episodes": len(v)} for s, v in sorted(by_source.items())}




def train_progress_reader(cfg: ProgressTrainConfig, echo=print) -> dict:
    import torch
    import torch.nn.functional as F

    from robo_prm.finetune.hazard_reader import _batches
    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge.hazard_reader import ReaderNet, TokenStates, pad
    from robo_prm.judge.progress_reader import ProgressReader
    from robo_prm.provenance import provenance

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    train_labels, held_labels = read_labels(cfg.labels, split="train"), read_labels(cfg.labels, split="heldout")
    if not train_labels:
        raise ValueError(f"{cfg.labels}: no train-split labels")
    tr_t, tr_s, tr_y = rows(train_labels)
    he_t, he_s, he_y = rows(held_labels)
    tokens = TokenStates(cache=10**7)  # every training text stays (the epochs reread them)
    TT, TS, HT, HS = tokens(tr_t), tokens(tr_s), tokens(he_t), tokens(he_s)
    echo(f"{len(tr_y)} training labels, {len(he_y)} held-out; MiniLM token states in {time.perf_counter() - t0:.0f} s")
    net = ReaderNet(in_dim=TT[0].shape[-1], dim=cfg.dim, layers=cfg.layers)
    opt_, sched = optimiser(net, cfg, len(tr_y))
    rng = random.Random(cfg.seed)
    history = []
    for epoch in range(cfg.epochs):
        net.train()
        total = 0.0
        for idx in _batches(TT, TS, cfg.batch_size, rng):
            a, am = pad([TT[j] for j in idx])
            b, bm = pad([TS[j] for j in idx])
            loss = F.binary_cross_entropy_with_logits(net(a, am, b, bm), torch.from_numpy(tr_y[idx]))
            opt_.zero_grad()
            loss.backward()
            opt_.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        row = {"epoch": epoch + 1, "loss": total / len(tr_y)}
        if len(he_y):
            p = net_probabilities(net, HT, HS)
            row.update(heldout_mae=float(np.abs(p - he_y).mean()), heldout_voc=episode_voc(held_labels, p))
        history.append(row)
        echo(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    info = {"labels": str(cfg.labels), "train_labels": len(tr_y), "heldout_labels": len(he_y), "history": history,
            "heldout_target_voc": episode_voc(held_labels, he_y) if len(he_y) else {},
            "config": {k: getattr(cfg, k) for k in ("epochs", "batch_size", "lr", "dim", "layers", "seed")},
            "seconds": round(time.perf_counter() - t0, 1), "provenance": provenance()}
    ProgressReader(net, tokens=tokens).save(cfg.out, info)
    echo(f"wrote {Path(cfg.out)}")
    return info
