"""`robo-prm tune`: Optuna studies of the reward blend, the RL Zoo's way (TPE sampler, median pruner, shared storage).

    robo-prm tune --task push_tool_from_edge --trials 20 --study push [--storage URL] [--workers K] [--steps S] [--seeds 0,1]
    robo-prm tune --report push [--storage URL]          # best trials, best settings as a train config, PNGs

Searched: the blend's LLM weight β (`llm_weight`; the env and explore weights follow, see `blend_stages`),
`reward.judge_every`, `reward.safety_weight` and the learner's `learning_rate`. Every trial is one ordinary
run folder per seed, `<runs_dir>/tune/<study>/trial_NNNN__seedS` (`robo-prm eval` / `replay` work on it).

Objective (maximised; `objective_value`): with T the step budget, success(t) the evaluation success rate and
hazards(t) the evaluation hazard events per episode at the periodic evaluations (both taken as 0 at step 0,
joined by straight lines),  J = (1/T)∫₀ᵀ success dt − λ·(1/T)∫₀ᵀ hazards dt,  λ = `--hazard_weight`, the
mean over `--seeds`. The median pruner sees the same integral up to each evaluation (a lower bound of J).

Storage: sqlite:///FILE (default <runs_dir>/tune.db: embedded, nothing to start), postgresql://USER:PW@HOST/DB
(several machines running the same command join one study), or a journal file (FILE.log, or journal:///FILE)
on a shared disk. `--workers K` runs K processes on this machine against the same storage. The study stops
taking new trials when it holds `--trials` complete or pruned (or running) ones, so the same command again
continues a study; trials of a machine that died are failed by the heartbeat and retried once (RDB storages).
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from robo_prm.config import TrainConfig, load_train_config, task_train_config
from robo_prm.config_flags import add_config_args, config_fields, config_from_args, free_flags, given_flags, opt
from robo_prm.config_io import ConfigError, dotted_to_nested, from_dict, merge, to_dict
from robo_prm.reward.config import Stage

log = logging.getLogger(__name__)

JUDGE_EVERY = (1, 2, 4, 8, 16)


@dataclass
class TuneArgs:
    """`robo-prm tune` options beside the TrainConfig fields (which set the base config of every trial)."""

    config: str | None = opt(None, "base train config YAML or name under robo_prm/configs/train/ (unset: configs/train/<task>.yaml "
                                   "when it fits --algo); TrainConfig flags (--steps, --judge.backend, ...) apply on top")
    trials: int = opt(20, min=1, help="trials the study holds when done (complete, pruned or running); the same command again continues to it")
    study: str | None = opt(None, "study name (null: {task}__{algo})")
    storage: str | None = opt(None, "sqlite:///FILE, postgresql://USER:PW@HOST/DB, or a journal file FILE.log / journal:///FILE "
                                    "(null: sqlite:///<runs_dir>/tune.db)")
    workers: int = opt(1, min=1, max=64, help="processes on this machine joining the study")
    seeds: list[int] = opt([0], "train each trial once per seed; the objective is the mean")
    hazard_weight: float = opt(0.1, min=0.0, help="λ: objective = success-curve area − λ × hazard-curve area (both per step budget)")
    startup_trials: int = opt(5, min=0, help="random trials before TPE models the results; trials before the median pruner prunes")
    sampler_seed: int | None = opt(None, "seed of the TPE sampler (worker k: seed + k; null: random)")
    trial_checkpoints: bool = opt(False, "keep each trial's checkpoints/ (SAC replay buffers: ~1 GB at 30k steps); "
                                         "final_model.zip, eval/, episodes/ and summary.json are kept anyway")
    report: str | None = opt(None, "report on study REPORT instead of tuning: best trials, the best settings as a train config, PNGs")
    out: str | None = opt(None, "--report: output folder (null: <runs_dir>/tune/<study>/report)")
    top: int = opt(5, min=1, help="--report: trials listed")


def add_tune_args(parser) -> None:
    add_config_args(parser, TuneArgs, "command")
    add_config_args(parser, TrainConfig, "TrainConfig: the base config of every trial")


def default_storage(runs_dir: str) -> str:
    return f"sqlite:///{Path(runs_dir).resolve() / 'tune.db'}"


def open_storage(url: str):
    """An Optuna storage for `url`: RDB (SQLite, PostgreSQL, ...: heartbeat on, a dead worker's trial retried
    once) or a journal file (JournalFileOpenLock: works on network file systems)."""
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage

    if url.startswith("journal:") or (("://" not in url) and url.endswith((".log", ".journal"))):
        path = Path(url.split("://", 1)[1] if url.startswith("journal:") else url)
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path))))
    if "://" not in url:
        raise ConfigError(f"--storage {url}: give a URL (sqlite:///FILE, postgresql://...) or a journal file FILE.log")
    engine: dict[str, Any] = {}
    if url.startswith("sqlite"):
        from sqlalchemy.engine import make_url

        db = make_url(url).database
        if db and db != ":memory:":
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        engine = {"connect_args": {"timeout": 300}}  # several writers wait for SQLite's lock instead of failing
    from sqlalchemy.exc import SQLAlchemyError

    for attempt in range(5):  # machines joining a new database at once race to create its tables
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(url, engine_kwargs=engine, heartbeat_interval=60, grace_period=180,
                                  heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1))
        except SQLAlchemyError:
            if attempt == 4:
                raise
            time.sleep(1.0 + attempt)


# ---- the search space ------------------------------------------------------------------
def blend_stages(stages: list[Stage], llm_weight: float) -> list[Stage]:
    """The blend schedule with first-stage LLM weight β = `llm_weight`: every stage's LLM weight scaled by
    β / (first stage's), env and explore sharing the rest of the stage's total in their own ratio."""
    first = stages[0].llm
    out = []
    for s in stages:
        total = s.env + s.llm + s.explore
        llm = min(total, s.llm * llm_weight / first if first > 0 else llm_weight)
        rest, other = total - llm, s.env + s.explore
        env = rest * (s.env / other if other > 0 else 1.0)
        out.append(Stage(s.start_step, round(env, 6), round(llm, 6), round(rest - env, 6)))
    return out


def trial_overrides(base: TrainConfig, params: dict[str, Any]) -> dict[str, Any]:
    """{dotted TrainConfig field: value} of one point of the search space."""
    return {"reward.stages": to_dict(blend_stages(base.reward.stages, params["llm_weight"])),
            "reward.judge_every": int(params["judge_every"]),
            "reward.safety_weight": float(params["safety_weight"]),
            f"{base.algo}.learning_rate": float(params["learning_rate"])}


def suggest(trial) -> dict[str, Any]:
    return {"llm_weight": trial.suggest_float("llm_weight", 0.05, 0.8),
            "judge_every": trial.suggest_categorical("judge_every", JUDGE_EVERY),
            "safety_weight": trial.suggest_float("safety_weight", 0.0, 2.0),
            "learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True)}


def apply_overrides(base: dict, overrides: dict[str, Any]) -> TrainConfig:
    return from_dict(TrainConfig, merge(base, dotted_to_nested(overrides)))


# ---- the objective -----------------------------------------------------------------------
def _area(points: list[tuple[int, float]], budget: int) -> float:
    area = sum((t1 - t0) * (y0 + y1) / 2 for (t0, y0), (t1, y1) in zip(points, points[1:]))
    return area / max(1, budget)


def objective_value(history: list[dict], budget: int, hazard_weight: float) -> dict[str, float]:
    """{"value", "success_auc", "hazard_area"} of one run's evaluation history (see the module docstring)."""
    rows = sorted((h for h in history if h["env_steps"] > 0), key=lambda h: h["env_steps"])
    success = _area([(0, 0.0)] + [(h["env_steps"], float(h["success_rate"])) for h in rows], budget)
    hazards = _area([(0, 0.0)] + [(h["env_steps"], float(h["hazard_events_per_episode"])) for h in rows], budget)
    return {"value": success - hazard_weight * hazards, "success_auc": success, "hazard_area": hazards}


class ReportToTrial(BaseCallback):
    """After each periodic evaluation: the objective so far to the Optuna trial; stops training when pruned.
    `train` hands it the evaluation callback as `.evaluator` (it runs right after it). The trial's last
    evaluation (`offset` + step ≥ `last`: the last seed's budget) is reported but not put to the pruner: the
    trial is complete, and a prune there would only turn its value into an intermediate one."""

    def __init__(self, trial, offset: int, budget: int, hazard_weight: float, last: int | None = None):
        super().__init__()
        self.trial, self.offset, self.budget, self.hazard_weight = trial, offset, budget, hazard_weight
        self.last = offset + budget if last is None else last
        self.evaluator = None
        self.seen = 0
        self.pruned_at: int | None = None

    def _on_step(self) -> bool:
        history = self.evaluator.history
        if len(history) == self.seen:
            return True
        self.seen = len(history)
        value = objective_value(history, self.budget, self.hazard_weight)["value"]
        step = self.offset + history[-1]["env_steps"]
        self.trial.report(value, step)
        if step < self.last and self.trial.should_prune():
            self.pruned_at = history[-1]["env_steps"]
            return False  # SB3 ends learn(); train() still finishes the run folder
        return True


def _train_one(trial, cfg: TrainConfig, offset: int, args: TuneArgs) -> tuple[Path, ReportToTrial]:
    from robo_prm.train.run import train

    run_dir = Path(cfg.runs_dir) / cfg.run_name
    if run_dir.exists():  # a study deleted and made again under the same name: never write into an old run
        cfg.run_name += time.strftime("__%Y%m%d-%H%M%S")
    callback = ReportToTrial(trial, offset, cfg.steps, args.hazard_weight, last=len(args.seeds) * cfg.steps)
    run_dir = train(cfg, callbacks=(callback,))
    if not args.trial_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return run_dir, callback


def objective(trial, base: dict, args: TuneArgs, study_dir: Path) -> float:
    import optuna

    params = suggest(trial)
    overrides = trial_overrides(from_dict(TrainConfig, base), params)
    trial.set_user_attr("overrides", overrides)
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    runs, values, finals = [], [], []
    for k, seed in enumerate(args.seeds):
        cfg = apply_overrides(base, overrides)
        cfg.seed, cfg.runs_dir, cfg.run_name = seed, str(study_dir), f"trial_{trial.number:04d}__seed{seed}"
        run_dir, cb = _train_one(trial, cfg, k * cfg.steps, args)
        runs.append(str(run_dir))
        trial.set_user_attr("runs", runs)
        if cb.pruned_at is not None:
            raise optuna.TrialPruned(f"seed {seed}: below the median at step {cb.pruned_at}")
        values.append(objective_value(cb.evaluator.history, cfg.steps, args.hazard_weight))
        finals.append(cb.evaluator.history[-1]["success_rate"])
        trial.set_user_attr("final_success", finals)
    for key in ("success_auc", "hazard_area"):
        trial.set_user_attr(key, sum(v[key] for v in values) / len(values))
    return sum(v["value"] for v in values) / len(values)


# ---- the study and its workers ------------------------------------------------------------
def _counted(study) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)))


def make_study(storage, name: str, args: TuneArgs, base: TrainConfig, worker: int = 0, create: bool = False):
    import optuna

    seed = None if args.sampler_seed is None else args.sampler_seed + worker
    sampler = optuna.samplers.TPESampler(n_startup_trials=args.startup_trials, seed=seed)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=args.startup_trials, n_warmup_steps=base.steps // 3)
    if create:
        return optuna.create_study(storage=storage, study_name=name, sampler=sampler, pruner=pruner, direction="maximize",
                                   load_if_exists=True)
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


def tune_worker(url: str, name: str, base: dict, args: TuneArgs, worker: int = 0, barrier=None) -> int:
    """One process of the study: trials until the study holds `args.trials`. Returns the trials it ran."""
    import optuna
    from optuna.storages import fail_stale_trials

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    cfg = from_dict(TrainConfig, base)
    study = make_study(open_storage(url), name, args, cfg, worker)
    study_dir = Path(cfg.runs_dir) / "tune" / name
    if barrier is not None:
        try:
            barrier.wait(timeout=900)  # the K workers of one command start together
        except Exception:  # noqa: BLE001 - a sibling that never started: go on alone
            log.warning("worker %d: not every worker started; going on", worker)
    ran = 0
    claim = TrialClaim(url, name)
    while True:
        claim.acquire()  # count and create the next trial under one lock, so workers cannot both take the last one
        fail_stale_trials(study)
        if _counted(study) >= args.trials:
            claim.release()
            return ran

        def run(trial):
            claim.release()  # the trial exists (RUNNING, counted) once the objective is called
            return objective(trial, base, args, study_dir)

        try:
            study.optimize(run, n_trials=1, gc_after_trial=True)
        finally:
            claim.release()
        ran += 1


class TrialClaim:
    """An exclusive file lock per (storage, study) on this machine: held from counting a study's trials until the next
    trial is created. Workers on one machine (`--workers K`, or several commands) then never overshoot `--trials`;
    commands on different machines sharing a server can still each start a last trial (at most one extra per machine)."""

    def __init__(self, url: str, name: str):
        import hashlib

        root = Path(os.environ.get("ROBO_PRM_CACHE", Path.home() / ".cache" / "robo_prm")) / "tune_locks"
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / (hashlib.sha256(f"{url}\0{name}".encode()).hexdigest()[:24] + ".lock")
        self._fh = None

    def acquire(self) -> None:
        import fcntl

        self._fh = open(self.path, "a")
        fcntl.flock(self._fh, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fh is not None:
            import fcntl

            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def _spawned_worker(url, name, base, args, worker, barrier):
    tune_worker(url, name, base, args, worker, barrier)


def run_study(base: TrainConfig, args: TuneArgs) -> tuple[str, str]:
    """Create (or join) the study, run `args.workers` processes on it; (study name, storage URL)."""
    import multiprocessing as mp

    if base.eval.every_steps <= 0 or base.eval.every_steps > base.steps:
        raise ConfigError(f"tune needs periodic evaluations: eval.every_steps in 1..steps ({base.steps}), got {base.eval.every_steps}")
    name = args.study or f"{Path(base.task).stem}__{base.algo}"
    url = args.storage or default_storage(base.runs_dir)
    base.progress_bar = False
    study = make_study(open_storage(url), name, args, base, create=True)
    given = to_dict(base)
    if "base_config" not in study.user_attrs:
        study.set_user_attr("base_config", given)
        study.set_user_attr("tune", {"seeds": args.seeds, "hazard_weight": args.hazard_weight})
    elif study.user_attrs["base_config"] != given:
        log.warning("study %s was started with another base config; this command's config is used for its own trials", name)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.workers) if args.workers > 1 else None
    procs = [ctx.Process(target=_spawned_worker, args=(url, name, given, args, k, barrier), name=f"tune-worker-{k}")
             for k in range(1, args.workers)]
    for p in procs:
        p.start()
    try:
        tune_worker(url, name, given, args, 0, barrier)
    finally:
        for p in procs:
            p.join()
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"tune workers failed: {', '.join(failed)} (their error is printed above)")
    return name, url


# ---- command line -------------------------------------------------------------------------
def base_config(args, extra: list[str]) -> TrainConfig:
    """The trials' base config: defaults ← configs/train/<task>.yaml when it fits --algo ← --config ← TrainConfig flags."""
    known = tuple(path for path, _, _ in config_fields(TuneArgs))
    overrides = {**given_flags(args, TrainConfig), **free_flags(extra, TrainConfig, known=known)}
    config = config_from_args(TuneArgs, args).config or task_train_config(overrides.get("task"), overrides.get("algo"))
    return load_train_config(config, overrides)


def cmd_tune(args, extra: list[str]) -> int:
    opts = config_from_args(TuneArgs, args)
    if opts.report:
        from robo_prm.train.tune_report import write_report

        runs_dir = given_flags(args, TrainConfig).get("runs_dir", "runs")
        url = opts.storage or default_storage(runs_dir)
        write_report(opts.report, open_storage(url), Path(opts.out or Path(runs_dir) / "tune" / opts.report / "report"), opts.top)
        return 0
    base = base_config(args, extra)
    name, url = run_study(base, opts)
    print(f"study {name} in {url}: report with  robo-prm tune --report {name} --storage {url}")
    return 0
