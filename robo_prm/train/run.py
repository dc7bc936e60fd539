"""train(cfg) → a run directory; resume(run_dir) continues it; load_policy(run_dir) for eval/enjoy.

Run directory layout (runs/{task}__{algo}__{seed}__{time}/):
    config.yaml        the resolved config (defaults ← YAML ← CLI)
    tb/                TensorBoard logs
    checkpoints/       step_XXXXXXXXX/{model.zip, replay_buffer.pkl, state.json, MANIFEST.json} + `latest` (checkpoints.py)
    episodes/          recorded training episodes (ep_XXXX/, see docs/EPISODES.md)
    eval/              eval_history.json, best.json and recorded evaluation episodes
    final_model.zip
    best_model.zip     the policy of the evaluation with the highest success so far (SB3 EvalCallback's best_model)

Opening a run folder runs no code from it unless asked: resume unpickles SB3's files only from
checkpoints this machine signed, or with `trust=True` (--trust_run); load_policy reads the policy
weights alone, without pickle (trust.py, algos.load_weights).
"""
from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from robo_prm.config import TrainConfig, config_to_yaml, load_train_config
from robo_prm.config_io import ConfigError, from_dict
from robo_prm.envs.goal_env import GoalTidyEnv, GoalView
from robo_prm.envs.task import load_task
from robo_prm.reward.relabel import RelabelCallback
from robo_prm.train.algos import algo_kwargs, load_algo, load_weights, make_algo
from robo_prm.train.callbacks import ProgressBar, RewardLogger
from robo_prm.train.curriculum import DONE, CurriculumCallback
from robo_prm.train.bc import DemoBCCallback, select_clone, standardize_inputs
from robo_prm.train.demos import collect_demos
from robo_prm.train.checkpoints import (MODEL, CheckpointEvery, clean_stale, latest_checkpoint, load_replay_buffer, read_state,
                                        save_checkpoint, set_rng_state)
from robo_prm.train.envs import find_blend, make_tidy_env, make_vec_env
from robo_prm.train.recorder import EpisodeRecorder
from robo_prm.train.rollouts import TrainedPolicy, goal_view, run_episodes, summarize
from robo_prm.train.trust import require_trust

log = logging.getLogger(__name__)


class EvalEvery(BaseCallback):
    """At each multiple of `every` steps: deterministic episodes on fresh seeds; success and hazard
    events to TensorBoard. A resumed run keeps the history up to its checkpoint. The policy of the best evaluation
    (highest success; the earlier one on a tie, as SB3's EvalCallback) is kept as best_model.zip: fine-tuning from
    demonstrations can lose a policy that was already good (docs/LEARNING.md)."""

    def __init__(self, task, cfg: TrainConfig, out_dir: Path, run: str):
        super().__init__()
        self.task, self.cfg, self.out_dir, self.run = task, cfg, out_dir, run
        self._last = 0
        self.history: list[dict] = []
        self.best: dict | None = None  # env_steps, success_rate, hazards of best_model.zip's evaluation

    def _on_training_start(self):
        self._last = self.num_timesteps
        try:
            old = json.loads((self.out_dir / "eval_history.json").read_text())
        except (OSError, ValueError):
            old = []
        self.history = [h for h in old if isinstance(h, dict) and h.get("env_steps", 1 << 62) <= self._last]
        try:
            self.best = json.loads((self.out_dir / "best.json").read_text())
        except (OSError, ValueError):
            self.best = None
        if self.best is not None and self.best.get("env_steps", 1 << 62) > self._last:
            self.best = None  # from after the checkpoint this resumed run starts from: beaten or not, it is re-earned

    def _on_step(self) -> bool:
        every = self.cfg.eval.every_steps
        if every > 0 and self.num_timesteps // every > self._last // every:
            self._last = self.num_timesteps
            self.evaluate()
        return True

    def evaluate(self):
        blend = find_blend(self.training_env)
        results = run_episodes(
            TrainedPolicy(self.model, goal_view(self.cfg, self.task)), self.task, self.cfg, eval_seeds(self.cfg),
            judge=blend.judge if blend is not None else None,
            record_dir=self.out_dir / f"step_{self.num_timesteps:09d}", n_record=self.cfg.eval.record,
            run=self.run, env_steps=self.num_timesteps,
        )
        summary = {"env_steps": self.num_timesteps, **summarize(results)}
        self.history.append(summary)
        self.logger.record("eval/success_rate", summary["success_rate"])
        self.logger.record("eval/hazard_events_per_episode", summary["hazard_events_per_episode"])
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "eval_history.json").write_text(json.dumps(self.history, indent=1))
        if self.best is None or summary["success_rate"] > self.best["success_rate"]:
            self.best = {k: summary[k] for k in ("env_steps", "success_rate", "hazard_events_per_episode")}
            run_dir = self.out_dir.parent
            self.model.save(run_dir / ".best_model.zip.tmp")
            os.replace(run_dir / ".best_model.zip.tmp", run_dir / "best_model.zip")  # whole or not at all
            (self.out_dir / "best.json").write_text(json.dumps(self.best, indent=1))


def eval_seeds(cfg: TrainConfig) -> range:
    """Evaluation seeds: 10,000 above the run's seed, away from the seeds the training envs start from."""
    return range(10_000 + cfg.seed, 10_000 + cfg.seed + cfg.eval.episodes)


def validation_seeds(cfg: TrainConfig) -> range:
    """Seeds the clone fits are chosen on (`demo_bc.select_fits`): 50,000 + 100 × the run's seed on, away from the
    training, evaluation (10,000 on) and benchmark (30,000 on) seeds."""
    start = 50_000 + 100 * cfg.seed
    return range(start, start + cfg.demo_bc.select_episodes)


def validation_success(model, task, cfg: TrainConfig) -> float:
    """The model's deterministic success rate on the validation seeds (no judge: the task's own success check)."""
    return summarize(run_episodes(TrainedPolicy(model, goal_view(cfg, task)), task, cfg, validation_seeds(cfg)))["success_rate"]


def run_name(cfg: TrainConfig, task_name: str) -> str:
    return cfg.run_name or f"{task_name}__{cfg.algo}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def _seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def sync_gamma(cfg: TrainConfig) -> TrainConfig:
    """`reward.gamma: null` asks potential shaping to discount like the learner."""
    cfg.reward.gamma = cfg.reward.shaping_gamma(algo_kwargs(cfg)["gamma"])  # DEFAULTS set gamma
    return cfg


def _build(cfg: TrainConfig, run_dir: Path):
    torch.set_num_threads(cfg.torch_threads)
    task = load_task(cfg.task)
    sync_gamma(cfg)
    venv = make_vec_env(task, cfg)
    return task, venv


def _callbacks(cfg: TrainConfig, task, run_dir: Path, run: str, start_episode: int, resumed: dict | None = None) -> dict:
    """The training callbacks by role; checkpoints carry the recorder's episode counter and the curriculum's width
    (`resumed`: the state.json of the checkpoint a resumed run starts from)."""
    cb = {"stats": RewardLogger(), "eval": EvalEvery(task, cfg, run_dir / "eval", run), "recorder": None, "curriculum": None,
          "bc": DemoBCCallback(cfg.demo_bc.weight, cfg.demo_bc.critic_warmup, q_filter=cfg.demo_bc.q_filter) if cfg.demo_bc.enabled else None}
    if cfg.record.every_episodes > 0:
        cb["recorder"] = EpisodeRecorder(run_dir / "episodes", task, cfg.record.every_episodes, run, cfg.algo, cfg.record.explain,
                                         start_episode)
    if cfg.curriculum.enabled:
        cb["curriculum"] = CurriculumCallback(cfg.curriculum, run_dir / "curriculum.json", (resumed or {}).get("curriculum"))
    recorder, curriculum = cb["recorder"], cb["curriculum"]

    def extra() -> dict:
        out = {"episode_index": recorder.episode_index if recorder else start_episode}
        if curriculum is not None:
            out["curriculum"] = curriculum.state()
        return out

    cb["extra"] = extra
    cb["ckpt"] = CheckpointEvery(run_dir / "checkpoints", cfg.checkpoint_every, cb["extra"], cfg.keep_checkpoints)
    return cb


def _learn(model, cfg: TrainConfig, task, venv, run_dir: Path, run: str, start_episode: int = 0, extra=(),
           resumed: dict | None = None) -> Path:
    clean_stale(run_dir / "checkpoints")
    cb = _callbacks(cfg, task, run_dir, run, start_episode, resumed)
    stats, evaluator = cb["stats"], cb["eval"]
    for c in extra:
        c.evaluator = evaluator  # they run after it in the same step and may read its history
    callbacks = [c for c in (RelabelCallback(), stats, cb["bc"], cb["curriculum"], cb["ckpt"], evaluator, cb["recorder"], *extra)
                 if c is not None]
    if cfg.progress_bar:
        callbacks.append(ProgressBar(cfg.steps, stats))
    remaining = max(0, cfg.steps - model.num_timesteps)
    blend = find_blend(venv)
    try:
        model.learn(total_timesteps=remaining, callback=CallbackList(callbacks), reset_num_timesteps=False, tb_log_name="tb")
    except KeyboardInterrupt:
        path = save_checkpoint(model, run_dir / "checkpoints", blend, cb["extra"](), cfg.keep_checkpoints)
        print(f"\ninterrupted at step {model.num_timesteps}: checkpoint saved to {path}; continue with: robo-prm train --resume {run_dir}")
        raise
    if remaining > 0 and cb["ckpt"].saved_at != model.num_timesteps:
        save_checkpoint(model, run_dir / "checkpoints", blend, cb["extra"](), cfg.keep_checkpoints)
    model.save(run_dir / ".final_model.zip.tmp")
    os.replace(run_dir / ".final_model.zip.tmp", run_dir / "final_model.zip")  # whole or not at all
    evaluated_now = evaluator.history and evaluator.history[-1]["env_steps"] == model.num_timesteps
    if cfg.eval.episodes > 0 and not evaluated_now:
        evaluator.evaluate()
    stats.flush(dump=True)  # reward/judge scalars and the final evaluation reach TensorBoard at the last step
    _write_summary(run_dir, run, model, stats, evaluator, blend)
    venv.close()
    if blend is not None and hasattr(blend.judge, "close"):
        blend.judge.close()  # train made it; free the model before anything after training loads another
    return run_dir


def _write_summary(run_dir: Path, run: str, model, stats: RewardLogger, evaluator: EvalEvery, blend) -> None:
    import resource

    summary = {"run": run, "env_steps": model.num_timesteps, "train_success_rate_last50": stats.success_rate,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if evaluator.history:
        summary["final_eval"] = evaluator.history[-1]
    if blend is not None:
        summary["judge"] = blend.stats()
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float))


def train(cfg: TrainConfig, callbacks: tuple[BaseCallback, ...] = ()) -> Path:
    """Train from scratch into runs_dir/run_name. `callbacks`: extra SB3 callbacks, run after the periodic
    evaluation (each gets it as `.evaluator`; `evaluator.history`); one returning False ends training early
    and the run folder is finished as usual (tune.py prunes trials this way)."""
    task = load_task(cfg.task)  # fail on a bad task before making a run directory
    cfg.resolve()
    cfg.check_combination()
    check_task_aids(cfg, task)
    run = run_name(cfg, task.name)
    run_dir = Path(cfg.runs_dir) / run
    run_dir.mkdir(parents=True, exist_ok=True)
    _seed_everything(cfg.seed)
    task, venv = _build(cfg, run_dir)
    (run_dir / "config.yaml").write_text(config_to_yaml(cfg))
    model = make_algo(cfg, venv, run_dir)
    if cfg.demos:
        add_demos(model, venv, cfg, run_dir, task)
    return _learn(model, cfg, task, venv, run_dir, run, extra=callbacks)


def check_task_aids(cfg: TrainConfig, task) -> None:
    """The aids that need the task's `expert:` plan, and HER's single-object goal, fail in one line before a run starts."""
    needs_plan = [name for name, on in (("demos", cfg.demos > 0), ("curriculum.enabled", cfg.curriculum.enabled)) if on]
    if needs_plan and task.plan is None:
        raise ConfigError(f"{needs_plan[0]}: task '{task.name}' has no `expert:` plan to follow ({task.source})")
    if cfg.reward_source == "her":
        try:
            GoalView(task)
        except ValueError as exc:
            raise ConfigError(str(exc).split(" (movable")[0]) from None


def add_demos(model, venv, cfg: TrainConfig, run_dir: Path, task) -> dict:
    """The scripted plan's `cfg.demos` episodes through the training envs and reward, from the real starts, into the
    model's demo store (train/demos.py); their success and length (and each clone fit's validation success) go to
    run_dir/demos.json."""
    if cfg.curriculum.enabled:
        venv.env_method("set_curriculum_width", DONE)  # demos start where the task starts
    t0 = time.time()
    rows, stats = collect_demos(venv, cfg.demos, cfg.demos_successful_only)
    model.replay_buffer.add_demos(rows)
    if cfg.demo_bc.enabled:
        standardize_inputs(model)
        stats.update(select_clone(model, cfg.demo_bc.pretrain_steps, cfg.demo_bc.std, cfg.demo_bc.select_fits,
                                  lambda: validation_success(model, task, cfg), seed=cfg.seed))
        if cfg.demo_bc.keep_clone:
            model.policy.keep_clone()
        if cfg.demo_bc.residual > 0:
            model.actor.keep_base(cfg.demo_bc.residual)
    stats["demo_wall_s"] = round(time.time() - t0, 2)
    (run_dir / "demos.json").write_text(json.dumps(stats, indent=1))
    log.info("demos: %s", stats)
    return stats


def load_run_config(run_dir: Path) -> TrainConfig:
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise ConfigError(f"{run_dir}: not a run directory (no config.yaml)")
    try:
        return from_dict(TrainConfig, yaml.safe_load(path.read_text()) or {})
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def resume(run_dir: Path, steps: int | None = None, trust: bool = False) -> Path:
    """Continue a run from its newest intact checkpoint: step count, replay buffer, reward schedule and
    normaliser, RNG states, episode counter, curriculum width. SB3's pickles load only when this machine signed them or
    `trust` is set (--trust_run)."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    if steps is not None:
        cfg.steps = steps
    clean_stale(run_dir / "checkpoints")
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        raise ConfigError(f"{run_dir}/checkpoints: no intact checkpoint to resume from")
    require_trust(ckpt, MODEL, trust)
    state = read_state(ckpt, trust)
    task, venv = _build(cfg, run_dir)
    model = load_algo(cfg.algo, ckpt / MODEL, venv, cfg.device)
    model.tensorboard_log = str(run_dir)
    if isinstance(model, OffPolicyAlgorithm):
        load_replay_buffer(model, ckpt, trust)
    blend = find_blend(venv)
    if blend is not None and state.get("blend"):
        blend.load_state_dict(state["blend"])
    if state.get("rng"):
        set_rng_state(state["rng"])
    (run_dir / "config.yaml").write_text(config_to_yaml(cfg))
    return _learn(model, cfg, task, venv, run_dir, run_dir.name, int(state.get("episode_index", 0)), resumed=state)


def load_policy(run_dir: Path, best: bool = False):
    """(cfg, task, predict function) for a finished or checkpointed run (`best`: its best_model.zip).

    Only the policy weights are read (algos.load_weights: no pickle), so any run folder can be
    evaluated without trusting it."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    path = run_dir / ("best_model.zip" if best else "final_model.zip")
    if best and not path.exists():
        raise ConfigError(f"{run_dir}: no best_model.zip (written at the run's evaluations: eval.every_steps > 0 "
                          "or the final one)")
    if not path.exists():
        ckpt = latest_checkpoint(run_dir / "checkpoints")
        if ckpt is None:
            raise ConfigError(f"{run_dir}: no final_model.zip and no intact checkpoint")
        path = ckpt / MODEL
    torch.set_num_threads(cfg.torch_threads)
    task = load_task(cfg.task)
    env = make_tidy_env(task, cfg, render=False)
    try:
        model = load_weights(cfg, GoalTidyEnv(env) if cfg.reward_source == "her" else env, path)
    finally:
        env.close()
    return cfg, task, TrainedPolicy(model, goal_view(cfg, task))
