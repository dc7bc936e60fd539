"""The best evaluated policy is kept as best_model.zip (SB3 EvalCallback's convention) and loads with `best`."""
import json
from types import SimpleNamespace

import pytest

import robo_prm.train.run as run_mod
from robo_prm.config import load_train_config
from robo_prm.config_io import ConfigError
from robo_prm.train import load_policy, train


def _cfg(tmp_path, **over):
    base = {"task": "reach_tool", "steps": 300, "runs_dir": str(tmp_path), "run_name": "t", "progress_bar": False,
            "record.every_episodes": 0, "eval.every_steps": 100, "eval.episodes": 1, "eval.record": 0,
            "checkpoint_every": 0, "judge.backend": "rules", "sac.learning_starts": 100}
    base.update(over)
    return load_train_config(None, base)


def test_the_first_evaluation_with_the_highest_success_is_kept(tmp_path, monkeypatch):
    rates = iter([0.2, 0.5, 0.5, 0.1])
    monkeypatch.setattr(run_mod, "run_episodes", lambda *a, **k: [])
    monkeypatch.setattr(run_mod, "summarize", lambda results: {"success_rate": next(rates), "hazard_events_per_episode": 0.0})
    monkeypatch.setattr(run_mod, "find_blend", lambda venv: None)
    saved = []
    model = SimpleNamespace(num_timesteps=0, get_env=lambda: "venv", logger=SimpleNamespace(record=lambda *a, **k: None),
                            save=lambda path: (path.write_text(str(model.num_timesteps)), saved.append(model.num_timesteps)))
    cb = run_mod.EvalEvery(None, _cfg(tmp_path), tmp_path / "eval", "t")
    cb.model = model
    cb._on_training_start()  # no history, no best yet
    for step in (100, 200, 300, 400):
        model.num_timesteps = cb.num_timesteps = step
        cb.evaluate()
    assert saved == [100, 200]  # a tie does not replace the earlier policy
    assert (tmp_path / "best_model.zip").read_text() == "200"
    assert json.loads((tmp_path / "eval" / "best.json").read_text()) == {"env_steps": 200, "success_rate": 0.5,
                                                                         "hazard_events_per_episode": 0.0}


def test_a_trained_run_has_a_loadable_best_model(tmp_path):
    run = train(_cfg(tmp_path))
    history = json.loads((run / "eval" / "eval_history.json").read_text())
    best = json.loads((run / "eval" / "best.json").read_text())
    top = max(h["success_rate"] for h in history)
    assert best["success_rate"] == top
    assert best["env_steps"] == min(h["env_steps"] for h in history if h["success_rate"] == top)
    cfg, task, policy = load_policy(run, best=True)
    assert cfg.task == "reach_tool" and callable(policy)


def test_asking_for_a_best_model_that_was_never_written_names_the_file(tmp_path):
    run = train(_cfg(tmp_path, **{"eval.every_steps": 0}))
    (run / "best_model.zip").unlink()  # the final evaluation wrote one: a run from before best models were kept has none
    with pytest.raises(ConfigError, match="no best_model.zip"):
        load_policy(run, best=True)
