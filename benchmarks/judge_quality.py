"""How good is a judge at reading progress and hazards? VOC and hazard precision/recall per task.

    python benchmarks/judge_quality.py                  # rules and the zero-shot bundled LLM, all shipped tasks
    python benchmarks/judge_quality.py --episodes 3     # quicker

For each shipped task:
* VOC (value-order correlation): Spearman ρ between a judge's progress and the time step, on
  scripted-expert episodes that succeed (should be high) and on random-policy episodes (should
  stay near 0); mean over episodes.
* Hazard precision / recall: the judge's hazards (probability ≥ 0.5) against the simulator's
  hazard predicates on every judged step of both episode sets (micro-averaged). Tasks whose
  hazards never fire in these episodes report n/a.
Judges: `rules` (the simulator's own milestone progress: an upper reference, not a model),
`llm-zero-shot` (the bundled SmolLM2 via llama.cpp, confidence threshold 0 so its own answer
is always used, hazards asked of the LLM for every hazard: hazards_from=llm), and `llm-finetuned`
(the same with the shipped LoRA judge, the default; note place_cup_in_bin was held out of its
labels, the other tasks' texts were trained on — docs/FINETUNE.md has the strictly held-out table).
Writes benchmarks/results/judge_quality.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import robo_prm
from robo_prm.describe import DescribeWrapper
from robo_prm.envs.experts import ScriptedExpert
from robo_prm.envs.rollout import RandomPolicy, rollout
from robo_prm.judge import JudgeConfig, make_judge
from robo_prm.envs.task import shipped_tasks
from robo_prm.metrics import precision_recall_f1, set_confusion, voc
from robo_prm.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "judge_quality.json"
JUDGES = {
    "rules": JudgeConfig(backend="rules"),
    "llm-zero-shot": JudgeConfig(confidence_threshold=0.0, hazards_from="llm", n_threads=2, finetuned=False),
    "llm-finetuned": JudgeConfig(confidence_threshold=0.0, hazards_from="llm", n_threads=2),
}


def episodes(task: str, n: int, seed0: int):
    """(successful expert episodes, random-policy episodes) as lists of SceneDescription lists."""
    import gymnasium as gym

    env = DescribeWrapper(gym.make(robo_prm.env_id(task)))
    expert = ScriptedExpert(env)
    good, seed = [], seed0
    while len(good) < n and seed < seed0 + 5 * n:
        ep = rollout(env, expert, seed)
        if ep.success:
            good.append([i["description"] for i in ep.infos])
        seed += 1
    random_policy = RandomPolicy(np.random.default_rng(seed0))  # one stream across the episodes
    rand = [[i["description"] for i in rollout(env, random_policy, seed0 + 1000 + k).infos] for k in range(n)]
    env.close()
    return good, rand


def evaluate(judge, task, eps, stride: int):
    vocs, pairs = [], []
    for scenes in eps:
        scenes = scenes[::stride]
        out = judge.judge(task.text, scenes)
        vocs.append(voc([j.progress for j in out]))
        pairs += [(j.hazard_names(), scene.hazards) for scene, j in zip(scenes, out)]
    return vocs, *set_confusion(pairs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--stride", type=int, default=2, help="judge every n-th step of an episode")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from robo_prm.envs.task import load_task

    rows = []
    data = {t: episodes(t, args.episodes, args.seed) for t in shipped_tasks()}
    for name, cfg in JUDGES.items():
        judge = make_judge(cfg)
        for t in shipped_tasks():
            task = load_task(t)
            good, rand = data[t]
            t0 = time.perf_counter()
            v_good, *c1 = evaluate(judge, task, good, args.stride)
            v_rand, *c2 = evaluate(judge, task, rand, args.stride)
            tp, fp, fn = (a + b for a, b in zip(c1, c2))
            hz = precision_recall_f1(tp, fp, fn)
            rows.append({
                "judge": name, "task": t, "episodes_success": len(good), "episodes_random": len(rand),
                "voc_success": float(np.mean(v_good)) if v_good else None,
                "voc_random": float(np.mean(v_rand)) if v_rand else None,
                "hazard_precision": hz["precision"], "hazard_recall": hz["recall"],
                "hazard_positives": tp + fn, "seconds": time.perf_counter() - t0,
            })
            print(json.dumps(rows[-1]), flush=True)
        judge.close()
    meta = provenance()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    print("\n| judge | task | VOC success | VOC random | hazard precision | hazard recall | hazard positives |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['judge']} | {r['task']} | {fmt(r['voc_success'])} | {fmt(r['voc_random'])} | "
              f"{fmt(r['hazard_precision'])} | {fmt(r['hazard_recall'])} | {r['hazard_positives']} |")


if __name__ == "__main__":
    main()
