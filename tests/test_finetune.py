"""Fine-tuning the judge: labels, LoRA on a tiny in-process model, calibration, distillation,
GGUF merge arithmetic, evaluation and the labelling page. Everything here is small and fast."""
from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
import urllib.request
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from robo_prm.config_io import load_yaml
from robo_prm.finetune.calibrate import fit_calibrator, isotonic_fit, save_calibrator
from robo_prm.finetune.labels import (HELDOUT_TASKS, PARAPHRASES, TRAIN_TASKS, WORD_SWAPS, Label, label_states,
                                      progress_to_target, read_labels, rollout_states, target_to_digit, task_variants,
                                      text_of, variants_dir, write_labels)
from robo_prm.metrics import ece
from robo_prm.judge.scoring import Calibrator
from robo_prm.envs.task import load_task



@pytest.fixture(scope="module")
def tiny_model(tiny_llama):
    return tiny_llama[0]


def _labels(n=6):
    task = load_task("push_tool_from_edge")
    text = text_of(task.spec)
    scenes = ["The gripper is open, far from the hammer. The hammer lies 3 cm from the front edge of the table.",
              "The gripper is closed around the hammer. The hammer is held 5 cm above the table.",
              "The gripper is open, 5 cm from the hammer. The hammer lies in the middle of the table."]
    return [Label(task=task.name, scene=scenes[i % 3], target=[1.0, 5.5, 10.0][i % 3],
                  hazards=["tool_near_edge"] if i % 3 == 0 else [], task_text=text, base_task=task.name)
            for i in range(n)]


# ---- labels -------------------------------------------------------------------------------
def test_label_round_trip(tmp_path):
    labs = _labels(3) + [Label(task="reach_tool", scene="x", target=3.0, task_file="reach_tool", frame="f.png",
                               source="human", split="heldout")]
    write_labels(labs, tmp_path / "l.jsonl")
    back = read_labels(tmp_path / "l.jsonl")
    assert back == labs
    assert read_labels(tmp_path / "l.jsonl", split="heldout") == labs[-1:]
    assert back[-1].judge_text().goal == load_task("reach_tool").spec.goal
    assert back[0].judge_text().hazards[0].name == "tool_near_edge"
    assert [target_to_digit(progress_to_target(p)) for p in (0.0, 0.5, 1.0)] == [0, 4, 9]  # round(4.5) → 4 (banker's)
    with pytest.raises(ValueError):
        Label(task="t", scene="s", target=11.0, task_file="reach_tool")
    (tmp_path / "bad.jsonl").write_text('{"task": "t"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_labels(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("base", ["reach_tool", "push_tool_from_edge"])
def test_auto_labels_rise_along_scripted_episodes(base):
    from scipy.stats import spearmanr

    v = task_variants(base, "train")[-1]  # a word-swapped variant: its own words, same simulator semantics
    states = rollout_states(v, "scripted", seed=3)
    labs = label_states(v, states, "scripted", "ep", stride=1)
    targets = [lab.target for lab in labs]
    assert targets[-1] == 10.0 and targets[0] < 5.0
    assert spearmanr(np.arange(len(targets)), targets).statistic > 0.7
    word = v.task.word("tool0")
    assert word != "hammer" and word in labs[0].scene and word in labs[0].task_text["goal"]


def test_heldout_text_never_in_training_variants():
    for base in ("reach_tool", "push_tool_from_edge", "tidy_table"):
        train = json.dumps([text_of(v.task.spec) for v in task_variants(base, "train")])
        held = task_variants(base, "heldout")
        assert held and all(v.split == "heldout" for v in held)
        for swaps in WORD_SWAPS.values():
            for w in swaps["heldout"]:
                assert f" {w} " not in train
        for v in held:
            assert v.task.spec.goal not in train
    assert task_variants("place_cup_in_bin", "train") == []
    tray = [v for v in task_variants("place_cup_in_bin", "heldout") if v.name == "tray"][0]
    assert "green tray" in tray.task.spec.goal and tray.task.words == {"cup0": "glass cup", "tray": "green tray"}


def test_variant_data_from_yaml_makes_the_variants_the_python_made():
    """configs/variants/*.yaml hold the word swaps, paraphrases and cup-to-tray task that were Python literals in
    labels.py; tests/data/variants_before.json was captured from that Python. Same data → the same variants →
    the same labels as the shipped judge was trained on."""
    old = json.loads((Path(__file__).parent / "data" / "variants_before.json").read_text())
    assert WORD_SWAPS == old["word_swaps"] and list(WORD_SWAPS) == list(old["word_swaps"])  # order: variant order
    assert {t: {s: [list(p) for p in v] for s, v in sp.items()} for t, sp in PARAPHRASES.items()} == old["paraphrases"]
    assert load_yaml(variants_dir() / "place_cup_in_tray.yaml") == old["cup_to_tray_raw"]
    made = {f"{b}/{s}": [(v.name, v.split, v.base, v.plan, _spec_before_issue_13(v)) for v in task_variants(b, s)]
            for b in TRAIN_TASKS + HELDOUT_TASKS for s in ("train", "heldout")}
    assert hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest() == old["variants_sha256"]


def _spec_before_issue_13(variant) -> dict:
    """The spec as captured: issue 13 moved the experts' plans into the task files (`expert:`, plus `family` and
    `split` for generated tasks) and added `not grasped(hammer)` to push_tool_from_edge's success; nothing else."""
    d = asdict(variant.task.spec)
    for key in ("expert", "family", "split"):
        d.pop(key)
    if variant.base == "push_tool_from_edge":  # the hammer under its variant word
        d["success"] = re.sub(r" and not grasped\(\w+\)$", "", d["success"])
    return d


def test_cup_to_tray_is_a_real_task_file_its_plan_solves():
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import rollout
    from robo_prm.envs.tidy_env import TidyTableEnv

    task = load_task(variants_dir() / "place_cup_in_tray.yaml")
    assert task.name == "place_cup_in_tray" and "place_cup_in_tray" not in str(load_task("place_cup_in_bin").source)
    [tray] = [v for v in task_variants("place_cup_in_bin", "heldout") if v.name == "tray"]
    env = TidyTableEnv(task)
    try:
        assert rollout(env, ScriptedExpert(env, plan=tray.plan), 0).success
    finally:
        env.close()


# ---- LoRA -----------------------------------------------------------------------------------
def test_lora_prefix_cache_matches_full_prompt_and_a_step_changes_scores(tiny_model):
    from robo_prm.finetune.lora import LoraTrainConfig, LoraTrainer, _Scene, soft_target
    from robo_prm.judge.prompt import scene_text

    q = soft_target(5.5, 0.6)
    assert q.sum() == pytest.approx(1.0) and np.dot(q, np.arange(10)) == pytest.approx(4.5, abs=1e-6)
    labs = _labels(6)
    tr = LoraTrainer(LoraTrainConfig(model=tiny_model, lr=5e-2, threads=1))
    spec = labs[0].judge_text()
    before = tr.backend.score(spec, [_Scene(lab.scene) for lab in labs[:3]], hazards=[], explain=False)
    info = tr.train(labs, log_every=1, echo=lambda *_: None)
    assert info["steps"] == 1 and np.isfinite(info["final_loss"])
    after = tr.backend.score(spec, [_Scene(lab.scene) for lab in labs[:3]], hazards=[], explain=False)
    assert max(np.abs(a.digits - b.digits).max() for a, b in zip(before, after)) > 1e-4
    # the shared-prefix training pass computes the same next-token distribution as the whole prompt
    _, prefix, tail, _, _ = tr.backend._task(spec)
    rows = [tr.backend.tokenize(scene_text(_Scene(lab.scene))) + tail for lab in labs[:3]]
    with torch.no_grad():
        lp = tr.answer_logprobs(prefix, rows)
        for i, r in enumerate(rows):
            full = torch.log_softmax(tr.model(input_ids=torch.tensor([prefix + r])).logits[0, -1], -1)
            assert torch.allclose(full, lp[i], atol=1e-4)


def test_lora_delta_and_gguf_permutation_match_peft_and_transformers(tiny_model, tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    from robo_prm.judge.merge import lora_deltas, merge_tensor, permute_rows

    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    w0 = {n: p.detach().clone() for n, p in base.named_parameters()}
    torch.manual_seed(1)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                     init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    merged = lora.merge_and_unload()
    deltas = lora_deltas(tmp_path / "adapter")
    assert set(deltas) == {(i, m) for i in range(2) for m in ("q_proj", "v_proj")}
    for (layer, mod), d in deltas.items():
        name = f"model.layers.{layer}.self_attn.{mod}.weight"
        assert np.allclose(d, (dict(merged.named_parameters())[name] - w0[name]).detach().numpy(), atol=1e-5)
    # GGUF stores q rows permuted; transformers' loader undoes it, so merge-then-unpermute = unpermute-then-merge
    rng = np.random.default_rng(0)
    g, d = rng.normal(size=(32, 32)).astype(np.float32), rng.normal(size=(32, 32)).astype(np.float32)
    unperm = LlamaTensorProcessor.__new__(LlamaTensorProcessor)._reverse_permute_weights
    assert np.allclose(unperm(permute_rows(g, 4), 4), g)
    assert np.allclose(unperm(merge_tensor(g, d, "q_proj", 4, 2), 4), unperm(g, 4) + d, atol=1e-5)
    kv, dkv = rng.normal(size=(2, 16, 32)).astype(np.float32)
    assert np.allclose(unperm(merge_tensor(kv, dkv, "k_proj", 4, 2), 4, 2), unperm(kv, 4, 2) + dkv, atol=1e-5)
    assert np.allclose(merge_tensor(g, d, "v_proj", 4, 2), g + d)


# ---- calibration ----------------------------------------------------------------------------
def test_isotonic_calibrator_is_monotone_in_range_and_lowers_ece(tmp_path):
    rng = np.random.default_rng(0)
    truth = rng.random(400)
    raw = np.clip(0.2 + 0.3 * truth ** 2 + rng.normal(0, 0.03, 400), 0, 1)  # squashed, biased
    bx, by = isotonic_fit(raw, truth)
    assert np.all(np.diff(by) >= -1e-12)
    cal = fit_calibrator(raw, truth)
    grid = [cal(x) for x in np.linspace(-0.5, 1.5, 101)]
    assert np.all(np.diff(grid) >= -1e-12) and min(grid) >= 0 and max(grid) <= 1
    assert ece([cal(x) for x in raw], truth) < 0.5 * ece(raw, truth)
    save_calibrator(cal, tmp_path / "cal.json", {"ece": 0.1})
    assert Calibrator.load(tmp_path / "cal.json") == cal


# ---- distillation -----------------------------------------------------------------------------
def _hash_embed(texts):
    out = []
    for t in texts:
        v = np.zeros(16, np.float32)
        for w in t.lower().split():
            v[hash(w) % 16] += 1.0
        out.append(v / (np.linalg.norm(v) or 1.0))
    return np.stack(out)


def test_distilled_model_save_load_and_backend(tmp_path):
    from robo_prm.finetune.distill import DistilledBackend, DistilledModel, Embedder, distill
    from robo_prm.judge import ConfidentJudge, JudgeConfig
    from robo_prm.types import SceneDescription

    labs = _labels(6)
    m = distill([lab.scene for lab in labs], [lab.task_text["goal"] for lab in labs], [0.0, 0.5, 1.0] * 2,
                tmp_path / "d", embed=Embedder(_hash_embed), holdout=0.0)
    assert m["n_train"] == 6
    assert set(json.loads((tmp_path / "d" / "distilled.json").read_text())["provenance"]) >= {"command", "git_commit", "date"}
    model = DistilledModel.load(tmp_path / "d")
    backend = DistilledBackend(tmp_path / "d", embed=Embedder(_hash_embed))
    judge = ConfidentJudge(backend, JudgeConfig(confidence_threshold=0.0))
    scenes = [SceneDescription(text=lab.scene, facts=()) for lab in labs[:3]]
    out = judge.judge(labs[0].judge_text(), scenes)
    from robo_prm.finetune.distill import features

    direct = model.predict(features(Embedder(_hash_embed), [s.text for s in scenes], [labs[0].task_text["goal"]] * 3))
    assert [j.progress for j in out] == pytest.approx(list(direct), abs=1e-6)
    assert out[0].progress < out[2].progress


# ---- evaluation --------------------------------------------------------------------------------
def test_evaluate_judge_on_tiny_data():
    from robo_prm.finetune.distill import Embedder
    from robo_prm.finetune.evaluate import CosineJudge, evaluate, heldout_episodes, markdown
    from robo_prm.judge import JudgeConfig, make_judge

    v = task_variants("reach_tool", "heldout")[:1]
    eps = heldout_episodes(variants=v, n_success=1, n_random=1, max_states=5)
    assert [e.kind for e in eps] == ["success", "random"] and all(len(e.scenes) <= 5 for e in eps)
    assert all("Milestones" not in s.text for e in eps for s in e.scenes)
    rows = evaluate({"rules": (make_judge(JudgeConfig(backend="rules")), None, True),
                     "cos": (CosineJudge(Embedder(_hash_embed)), None, False)}, eps, echo=lambda *_: None)
    rules = [r for r in rows if r["judge"] == "rules" and r["task"] == "all"][0]
    assert rules["ece"] == pytest.approx(0.0) and rules["voc_success"] > 0.5 and rules["states"] == sum(len(e.scenes) for e in eps)
    assert "| rules |" in markdown(rows) and "| cos |" in markdown(rows)


def test_cli_has_finetune_commands():
    from robo_prm.cli import build_parser

    p = build_parser()
    for argv in (["label", "auto", "--out", "x.jsonl"], ["finetune", "--labels", "l", "--out", "o"],
                 ["distill", "--labels", "l", "--out", "o"], ["evaluate-judge"]):
        args, _ = p.parse_known_args(argv)
        assert callable(args.func)


# ---- labelling page ------------------------------------------------------------------------------
def raw_task_of(name: str) -> dict:
    from robo_prm.finetune.labels import raw_task

    return raw_task(name)


def test_labels_from_a_run_read_recorded_states_and_rule_progress(tmp_path):
    from robo_prm.finetune.labels import run_labels
    from robo_prm.replay.episode import EpisodeMeta, EpisodeWriter, StepRecord

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("task: push_tool_from_edge\n")
    scenes = ["The gripper is open, far from the hammer. The hammer lies 5 cm from the front edge of the table.",
              "The gripper is closed around the hammer. The hammer is held 10 cm above the table."]
    with EpisodeWriter(run / "episodes" / "ep_0000", EpisodeMeta(task="push_tool_from_edge", goal="g")) as w:
        w.add_frame(np.zeros((8, 8, 3), np.uint8))
        visits = [(scenes[0], 0.1), (scenes[0], 0.2), (scenes[0], 0.1), (scenes[1], 0.6), ("old", None)]
        for i, (text, rp) in enumerate(visits):
            w.add_frame(np.zeros((8, 8, 3), np.uint8))
            w.add_step(StepRecord(step=i, description=text, rule_progress=rp,
                                  hazards_true=["tool_near_edge"] if rp == 0.1 else []))
    labs = list(run_labels(run, per_scene=1, log=lambda *_: None))
    assert [lab.scene for lab in labs] == scenes  # de-duplicated, the step without rule progress skipped
    assert [lab.target for lab in labs] == pytest.approx([1.9, 6.4])
    twice = list(run_labels(run, per_scene=2, log=lambda *_: None))  # a return visit keeps its own target
    assert [lab.scene for lab in twice] == [scenes[0], scenes[0], scenes[1]]
    assert [lab.target for lab in twice] == pytest.approx([1.9, 2.8, 6.4])
    assert labs[0].hazards == ["tool_near_edge"] and labs[0].source == "policy" and labs[0].split == "train"
    assert labs[1].reason and "hammer" in labs[1].reason and labs[1].judge_text().goal.startswith("Push or carry")
    with pytest.raises(ValueError, match="not a run folder"):
        list(run_labels(tmp_path))


def test_nudged_rollouts_slide_an_object_that_stays_standing(tmp_path):
    """The `nudged` source: the same perturbed expert, and one object slid early on, so "has it moved?" has
    positives; the slide keeps the object's pose (an upright cup stays upright) and `moved` measures from reset."""
    import yaml

    from robo_prm.envs.predicates import _moved
    from robo_prm.envs.tidy_env import TidyTableEnv
    from robo_prm.finetune.labels import generated_variants

    raw = raw_task_of("place_cup_in_bin")
    raw["hazards"] = [*raw.get("hazards", []), {"name": "disturbed", "text": "the glass cup has been pushed or moved",
                                                "severity": 0.5, "check": "moved(glass_cup, 0.02)"}]
    (tmp_path / "nudge_me.yaml").write_text(yaml.safe_dump({**raw, "name": "nudge_me", "split": "train"}))
    [v] = generated_variants(tmp_path)
    env = TidyTableEnv(v.task)
    try:
        env.reset(seed=0)
        before = env.scene_state
        after = env.shift("cup0", (0.05, -0.02))
        assert np.allclose(after.objects["cup0"].pos[:2] - before.objects["cup0"].pos[:2], (0.05, -0.02), atol=1e-6)
        assert np.allclose(after.objects["cup0"].up, before.objects["cup0"].up) and not after.objects["cup0"].vel.any()
        assert _moved(after, "cup0", 0.04) and not _moved(after, "cup0", 0.06) and not _moved(before, "cup0", 0.0)
    finally:
        env.close()
    labs = {src: [lab for seed in (1, 2, 3) for lab in label_states(v, rollout_states(v, src, seed), src, "ep", stride=3)]
            for src in ("perturbed", "nudged")}
    standing = [lab for lab in labs["nudged"] if "disturbed" in lab.hazards and "stands" in lab.scene]
    assert standing and all("has moved" in lab.scene for lab in standing)
    assert sum("disturbed" in lab.hazards for lab in labs["nudged"]) > sum("disturbed" in lab.hazards
                                                                         for lab in labs["perturbed"])
    with pytest.raises(ValueError, match="unknown label source 'shaken'.*nudged"):
        rollout_states(v, "shaken", 0)


def test_generated_task_labels_keep_each_files_split_and_family(tmp_path):
    import yaml

    from robo_prm.finetune.labels import generated_labels, generated_variants
    from robo_prm.finetune.lora import balance_group, select_labels

    raw = raw_task_of("push_tool_from_edge")
    for name, split, family in (("g_train", "train", "fam_a"), ("g_held", "heldout_phrasing", "fam_b")):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**raw, "name": name, "split": split, "family": family}))
    assert {v.base: v.split for v in generated_variants(tmp_path)} == {"g_train": "train", "g_held": "heldout"}
    train = list(generated_labels(tmp_path, "train", sources=("scripted",), log=lambda *_: None))
    held = list(generated_labels(tmp_path, "heldout", sources=("scripted",), log=lambda *_: None))
    assert train and held and {lab.task for lab in train} == {"g_train"} and {lab.task for lab in held} == {"g_held"}
    assert all(lab.split == "train" and balance_group(lab) == "family:fam_a" for lab in train)
    assert all(lab.split == "heldout" for lab in held) and not select_labels(held, 10)
    assert all(lab.reason for lab in train)


def test_hazard_thresholds_are_fitted_per_kind_and_map_to_one_half(tmp_path):
    from robo_prm.finetune.calibrate import fit_hazard_thresholds
    from robo_prm.judge.scoring import hazard_kind

    rng = np.random.default_rng(0)
    recs = [("edge", float(rng.uniform(0.3, 0.45)), True) for _ in range(20)]  # an under-confident kind
    recs += [("edge", float(rng.uniform(0.0, 0.25)), False) for _ in range(20)]
    recs += [("fell", float(rng.uniform(0.6, 1.0)), True) for _ in range(3)]  # too few positives: no own threshold
    fit = fit_hazard_thresholds(recs)
    assert 0.25 < fit["edge"]["threshold"] < 0.45 and fit["edge"]["f1"] == 1.0 and "fell" not in fit
    cal = Calibrator((0.0, 1.0), (0.0, 1.0), (("*", 0.8), ("edge", fit["edge"]["threshold"])))  # sorted, as loaded
    save_calibrator(cal, tmp_path / "c.json")
    back = Calibrator.load(tmp_path / "c.json")
    assert back == cal
    t = fit["edge"]["threshold"]
    assert back.hazard("hammer_near_edge", t) == pytest.approx(0.5) and back.hazard("near_edge", 0.4) > 0.5
    assert back.hazard("cup_fell", 0.7) < 0.5 < back.hazard("cup_fell", 0.9)  # "*" threshold 0.8
    assert hazard_kind("x", "the cup lies tipped over") == "tipped" and hazard_kind("mystery") == "*"
    assert Calibrator((0.0, 1.0), (0.0, 1.0)).hazard("near_edge", 0.3) == 0.3
