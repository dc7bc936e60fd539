"""Train the score head (robo_prm/judge/score_head.py): `robo-prm finetune-head`.

Rows are judge labels (`robo-prm label auto`, generated families included). For each label the judge LLM (the
shipped fine-tuned GGUF, or `--model`) reads the task and the scene exactly as it does in training — the same prompt,
through the llama.cpp backend — and the hidden state behind its score logits is kept (`features`; cached in
`<out>/features.npz`, so a second fit with other head settings skips the LLM). The head is fitted to the label's soft
target, the narrow Gaussian over the digits 0–9 the LoRA score rows use (robo_prm/finetune/lora.py), with every task
weighing the same (the shipped tidy_table has ~40 % of the rows). The `heldout` split (held-out families, phrasings
and tasks) is reported every 10 epochs: the value-order correlation along each held-out episode by source, the
LLM's own digits beside it.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robo_prm.config_flags import opt


@dataclass
class ScoreHeadTrainConfig:
    labels: str = opt(help="label JSONL (the train split trains, the heldout split is held out)")
    out: str = opt(help="head folder (head.json + head.safetensors; features.npz caches the LLM's hidden states)")
    model: str | None = opt(None, "the judge GGUF whose hidden states the head reads (null: the shipped fine-tuned judge)")
    hidden: int = opt(0, min=0, help="hidden units (0: one linear layer from the hidden state to the 10 digits)")
    epochs: int = opt(40, min=1, help="passes over the training labels")
    batch_size: int = opt(64, min=1, help="labels per step")
    lr: float = opt(1e-3, "AdamW learning rate")
    weight_decay: float = opt(1e-2, "AdamW weight decay")
    sigma: float = opt(0.6, "width of the soft target over digits (as the LoRA score rows)")
    llm_share: float | None = opt(0.0, "share of the LLM's own digit distribution in the answer (null: the one of "
                                       "0, 0.25, 0.5, 0.75 that orders the held-out split's scripted episodes best; "
                                       "a mixture is wider, so less often confident: docs/FINETUNE.md)")
    strip_milestones: bool = opt(False, "drop the scene's \"Milestones reached\" line (a file without milestones has none)")
    policy_weight: float = opt(1.0, gt=0.0, help="weight of the policy-state rows (`label auto --from_run`) against the "
                                                 "scripted rows of their task (1: every row of a task weighs the same)")
    seed: int = opt(0, "seed of the initialisation and the batches")
    threads: int = opt(1, min=1, help="llama.cpp and torch threads")


def judge_model(model: str | None) -> str:
    if model:
        return model
    from robo_prm.judge import JudgeConfig, resolve_finetuned

    return resolve_finetuned(JudgeConfig()).model


def _labels_digest(labels) -> str:
    h = hashlib.sha256()
    for lab in labels:
        h.update(f"{lab.task}\0{lab.scene}\0".encode())
    return h.hexdigest()[:16]


def features(labels, model: str, threads: int = 1, strip: bool = False, cache: Path | None = None,
             echo=print) -> tuple[np.ndarray, np.ndarray]:
    """(hidden states (n, hidden), the LLM's own digit distributions (n, 10)) at each label's score position."""
    from robo_prm.judge import JudgeConfig
    from robo_prm.judge.backends.llamacpp import LlamaCppBackend
    from robo_prm.judge.hazard_reader import strip_milestones
    from robo_prm.judge.score_head import HiddenFromLogits, output_matrix
    from robo_prm.judge.scoring import digit_probs
    from robo_prm.types import SceneDescription

    key = f"{Path(model).name}:{_labels_digest(labels)}:{strip}"
    if cache is not None and cache.exists():
        got = np.load(cache)
        if str(got["key"]) == key:
            echo(f"{cache}: hidden states of {len(labels)} labels reused")
            return got["h"], got["digits"]
    backend = LlamaCppBackend(JudgeConfig(model=model, n_threads=threads, batch_seqs=1, finetuned=False))
    recover = HiddenFromLogits(output_matrix(model))
    hs, ds = np.zeros((len(labels), recover.w.shape[1]), np.float32), np.zeros((len(labels), 10), np.float32)
    t0, done = time.perf_counter(), {}  # a prompt seen before (a state the policy returned to) is read once
    for n, i in enumerate(sorted(range(len(labels)), key=lambda i: labels[i].task)):  # one task prefix at a time
        lab = labels[i]
        text = lab.judge_text()
        scene = SceneDescription(text=strip_milestones(lab.scene) if strip else lab.scene, facts=())
        prompt = (repr(text), scene.text)
        if prompt in done:
            hs[i], ds[i] = hs[done[prompt]], ds[done[prompt]]
            continue
        tt, logits = backend.score_logits(text, [scene])
        hs[i], ds[i], done[prompt] = recover(logits[0]), digit_probs(logits[0], tt.digits)[0], i
        if n and n % 500 == 0:
            echo(f"  {n}/{len(labels)} hidden states, {time.perf_counter() - t0:.0f} s")
    backend.close()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, h=hs, digits=ds, key=key)
    return hs, ds


def soft_targets(targets: np.ndarray, sigma: float) -> np.ndarray:
    from robo_prm.finetune.lora import soft_target

    return np.stack([soft_target(float(t), sigma) for t in targets]).astype(np.float32)


def choose_llm_share(held, head_digits, llm_digits, fixed: float | None = None) -> tuple[float, dict[str, float]]:
    """(the LLM's share of the answer, held-out scripted-episode VOC by share): `fixed` where given, else the best
    of 0, 0.25, 0.5, 0.75 (ties: the smaller share); 0 without held-out labels."""
    from robo_prm.finetune.progress_reader import episode_voc

    if fixed is not None:
        return float(fixed), {}
    if not held:
        return 0.0, {}
    ticks = np.arange(10) / 9.0
    shares = {}
    for s in (0.0, 0.25, 0.5, 0.75):
        by_source = episode_voc(held, ((1.0 - s) * head_digits + s * llm_digits) @ ticks)
        shares[str(s)] = round(by_source.get("scripted", {}).get("voc", float("nan")), 4)
    best = max(shares, key=lambda k: (shares[k] if shares[k] == shares[k] else -2.0, -float(k)))
    return float(best), shares


def row_weights(labels, train: np.ndarray, policy_weight: float = 1.0) -> np.ndarray:
    """Every task weighs the same (mean 1 over the train rows, 0 on held-out rows), and then a policy-state row
    (`label auto --from_run`) weighs `policy_weight` times the scripted rows of its task. Why > 1: reach_tool's
    6,000 policy rows share one task's weight with 245 generated tasks, and the states training keeps judging sat
    at the 0.7 confidence line (docs/FINETUNE.md, "Score head")."""
    per_task = Counter(lab.task for lab, t in zip(labels, train) if t)
    w = np.array([(policy_weight if lab.source == "policy" else 1.0) / per_task[lab.task] if t else 0.0
                  for lab, t in zip(labels, train)])
    return w / w[train].mean()


def train_score_head(cfg: ScoreHeadTrainConfig, echo=print) -> dict:
    import torch

    from robo_prm.finetune.labels import read_labels
    from robo_prm.finetune.progress_reader import episode_voc
    from robo_prm.judge.score_head import ScoreHead
    from robo_prm.provenance import provenance

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    labels = read_labels(cfg.labels)
    train = np.array([lab.split == "train" for lab in labels])
    if not train.any():
        raise ValueError(f"{cfg.labels}: no train-split labels")
    held = [lab for lab, t in zip(labels, train) if not t]
    model = judge_model(cfg.model)
    h, llm_digits = features(labels, model, cfg.threads, cfg.strip_milestones, Path(cfg.out) / "features.npz", echo)
    echo(f"{int(train.sum())} training labels, {len(held)} held-out; hidden states in {time.perf_counter() - t0:.0f} s")
    mean, std = h[train].mean(0), h[train].std(0) + 1e-3
    x = torch.from_numpy((h - mean) / std)
    y = torch.from_numpy(soft_targets(np.array([lab.target for lab in labels]), cfg.sigma))
    w = torch.tensor(row_weights(labels, train, cfg.policy_weight), dtype=torch.float32)
    layers = [torch.nn.Linear(h.shape[1], cfg.hidden or 10)]
    if cfg.hidden:
        layers += [torch.nn.GELU(), torch.nn.Dropout(0.2), torch.nn.Linear(cfg.hidden, 10)]
    net = torch.nn.Sequential(*layers)
    opt_ = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rows, rng, history = np.flatnonzero(train), np.random.default_rng(cfg.seed), []
    ticks = np.arange(10, dtype=np.float32) / 9.0

    def held_digits() -> np.ndarray:
        """The head's digit distributions on the held-out rows."""
        net.eval()
        with torch.no_grad():
            p = torch.softmax(net(x[~train]), -1).numpy()
        net.train()
        return p

    for epoch in range(cfg.epochs):
        order, total = rng.permutation(rows), 0.0
        for i in range(0, len(order), cfg.batch_size):
            b = order[i:i + cfg.batch_size]
            loss = -(y[b] * torch.log_softmax(net(x[b]), -1)).sum(-1).mul(w[b]).mean()
            opt_.zero_grad()
            loss.backward()
            opt_.step()
            total += float(loss.detach()) * len(b)
        row = {"epoch": epoch + 1, "loss": total / len(rows)}
        if held and ((epoch + 1) % 10 == 0 or epoch + 1 == cfg.epochs):
            row["heldout_voc"] = episode_voc(held, held_digits() @ ticks)
        history.append(row)
        echo(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    share, shares = choose_llm_share(held, held_digits() if held else None, llm_digits[~train], cfg.llm_share)
    echo(f"llm_share {share} (held-out scripted VOC by share: {shares})")
    mods = [m for m in net if isinstance(m, torch.nn.Linear)]
    weights = {"mean": mean, "std": std}
    for i, m in enumerate(mods):
        weights[f"w{i}"], weights[f"b{i}"] = m.weight.detach().numpy(), m.bias.detach().numpy()
    info = {"kind": "score_head", "model": Path(model).name, "llm_share": share, "heldout_voc_by_share": shares,
            "labels": str(cfg.labels), "train_labels": int(train.sum()), "heldout_labels": len(held), "history": history,
            "heldout_llm_voc": episode_voc(held, llm_digits[~train] @ ticks) if held else {},
            "config": {k: getattr(cfg, k) for k in ("hidden", "epochs", "batch_size", "lr", "weight_decay", "sigma",
                                                    "strip_milestones", "policy_weight", "seed")},
            "seconds": round(time.perf_counter() - t0, 1), "provenance": provenance()}
    ScoreHead(weights, info).save(cfg.out)
    echo(f"wrote {Path(cfg.out)}")
    return info
