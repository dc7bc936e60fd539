"""Train the hazard reader (robo_prm/judge/hazard_reader.py): `robo-prm finetune-hazards`.

Pairs come from judge labels (`robo-prm label auto`, generated families included): every hazard of a label's
task text against the label's scene, positive when the task's check held on that state (`Label.hazards`).
The `train` split trains; the `heldout` split (held-out task families, phrasings and tasks) picks the
decision threshold — the one with the best F1 — which is folded into the head's bias so that P ≥ 0.5
decides. With `--kind_thresholds`, each hazard kind with enough held-out positives also gets its own threshold
(`kind_offsets`; `--kind_thresholds_only` fits just those for a reader already trained) — off by default: on
the shipped reader they raised F1 on the held-out labels (0.78 → 0.81) and lowered it on held-out task files
(docs/BENCHMARKS.md, session 10). Positives are weighted to balance the
classes (hazards are rare on most states). The hazard kinds, their wordings, the kind classifier that routes a
hazard text and the renaming of training pairs live in hazard_kinds.py.
"""
from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robo_prm.config_flags import opt
from robo_prm.finetune.hazard_kinds import Paraphraser, Renamer, fit_kind_classifier, kind_bank


@dataclass
class ReaderTrainConfig:
    """What every reader's training takes (the hazard reader here, the progress reader in progress_reader.py)."""

    labels: str = opt(help="label JSONL (the train split trains, the heldout split is held out)")
    out: str = opt(help="reader folder (reader.json + reader.safetensors)")
    epochs: int = opt(12, min=1, help="passes over the training rows")
    batch_size: int = opt(128, min=1, help="rows per step")
    lr: float = opt(1e-3, "peak learning rate (AdamW, one-cycle)")
    dim: int = opt(128, min=8, help="width of the reader's layers")
    layers: int = opt(2, min=1, help="encoder layers")
    seed: int = opt(0, "seed of the initialisation and the batches")
    threads: int = opt(1, min=1, help="torch threads")


@dataclass
class HazardTrainConfig(ReaderTrainConfig):
    """The heldout split also sets the decision threshold."""

    paraphrase: bool = opt(True, "also ask each generated hazard in other words (configs/reader/paraphrases.yaml)")
    kinds: bool = opt(True, "give the reader the hazard's similarity to each known hazard kind (KindBank)")
    word_dropout: float = opt(0.5, min=0.0, max=0.9, help="share of a hazard's tokens hidden in training (leans "
                                                           "the reader on the kind and the object, not the wording)")
    rename: float = opt(0.5, min=0.0, max=1.0, help="share of training labels whose things (object, table, edges, "
                                                     "middle, bins) are renamed in scene and hazards alike "
                                                     "(configs/reader/renames.yaml): the reader reads structure, not names")
    scene_focus: bool = opt(True, "each hazard reads only the scene's sentences about the objects it names (and the "
                                    "gripper's): another object at the edge is not this one's edge hazard")
    kind_classifier: bool = opt(True, "route each hazard text to its kind with a classifier fitted on the kind "
                                      "wordings filled with many train names (hazard_kinds.py); false: the nearest wording")
    kind_classifier_only: bool = opt(False, "no training: fit the kind classifier of the reader in --out (today's "
                                            "wordings) and rewrite its reader.json; reports the held-out labels")
    kind_thresholds: bool = opt(False, "also fit one threshold per hazard kind on the held-out labels")
    min_kind_positives: int = opt(20, min=1, help="held-out positives a hazard kind needs for a threshold of its own")
    kind_thresholds_only: bool = opt(False, "no training: fit the per-kind thresholds of the reader in --out on the "
                                            "held-out labels and rewrite its reader.json")


def pairs(labels, paraphrase=None, rename=None, focus: bool = False) -> tuple[list[str], list[str], np.ndarray]:
    """(hazard texts, scene texts, 0/1 targets): every hazard of each label's task against its scene; with
    `paraphrase` (a Paraphraser), each generated hazard is asked once more in other words, same target; with
    `rename` (a Renamer), a label's scene and hazards may have their things renamed, the same way in all; with
    `focus`, each hazard reads the scene cut to its own object (about_its_object)."""
    from robo_prm.judge.hazard_reader import about_its_object, strip_milestones

    hz, sc, y = [], [], []
    for lab in labels:
        on = set(lab.hazards)
        asked = [(h.name, text) for h in lab.judge_text().hazards
                 for text in [h.text] + ([t for t in [paraphrase(h.name, h.text)] if t] if paraphrase else [])]
        scene, *texts = [strip_milestones(lab.scene)] + [t for _, t in asked]
        if rename is not None:
            scene, *texts = rename([scene] + texts)
        for (name, _), text in zip(asked, texts):
            hz.append(text)
            sc.append(about_its_object(text, scene) if focus else scene)
            y.append(float(name in on))
    return hz, sc, np.asarray(y, dtype=np.float32)


def best_threshold(p: np.ndarray, y: np.ndarray) -> tuple[float, dict]:
    """The probability threshold with the best F1 on (p, y), with its precision / recall / F1."""
    best = (0.5, {"precision": 0.0, "recall": 0.0, "f1": 0.0})
    for t in np.unique(np.round(p, 4)):
        m = prf(p >= t, y)
        if m["f1"] > best[1]["f1"]:
            best = (float(t), m)
    return best


def prf(pred: np.ndarray, y: np.ndarray) -> dict:
    """Precision / recall / F1 of boolean decisions against 0/1 targets."""
    tp = float((pred & (y > 0.5)).sum())
    prec, rec = tp / max(pred.sum(), 1), tp / max((y > 0.5).sum(), 1)
    return {"precision": prec, "recall": rec, "f1": 2 * prec * rec / max(prec + rec, 1e-9)}


def logit(t: float) -> float:
    t = min(max(t, 1e-6), 1 - 1e-6)
    return float(np.log(t / (1 - t)))


def best_cut(z: np.ndarray, y: np.ndarray) -> float:
    """The logit cut with the best F1 on (z, y), midway between neighbouring logits (in logit space: the
    probabilities of confident pairs round to 1 and could not be told apart)."""
    u = np.unique(z)
    cuts = np.concatenate([[u[0] - 1.0], (u[1:] + u[:-1]) / 2])
    return float(max(cuts, key=lambda c: prf(z > c, y)["f1"]))


def fit_kind_offsets(reader, labels, min_positives: int = 20) -> tuple[dict[str, float], dict]:
    """Per-kind logit offsets on top of the folded threshold: for each kind (the hazard text's nearest kind)
    with ≥ `min_positives` positives in `labels`, the best-F1 cut of its pairs; the others keep the global cut.
    Returns the offsets and precision / recall / F1 on `labels` with them."""
    hz, sc, y = pairs(labels)
    if not len(y):
        return {}, {}
    z = reader.logits(hz, sc, kind_thresholds=False)
    kinds = np.array(reader.kind_of(hz), dtype=object)
    offsets: dict[str, float] = {}
    for kind in sorted({k for k in kinds if k is not None}):
        idx = kinds == kind
        if (y[idx] > 0.5).sum() >= min_positives:
            offsets[kind] = -best_cut(z[idx], y[idx])
    shifted = z + np.array([offsets.get(k, 0.0) for k in kinds])
    return offsets, prf(shifted >= 0, y)


def _batches(hz_states, sc_states, size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of pairs of similar length (less padding: the encoder's cost grows with the longest pair)."""
    order = list(range(len(hz_states)))
    rng.shuffle(order)
    chunk = size * 20  # sort within chunks of 20 batches: similar lengths, still a random mix of tasks
    batches = []
    for i in range(0, len(order), chunk):
        part = sorted(order[i:i + chunk], key=lambda j: len(hz_states[j]) + len(sc_states[j]))
        batches += [part[k:k + size] for k in range(0, len(part), size)]
    rng.shuffle(batches)
    return batches


def per_hazard(names: list[str], p: np.ndarray, y: np.ndarray, threshold: float = 0.5) -> dict:
    """Precision / recall per hazard name at `threshold` (with the counts)."""
    out = {}
    groups: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(names):
        groups[n].append(i)
    for n, idx in sorted(groups.items()):
        pred, yy = p[idx] >= threshold, y[idx] > 0.5
        tp, fp, fn = int((pred & yy).sum()), int((pred & ~yy).sum()), int((~pred & yy).sum())
        out[n] = {"tp": tp, "fp": fp, "fn": fn, "precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1)}
    return out


def optimiser(net, cfg: ReaderTrainConfig, rows: int):
    """AdamW with a one-cycle schedule over cfg.epochs passes of `rows` rows."""
    import torch

    opt_ = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=0.01)
    steps = cfg.epochs * ((rows + cfg.batch_size - 1) // cfg.batch_size)
    return opt_, torch.optim.lr_scheduler.OneCycleLR(opt_, max_lr=cfg.lr, total_steps=steps, pct_start=0.1)


def net_probabilities(net, first, second, kinds=None, batch: int = 512) -> np.ndarray:
    """sigmoid(net) over (first, second) token-state pairs (hazard or task words, scene), in eval mode."""
    import torch

    from robo_prm.judge.hazard_reader import pad

    net.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(first), batch):
            a, am = pad(first[i:i + batch])
            b, bm = pad(second[i:i + batch])
            out.append(torch.sigmoid(net(a, am, b, bm, None if kinds is None else kinds[i:i + batch])).numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def train_reader(cfg: HazardTrainConfig, echo=print) -> dict:
    import torch
    import torch.nn.functional as F

    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge.hazard_reader import HazardReader, KindBank, ReaderNet, TokenStates, pad
    from robo_prm.provenance import provenance

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    train_h, train_s, train_y = pairs(read_labels(cfg.labels, split="train"),
                                      Paraphraser(cfg.seed) if cfg.paraphrase else None,
                                      Renamer(cfg.rename, cfg.seed) if cfg.rename > 0 else None, cfg.scene_focus)
    held_labels = read_labels(cfg.labels, split="heldout")
    held_h, held_s, held_y = pairs(held_labels, focus=cfg.scene_focus)
    held_names = [h.name for lab in held_labels for h in lab.judge_text().hazards]
    if not len(train_y) or not train_y.sum():
        raise ValueError(f"{cfg.labels}: no training pairs with a hazard present (label tasks whose hazards have checks)")
    tokens = TokenStates(cache=10**7)  # every training text stays (the epochs reread them)
    tr_h, tr_s = tokens(train_h), tokens(train_s)
    he_h, he_s = tokens(held_h), tokens(held_s)
    echo(f"{len(train_y)} training pairs ({int(train_y.sum())} positive), {len(held_y)} held-out; "
         f"MiniLM token states in {time.perf_counter() - t0:.0f} s")
    bank = kind_bank() if cfg.kinds else None
    route = fit_kind_classifier(tokens, seed=cfg.seed) if bank and cfg.kind_classifier else None
    kinds = KindBank(bank, tokens, classifier=route) if bank else None
    tr_k = kinds(train_h) if kinds else None
    he_k = kinds(held_h) if kinds and len(held_y) else None
    net = ReaderNet(in_dim=tr_h[0].shape[-1], dim=cfg.dim, layers=cfg.layers, kinds=len(bank) if bank else 0)
    opt_, sched = optimiser(net, cfg, len(train_y))
    pos_weight = torch.tensor(float((1 - train_y).sum() / max(train_y.sum(), 1)))
    rng = random.Random(cfg.seed)
    for epoch in range(cfg.epochs):
        net.train()
        total = 0.0
        for idx in _batches(tr_h, tr_s, cfg.batch_size, rng):
            h, hm = pad([tr_h[j] for j in idx])
            s, sm = pad([tr_s[j] for j in idx])
            if cfg.word_dropout > 0:  # hide some hazard tokens (never all of one: a row keeps at least one)
                hidden = (torch.rand(hm.shape) < cfg.word_dropout) & hm
                every = (hidden == hm).all(1, keepdim=True)  # rows whose real tokens are all hidden
                hm = hm & ~(hidden & ~(every & (hm.cumsum(1) == 1)))  # … keep their first token
            k = tr_k[idx] if tr_k is not None else None
            loss = F.binary_cross_entropy_with_logits(net(h, hm, s, sm, k), torch.from_numpy(train_y[idx]),
                                                      pos_weight=pos_weight)
            opt_.zero_grad()
            loss.backward()
            opt_.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        if len(held_y):
            _, m = best_threshold(net_probabilities(net, he_h, he_s, he_k), held_y)
            echo(f"epoch {epoch + 1}: loss {total / len(train_y):.4f}, held-out best F1 {m['f1']:.3f} "
                 f"(P {m['precision']:.3f} R {m['recall']:.3f})")
    held_p = net_probabilities(net, he_h, he_s, he_k) if len(held_y) else np.zeros(0)
    threshold, held = best_threshold(held_p, held_y) if len(held_y) else (0.5, {})
    with torch.no_grad():  # fold the threshold into the bias: P >= 0.5 now means "above the threshold"
        net.head.bias -= logit(threshold)
    info = {"labels": str(cfg.labels), "train_pairs": len(train_y), "train_positive": int(train_y.sum()),
            "heldout_pairs": len(held_y), "threshold_folded": threshold, "heldout_at_threshold": held,
            "heldout_per_hazard": per_hazard(held_names, held_p, held_y, threshold) if len(held_y) else {},
            "config": {k: getattr(cfg, k) for k in ("epochs", "batch_size", "lr", "dim", "layers", "seed", "paraphrase",
                                                    "kinds", "word_dropout", "kind_classifier", "rename", "scene_focus")},
            "kind_bank": bank, "kind_classifier": route, "scene_focus": cfg.scene_focus}
    reader = HazardReader(net, info, tokens=tokens)
    if cfg.kind_thresholds and kinds and len(held_y):
        info["kind_offsets"], info["heldout_at_kind_thresholds"] = fit_kind_offsets(reader, held_labels,
                                                                                    cfg.min_kind_positives)
    info.update(seconds=round(time.perf_counter() - t0, 1), provenance=provenance())
    reader.save(cfg.out, info)
    echo(f"wrote {Path(cfg.out)}")
    return info


def refit_kind_thresholds(cfg: HazardTrainConfig, echo=print) -> dict:
    """`--kind_thresholds_only`: the reader in cfg.out gets per-kind thresholds from cfg.labels' held-out split."""
    import json

    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge.hazard_reader import HazardReader, save_net_folder

    reader = HazardReader.load(cfg.out)
    if reader.kinds is None:
        raise ValueError(f"{cfg.out}: this reader has no hazard kinds (trained with --kinds false): nothing to fit")
    offsets, held = fit_kind_offsets(reader, read_labels(cfg.labels, split="heldout"), cfg.min_kind_positives)
    info = {k: v for k, v in reader.info.items() if k != "net"}  # reader.json as loaded; save writes "net" again
    info.update(kind_offsets=offsets, heldout_at_kind_thresholds=held, kind_thresholds_labels=str(cfg.labels))
    save_net_folder(reader.net, cfg.out, info)
    echo(f"{cfg.out}: kind offsets {json.dumps({k: round(v, 2) for k, v in offsets.items()})}")
    return info


def refit_kind_classifier(cfg: HazardTrainConfig, echo=print) -> dict:
    """`--kind_classifier_only`: the reader in cfg.out gets today's kind bank and a kind classifier fitted on it
    (the net is kept); its held-out labels' precision / recall at the folded threshold before and after."""
    from robo_prm.finetune.labels import read_labels
    from robo_prm.judge.hazard_reader import HazardReader, save_net_folder

    reader = HazardReader.load(cfg.out)
    if reader.kinds is None:
        raise ValueError(f"{cfg.out}: this reader has no hazard kinds (trained with --kinds false): nothing to route")
    hz, sc, y = pairs(read_labels(cfg.labels, split="heldout"))
    before = _rounded(prf(reader.logits(hz, sc) > 0, y)) if len(y) else {}
    info = {k: v for k, v in reader.info.items() if k != "net"}  # reader.json as loaded; save writes "net" again
    info.update(kind_bank=kind_bank(), kind_classifier=fit_kind_classifier(reader.tokens, seed=cfg.seed))
    reader = HazardReader(reader.net, info, tokens=reader.tokens)
    after = _rounded(prf(reader.logits(hz, sc) > 0, y)) if len(y) else {}
    info.update(heldout_route_before=before, heldout_route_after=after)
    save_net_folder(reader.net, cfg.out, info)
    echo(f"{cfg.out}: kind classifier ({info['kind_classifier']['texts']} wordings, accuracy "
         f"{info['kind_classifier']['accuracy']}); held-out labels {before} -> {after}")
    return info


def _rounded(m: dict) -> dict:
    return {k: round(float(v), 4) for k, v in m.items()}
