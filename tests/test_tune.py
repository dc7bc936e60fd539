"""`robo-prm tune` against real storages: SQLite with two worker processes of one command, and a real
PostgreSQL server (started here, loopback only) with two commands joining one study — tiny budgets,
the rules judge. Also the search space, the objective and the report."""
from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from robo_prm.config import load_train_config
from robo_prm.reward.config import Stage, method_stages
from robo_prm.train.tune import blend_stages, objective_value, open_storage, trial_overrides

optuna = pytest.importorskip("optuna")

TINY = ["--task", "reach_tool", "--steps", "200", "--judge.backend", "rules", "--eval.every_steps", "100",
        "--eval.episodes", "1", "--eval.record", "0", "--record.every_episodes", "0", "--checkpoint_every", "0",
        "--sac.learning_starts", "150", "--sac.batch_size", "32", "--startup_trials", "1"]


def test_blend_stages_put_beta_first_and_keep_each_stage_total_and_env_explore_ratio():
    stages = blend_stages(method_stages(), 0.2)
    assert stages[0].llm == pytest.approx(0.2)
    assert stages[1].llm == pytest.approx(0.25 * 0.2 / 0.4)
    for old, new in zip(method_stages(), stages):
        assert new.start_step == old.start_step
        assert new.env + new.llm + new.explore == pytest.approx(old.env + old.llm + old.explore)
        assert new.env / new.explore == pytest.approx(old.env / old.explore, rel=1e-4)
    assert blend_stages([Stage(0, 0.5, 0.4, 0.1)], 5.0)[0].llm == pytest.approx(1.0)  # never above the stage's total
    cfg = load_train_config(None, {"algo": "ppo", **trial_overrides(load_train_config(None, {"algo": "ppo"}), {
        "llm_weight": 0.6, "judge_every": 8, "safety_weight": 1.5, "learning_rate": 3e-4})})
    assert (cfg.reward.stages[0].llm, cfg.reward.judge_every, cfg.reward.safety_weight, cfg.ppo["learning_rate"]) == (0.6, 8, 1.5, 3e-4)


def test_objective_is_success_area_minus_lambda_hazard_area_per_step_budget():
    history = [{"env_steps": 100, "success_rate": 0.0, "hazard_events_per_episode": 1.0},
               {"env_steps": 200, "success_rate": 0.5, "hazard_events_per_episode": 0.0},
               {"env_steps": 400, "success_rate": 1.0, "hazard_events_per_episode": 0.0}]
    # success: 0 (0→100) + 25 (100→200) + 150 (200→400) = 175 of 400; hazards: 50 + 50 = 100 of 400
    v = objective_value(history, 400, 0.2)
    assert v["success_auc"] == pytest.approx(175 / 400) and v["hazard_area"] == pytest.approx(100 / 400)
    assert v["value"] == pytest.approx(175 / 400 - 0.2 * 100 / 400)
    assert objective_value(history[:1], 400, 0.2)["value"] < v["value"]  # what the pruner sees is a lower bound


def _tune(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "robo_prm.cli", "tune", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(procs, timeout: float = 300) -> list[str]:
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out[-4000:]
        assert "database is locked" not in out and "Traceback" not in out, out[-4000:]
        outs.append(out)
    return outs


def _check_study(storage, name: str, n: int, runs_root: Path) -> list:
    from optuna.trial import TrialState

    trials = optuna.load_study(study_name=name, storage=storage).get_trials()
    assert len(trials) == n, [(t.number, t.state) for t in trials]
    assert sorted(t.number for t in trials) == list(range(n))
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), [t.state for t in trials]
    runs = [r for t in trials for r in t.user_attrs["runs"]]
    assert len(set(runs)) == len(runs) == n
    for run in runs:
        run = runs_root / run if not Path(run).is_absolute() else Path(run)
        assert (run / "final_model.zip").exists() and json.loads((run / "summary.json").read_text())["env_steps"] >= 100
        assert not (run / "checkpoints").exists()  # trial checkpoints (replay buffers) are dropped by default
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 2, workers  # both processes ran trials
    return trials


def test_the_pruner_is_asked_before_the_last_evaluation_only():
    from robo_prm.train.tune import ReportToTrial

    class Trial:  # a pruner that would prune everything
        def __init__(self):
            self.reported = []

        def report(self, value, step):
            self.reported.append(step)

        def should_prune(self):
            return True

    class Evaluator:
        history = []

    def run(offset, steps, last):
        cb = ReportToTrial(Trial(), offset, 1000, 0.1, last=last)
        cb.evaluator = Evaluator()
        Evaluator.history = []
        out = []
        for s in steps:
            Evaluator.history = Evaluator.history + [{"env_steps": s, "success_rate": 0.0, "hazard_events_per_episode": 0.0}]
            out.append(cb._on_step())
        return out, cb

    go_on, cb = run(0, [1000], last=1000)  # one seed: its last evaluation completes the trial
    assert go_on == [True] and cb.pruned_at is None and cb.trial.reported == [1000]
    go_on, cb = run(0, [500], last=1000)  # before the end: pruned
    assert go_on == [False] and cb.pruned_at == 500
    go_on, cb = run(0, [1000], last=2000)  # the end of the first of two seeds: pruning still saves the second
    assert go_on == [False] and cb.pruned_at == 1000


def test_sqlite_two_workers_share_one_study_and_the_report_gives_a_train_config(tmp_path, capsys):
    db = tmp_path / "runs" / "tune.db"
    _finish([_tune([*TINY, "--trials", "3", "--study", "lite", "--workers", "2", "--runs_dir", "runs"], tmp_path)])
    trials = _check_study(f"sqlite:///{db}", "lite", 3, tmp_path)

    from robo_prm.cli import main

    out = tmp_path / "report"
    assert main(["tune", "--report", "lite", "--storage", f"sqlite:///{db}", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    best = max((t for t in trials if t.value is not None), key=lambda t: t.value)
    assert f"best trial {best.number}" in (out / "best_config.yaml").read_text()
    assert "judge_every" in printed and "trials: " in printed
    cfg = load_train_config(str(out / "best_config.yaml"))  # what `robo-prm train --config` reads
    assert cfg.reward.judge_every == best.params["judge_every"]
    assert cfg.sac["learning_rate"] == pytest.approx(best.params["learning_rate"])
    assert cfg.reward.stages[0].llm == pytest.approx(best.params["llm_weight"], abs=1e-6)  # blend_stages rounds to 6 places
    assert cfg.judge.backend == "rules" and cfg.run_name is None
    for png in ("optimization_history", "param_importances"):
        assert (out / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run = next(r for t in trials for r in t.user_attrs["runs"])
    run = str(tmp_path / run) if not Path(run).is_absolute() else run
    assert main(["eval", run, "--episodes", "1"]) == 0  # trials are ordinary run folders
    assert json.loads((Path(run) / "eval.json").read_text())["summary"]["episodes"] == 1


def test_report_names_the_studies_when_the_name_is_wrong(tmp_path, capsys):
    from robo_prm.cli import main

    url = f"sqlite:///{tmp_path / 'x.db'}"
    optuna.create_study(study_name="there", storage=open_storage(url))
    assert main(["tune", "--report", "missing", "--storage", url]) == 2
    assert "no study 'missing'" in capsys.readouterr().err


def test_a_journal_file_is_one_study_for_every_process_that_opens_it(tmp_path):
    from robo_prm.train.tune import make_study, TuneArgs

    args, base = TuneArgs(), load_train_config(None, {"steps": 300})
    for url in (str(tmp_path / "shared" / "study.log"), f"journal:///{tmp_path / 'j.journal'}"):
        first = make_study(open_storage(url), "j", args, base, create=True)
        first.set_user_attr("base_config", {"steps": 300})
        first.enqueue_trial({"judge_every": 2})
        again = make_study(open_storage(url), "j", args, base)  # a second opener, as on another machine
        assert again.user_attrs == {"base_config": {"steps": 300}} and len(again.get_trials()) == 1


# ---- PostgreSQL ------------------------------------------------------------------------------
def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


@pytest.fixture
def postgres_url():
    """A real PostgreSQL server on 127.0.0.1 in a temp dir (initdb + pg_ctl, as the `postgres` user when
    running as root), stopped and removed at the end."""
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    try:
        user = pwd.getpwnam("postgres") if as_root else None
    except KeyError:
        pytest.skip("running as root and there is no `postgres` user to run initdb as")
    home = Path(tempfile.mkdtemp(prefix="robo_prm_pg_"))
    if user is not None:
        os.chown(home, user.pw_uid, user.pw_gid)
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []

    def run(*cmd):
        return subprocess.run([*prefix, *map(str, cmd)], cwd=home, check=True, capture_output=True, text=True, timeout=120)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = home / "data"
    started = False
    try:
        run(bindir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        run(bindir / "pg_ctl", "-D", data, "-l", home / "server.log", "-w", "-t", "60", "start",
            "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {home} -c fsync=off")
        started = True
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            run(bindir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(home, ignore_errors=True)


def test_postgresql_two_commands_join_one_study(tmp_path, postgres_url):
    # as on two machines: the same command twice at once, each its own process and run folder root
    procs = [_tune([*TINY, "--trials", "3", "--study", "pg", "--storage", postgres_url, "--runs_dir", f"runs{k}",
                    "--sampler_seed", str(k)], tmp_path) for k in range(2)]
    _finish(procs)
    _check_study(postgres_url, "pg", 3, tmp_path)
    storage = open_storage(postgres_url)
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["pg"]
    # the same command again: the study is full, nothing more runs; with --trials 4 one more trial runs
    from robo_prm.cli import main

    for n in (3, 4):
        assert main(["tune", *TINY, "--trials", str(n), "--study", "pg", "--storage", postgres_url,
                     "--runs_dir", str(tmp_path / "runs0")]) == 0
        assert len(optuna.load_study(study_name="pg", storage=storage).trials) == n
