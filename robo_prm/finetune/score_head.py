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
    noise: float = opt(0.0, min=0.0, help="train on hidden states with this many times llama.cpp's own numerical "
                                          "noise added (estimated from `noise_prompts` prompts read in batches; 0: none)")
    noise_prompts: int = opt(400, min=16, help="prompts read twice to estimate that noise")
    goal_paraphrases: int = opt(0, min=0, help="re-worded copies of each train label of a generated task, its goal in "
                                               "other words of its family (configs/reader/goals.yaml; 0: none)")
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


def _prompt_digest(lab, strip: bool) -> str:
    """What a label's hidden state depends on: the task text the judge reads and the scene text."""
    return hashlib.sha256(f"{lab.judge_text()!r}\0{lab.scene}\0{strip}".encode()).hexdigest()[:20]


def features(labels, model: str, threads: int = 1, strip: bool = False, cache: Path | None = None,
             echo=print) -> tuple[np.ndarray, np.ndarray]:
    """(hidden states (n, hidden), the LLM's own digit distributions (n, 10)) at each label's score position.
    `cache` (features.npz) keeps them per prompt: a label set that grew (paraphrased goals, a new round of
    policy rows) reads only its new prompts."""
    from robo_prm.judge import JudgeConfig
    from robo_prm.judge.backends.llamacpp import LlamaCppBackend
    from robo_prm.judge.hazard_reader import strip_milestones
    from robo_prm.judge.score_head import HiddenFromLogits, output_matrix
    from robo_prm.judge.scoring import digit_probs
    from robo_prm.types import SceneDescription

    key = f"{Path(model).name}:{_labels_digest(labels)}:{strip}"
    prompts = [_prompt_digest(lab, strip) for lab in labels]
    known: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if cache is not None and cache.exists():
        got = np.load(cache)
        if str(got["key"]) == key:
            echo(f"{cache}: hidden states of {len(labels)} labels reused")
            return got["h"], got["digits"]
        if "prompts" in got.files and str(got["key"]).split(":")[0] == Path(model).name:
            known = {p: (h, d) for p, h, d in zip(got["prompts"].tolist(), got["h"], got["digits"])}
    todo = [i for i in sorted(range(len(labels)), key=lambda i: labels[i].task) if prompts[i] not in known]
    if known:
        echo(f"{cache}: hidden states of {len(labels) - len(todo)} labels reused, {len(todo)} to read")
    backend = LlamaCppBackend(JudgeConfig(model=model, n_threads=threads, batch_seqs=1, finetuned=False)) if todo else None
    recover = HiddenFromLogits(output_matrix(model)) if todo else None
    t0 = time.perf_counter()
    for n, i in enumerate(todo):  # one task prefix at a time; a prompt seen before is read once
        if prompts[i] in known:
            continue
        lab = labels[i]
        scene = SceneDescription(text=strip_milestones(lab.scene) if strip else lab.scene, facts=())
        tt, logits = backend.score_logits(lab.judge_text(), [scene])
        known[prompts[i]] = (recover(logits[0]), digit_probs(logits[0], tt.digits)[0])
        if n and n % 500 == 0:
            echo(f"  {n}/{len(todo)} hidden states, {time.perf_counter() - t0:.0f} s")
    if backend is not None:
        backend.close()
    hs = np.stack([known[p][0] for p in prompts]).astype(np.float32)
    ds = np.stack([known[p][1] for p in prompts]).astype(np.float32)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, h=hs, digits=ds, key=key, prompts=np.array(prompts))
    return hs, ds


def numerical_noise(labels, h: np.ndarray, model: str, threads: int = 1, n: int = 400, seed: int = 0,
                    strip: bool = False, cache: Path | None = None, echo=print) -> np.ndarray:
    """Per-unit standard deviation of llama.cpp's numerical noise in the hidden state: `n` train labels' prompts
    read again in multi-sequence batches of 8 (one task's at a time, as the judge reads an episode's scenes) against
    `h`, read one at a time (`strip`: the milestone line dropped, as `features` read them). The 8-bit rounding of h
    differs with the batch; a head that leans on units where that noise is large moves its score by up to 0.19 with
    the batch alone (docs/FINETUNE.md, "Score head")."""
    from robo_prm.judge import JudgeConfig
    from robo_prm.judge.backends.llamacpp import LlamaCppBackend
    from robo_prm.judge.hazard_reader import strip_milestones
    from robo_prm.judge.score_head import HiddenFromLogits, output_matrix
    from robo_prm.types import SceneDescription

    key = f"{Path(model).name}:{n}:{seed}:{strip}"
    if cache is not None and cache.exists():
        got = np.load(cache)
        if str(got["key"]) == key:
            return got["std"]
    by_task: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        if lab.split == "train":
            by_task.setdefault(lab.task, []).append(i)
    rng = np.random.default_rng(seed)
    backend = LlamaCppBackend(JudgeConfig(model=model, n_threads=threads, batch_seqs=8, finetuned=False))
    recover = HiddenFromLogits(output_matrix(model))
    diffs: list[np.ndarray] = []
    for task in rng.permutation(sorted(by_task)):
        rows = rng.permutation(by_task[task])[:8]
        _, logits = backend.score_logits(labels[rows[0]].judge_text(),
                                         [SceneDescription(strip_milestones(labels[i].scene) if strip else labels[i].scene, ())
                                          for i in rows], batched=True)
        diffs += [recover(lg) - h[i] for i, lg in zip(rows, logits)]
        if len(diffs) >= n:
            break
    backend.close()
    std = np.stack(diffs).std(0).astype(np.float32)
    echo(f"numerical noise of the hidden state from {len(diffs)} prompts: {float(std.mean()):.4f} per unit")
    if cache is not None:
        np.savez(cache, std=std, key=key)
    return std


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

    from robo_prm.finetune.goal_paraphrases import paraphrased_labels
    from robo_prm.finetune.labels import read_labels
    from robo_prm.finetune.progress_reader import episode_voc
    from robo_prm.judge.score_head import ScoreHead
    from robo_prm.provenance import provenance

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    labels = read_labels(cfg.labels)
    reworded = paraphrased_labels(labels, cfg.goal_paraphrases, cfg.seed)
    labels += reworded
    train = np.array([lab.split == "train" for lab in labels])
    if not train.any():
        raise ValueError(f"{cfg.labels}: no train-split labels")
    held = [lab for lab, t in zip(labels, train) if not t]
    model = judge_model(cfg.model)
    h, llm_digits = features(labels, model, cfg.threads, cfg.strip_milestones, Path(cfg.out) / "features.npz", echo)
    echo(f"{int(train.sum())} training labels, {len(held)} held-out; hidden states in {time.perf_counter() - t0:.0f} s")
    mean, std = h[train].mean(0), h[train].std(0) + 1e-3
    x = torch.from_numpy((h - mean) / std)
    jitter = None
    if cfg.noise > 0:  # in the standardised units the head reads
        noise = numerical_noise(labels, h, model, cfg.threads, cfg.noise_prompts, cfg.seed, cfg.strip_milestones,
                                Path(cfg.out) / "noise.npz", echo)
        jitter = torch.from_numpy(cfg.noise * noise / std)
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
            xb = x[b] if jitter is None else x[b] + jitter * torch.randn(len(b), x.shape[1])
            loss = -(y[b] * torch.log_softmax(net(xb), -1)).sum(-1).mul(w[b]).mean()
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
                                                    "strip_milestones", "policy_weight", "noise", "noise_prompts", "goal_paraphrases",
                                                    "seed")},
            "reworded_labels": len(reworded),
            "seconds": round(time.perf_counter() - t0, 1), "provenance": provenance()}
    ScoreHead(weights, info).save(cfg.out)
    echo(f"wrote {Path(cfg.out)}")
    return info
