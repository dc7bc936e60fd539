"""Train the open_clip CoCa captioner on collected frames: `robo-prm perception train-coca`.

Loss: open_clip's `CoCaLoss` caption term (next-token cross-entropy on the state caption) plus the contrastive term
on distinct captions (`clip.clip_loss`: a repeated caption is no negative; open_clip's ClipLoss otherwise). The
stem and the first `freeze_blocks` trunk blocks keep their ImageNet weights and their output is computed once per
frame (fp16, in memory), as in `train.py`; the trunk's batch norms keep their ImageNet statistics throughout.
Each batch is cut to its longest caption (the rest is padding).
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
from robo_prm.perception.budget import BudgetedCycle, interrupted, shuffled_batches, train_loop
from robo_prm.perception.clip import clip_loss
from robo_prm.perception.coca import PAD, CaptionTokens, CocaBundle, CocaConfig, build_coca, save_coca
from robo_prm.perception.dataset import FrameSet, load_frames
from robo_prm.perception.train import precompute
from robo_prm.provenance import provenance


@dataclass
class CocaTrainConfig:
    data: str = opt("data/perception", "a folder written by `robo-prm perception collect` (several: comma-separated)")
    out: str = opt("runs/coca", "where the trained folder goes")
    width: int = opt(192, "width of the text tower, the decoder and the image tokens")
    heads: int = opt(4, "attention heads")
    text_layers: int = opt(1, "layers of the causal text tower")
    decoder_layers: int = opt(2, "layers of the multimodal decoder")
    embed_dim: int = opt(128, "contrastive embedding size")
    freeze_blocks: int = opt(10, "the stem and the first n trunk blocks keep their ImageNet weights")
    epochs: float = opt(4.0, "passes over the training frames")
    batch: int = opt(64, "frames per step")
    lr: float = opt(1e-3, "peak learning rate (AdamW, one-cycle schedule)")
    weight_decay: float = opt(1e-4, "AdamW weight decay")
    caption_weight: float = opt(2.0, "weight of the captioning loss (CoCa's default 2:1)")
    clip_weight: float = opt(1.0, "weight of the contrastive loss")
    eval_frames: int = opt(400, "held-out frames captioned for the manifest (0: none)")
    max_minutes: float = opt(0.0, "minutes of training steps at most: the learning-rate cycle is fitted into them "
                              "(perception/budget.py; 0: the planned steps)")
    threads: int = opt(1, "torch threads")
    seed: int = opt(0, "seed of the initialisation and the batches")
    imagenet: bool = opt(True, "start the trunk from the ImageNet weights (tests: false)")


def _step_losses(model, loss_fn, fmaps: torch.Tensor, tokens: torch.Tensor, ids: torch.Tensor, n_frozen: int,
                 clip_weight: float) -> dict[str, torch.Tensor]:
    length = int((tokens != PAD).sum(1).max())
    latent, embs = model.visual.tokens_from(fmaps.float(), n_frozen)
    out = model(None, tokens[:, :length], image_latent=latent, image_embs=embs)
    _, caption = loss_fn(out["image_features"], out["text_features"], out["logits"], out["labels"], out["logit_scale"])
    terms = {"caption": caption}
    if clip_weight:
        uniq, inv = torch.unique(ids, return_inverse=True)
        rows = torch.zeros(len(uniq), dtype=torch.long).scatter_(0, inv, torch.arange(len(ids)))  # one row per caption
        terms["clip"] = clip_loss(F.normalize(out["image_features"], dim=-1), out["text_features"][rows],
                                  out["logit_scale"].clamp(max=100), inv)
    return terms


def fit(model, fmaps: torch.Tensor, tokens: torch.Tensor, caption_id: torch.Tensor, cfg: CocaTrainConfig,
        n_frozen: int, progress: bool = True) -> tuple[list[dict], int]:
    import open_clip

    loss_fn = open_clip.CoCaLoss(caption_loss_weight=1.0, clip_loss_weight=0.0, pad_id=PAD)
    params = [p for p in model.parameters() if p.requires_grad]
    opt_ = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    n = len(fmaps)
    steps = max(1, int(math.ceil(cfg.epochs * n / cfg.batch)))
    cycle = BudgetedCycle(opt_, cfg.lr, steps, 0.05, cfg.max_minutes)  # the budget shortens the cycle, not cuts it
    weights = {"caption": cfg.caption_weight, "clip": cfg.clip_weight}
    rng = np.random.default_rng(cfg.seed)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="train-coca", unit="step")
    model.train()
    model.visual.trunk.eval()  # batch norm keeps its ImageNet statistics: batches of one scene would skew them
    history = []
    try:
        for step, idx in zip(train_loop(cycle), shuffled_batches(n, cfg.batch, rng)):
            ids = caption_id[idx]
            terms = _step_losses(model, loss_fn, fmaps[idx], tokens[ids], ids, n_frozen, cfg.clip_weight)
            loss = sum(weights[k] * v for k, v in terms.items())
            opt_.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt_.step()
            if (step + 1) % 20 == 0 or step + 1 == steps:
                row = {"step": step + 1, "loss": round(float(loss.detach()), 4),
                       **{k: round(float(v.detach()), 4) for k, v in terms.items()}}
                history.append(row)
                if bar is not None:
                    bar.set_postfix({k: v for k, v in row.items() if k != "step"})
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        interrupted(cycle, "train-coca")
    if bar is not None:
        bar.close()
    model.eval()
    return history, cycle.taken


def exact_match(bundle: CocaBundle, held: FrameSet, limit: int = 0, seed: int = 0) -> dict:
    """Greedy captions of (a sample of) held-out frames against their state captions."""
    idx = np.arange(len(held))
    if limit and limit < len(idx):
        idx = np.sort(np.random.default_rng(seed).choice(idx, limit, replace=False))
    got = bundle.caption(held.arrays["frames"][idx])
    want = [str(c) for c in held.arrays["caption"][idx]]
    return {"frames": len(idx), "caption_exact_match": float(np.mean([g == w for g, w in zip(got, want)]))}


def train(cfg: CocaTrainConfig, data: FrameSet | None = None, progress: bool = True, command: str = "") -> Path:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    data = data or load_frames(cfg.data)
    train_set = data.split(heldout=False)
    captions, caption_id = np.unique(train_set.arrays["caption"], return_inverse=True)
    tok = CaptionTokens.fit(data.arrays["caption"], CocaConfig.context_length)  # held-out captions' words too: no unknown
    coca_cfg = CocaConfig(size=data.meta["size"], embed_dim=cfg.embed_dim, width=cfg.width, heads=cfg.heads,
                          text_layers=cfg.text_layers, decoder_layers=cfg.decoder_layers,
                          bpe_ids=tok.bpe_ids)
    model = build_coca(coca_cfg, imagenet=cfg.imagenet)
    n_frozen = cfg.freeze_blocks
    frozen = list(model.visual.trunk.stem.parameters()) + [p for b in model.visual.trunk.blocks[:n_frozen] for p in b.parameters()]
    for p in frozen:
        p.requires_grad_(False)
    prefix = [model.visual.trunk.stem, *model.visual.trunk.blocks[:n_frozen]]
    for m in prefix:  # batch norm on its ImageNet statistics, in the cached outputs as at run time
        m.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        fmaps = precompute(lambda x: model.visual.trunk.prefix(x, n_frozen), train_set.arrays["frames"], progress=progress)
    prefix_s = time.perf_counter() - t0
    tokens = tok.encode(list(captions))
    t1 = time.perf_counter()
    history, step = fit(model, fmaps, tokens, torch.as_tensor(caption_id), cfg, n_frozen, progress)
    train_s = time.perf_counter() - t1
    bundle = CocaBundle(model, tok, coca_cfg)
    held = data.split(heldout=True)
    metrics = exact_match(bundle, held, cfg.eval_frames, cfg.seed) if cfg.eval_frames and len(held) else {}
    manifest = {
        "what": "robo_prm CoCa captioner: open_clip.CoCa, EfficientNet-Lite0 scene-token vision tower (ImageNet init), "
                "open_clip BPE over the captions' compact vocabulary",
        **provenance(command or None),
        "config": asdict(cfg),
        "data": {k: data.meta.get(k) for k in ("frames", "episodes", "splits", "policies", "tasks", "size")},
        "train": {"steps": step, "train_frames": len(fmaps), "distinct_captions": len(captions),
                  "seconds_frozen_trunk": round(prefix_s, 1), "seconds_train": round(train_s, 1), "threads": cfg.threads,
                  "history_tail": history[-5:]},
        "metrics_heldout_sample": metrics,
    }
    return save_coca(cfg.out, bundle, manifest)
