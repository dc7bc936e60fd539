"""`robo-prm tune --report NAME`: the best trials of a study, its best settings as a train config, and PNGs.

Written into the output folder:
    best_config.yaml            the study's base config + the best trial's settings: `robo-prm train --config best_config.yaml`
    trials.json                 every trial: number, state, value, parameters, success/hazard areas, run folders
    optimization_history.png    Optuna's optimisation history (matplotlib backend)
    param_importances.png       Optuna's parameter importances (fANOVA), once two trials are complete
    intermediate_values.png     the objective so far at each evaluation, per trial (what the median pruner saw)
The study itself is unchanged: `optuna-dashboard STORAGE_URL` opens it as well.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import yaml

from robo_prm.config import TrainConfig
from robo_prm.config_io import ConfigError, dotted_to_nested, from_dict, merge

PARAMS = ("llm_weight", "judge_every", "safety_weight", "learning_rate")


def load_existing_study(name: str, storage):
    import optuna

    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise ConfigError(f"no study '{name}' in this storage (studies: {', '.join(names) or 'none'})") from None


def trial_rows(study) -> list[dict]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append({"number": t.number, "state": t.state.name, "value": t.value, "params": dict(t.params),
                     "success_auc": t.user_attrs.get("success_auc"), "hazard_area": t.user_attrs.get("hazard_area"),
                     "final_success": t.user_attrs.get("final_success"), "runs": t.user_attrs.get("runs", []),
                     "worker": t.user_attrs.get("worker"), "overrides": t.user_attrs.get("overrides")})
    return rows


def _fmt(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def format_table(rows: list[dict], top: int) -> str:
    done = sorted((r for r in rows if r["state"] == "COMPLETE"), key=lambda r: -r["value"])[:top]
    head = f"{'trial':>5} {'value':>7} {'succ_auc':>8} {'hazards':>7} {'β(llm)':>7} {'judge_every':>11} {'safety':>6} {'lr':>8}  run"
    lines = [head]
    for r in done:
        p = r["params"]
        lines.append(f"{r['number']:>5} {r['value']:>7.3f} {_fmt(r['success_auc'], '.3f'):>8} {_fmt(r['hazard_area'], '.3f'):>7} "
                     f"{p['llm_weight']:>7.3f} {p['judge_every']:>11} {p['safety_weight']:>6.2f} {p['learning_rate']:>8.2e}  "
                     f"{(r['runs'] or ['—'])[0]}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append("trials: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def best_config(study) -> tuple[TrainConfig, object]:
    """The study's base config with the best trial's settings (a full TrainConfig, no run name)."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise ConfigError(f"study '{study.study_name}' has no complete trial yet")
    best = study.best_trial
    base = study.user_attrs.get("base_config")
    if base is None:
        raise ConfigError(f"study '{study.study_name}' was not made by robo-prm tune (no base_config)")
    cfg = from_dict(TrainConfig, merge(base, dotted_to_nested(best.user_attrs["overrides"])))  # as tune.apply_overrides
    cfg.run_name, cfg.progress_bar = None, from_dict(TrainConfig, {}).progress_bar
    return cfg, best


def _plots(study, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    written = []
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    for name, plot in (("optimization_history", ovm.plot_optimization_history),
                       ("param_importances", ovm.plot_param_importances),
                       ("intermediate_values", ovm.plot_intermediate_values)):
        try:
            ax = plot(study)
        except (ValueError, RuntimeError) as exc:  # e.g. importances need two complete trials
            print(f"{name}.png: not drawn ({exc})")
            continue
        fig = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
        fig.set_size_inches(8, 5)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=100)
        plt.close(fig)
        written.append(out / f"{name}.png")
    return written


def write_report(name: str, storage, out: Path, top: int = 5) -> dict[str, Path]:
    """Print the best trials of study `name`; write best_config.yaml, trials.json and the PNGs into `out`."""
    from robo_prm.config import config_to_yaml

    study = load_existing_study(name, storage)
    rows = trial_rows(study)
    print(f"study {name}: objective = success-curve area − λ·hazard-curve area, λ = "
          f"{study.user_attrs.get('tune', {}).get('hazard_weight')}, seeds {study.user_attrs.get('tune', {}).get('seeds')}")
    print(format_table(rows, top))
    out.mkdir(parents=True, exist_ok=True)
    (out / "trials.json").write_text(json.dumps(rows, indent=1, default=str))
    written = {"trials": out / "trials.json"}
    cfg, best = best_config(study)
    header = (f"# robo-prm tune --report {name}: best trial {best.number}, objective {best.value:.4f}, "
              f"params {json.dumps(best.params)}\n# train it: robo-prm train --config {out / 'best_config.yaml'}\n")
    (out / "best_config.yaml").write_text(header + config_to_yaml(cfg))
    yaml.safe_load((out / "best_config.yaml").read_text())  # what train --config reads
    written["best_config"] = out / "best_config.yaml"
    for p in _plots(study, out):
        written[p.stem] = p
    for key, p in written.items():
        print(f"{key}: {p}")
    return written

