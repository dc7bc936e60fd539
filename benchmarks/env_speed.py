"""How fast the tidy-table envs run: env steps/s (describe on/off), rendered frames/s, descriptions/s.

    python benchmarks/env_speed.py [--seconds 1.5] [--tasks reach_tool tidy_table] [--out benchmarks/results/env_speed.json]

Per shipped task, with uniform random actions (reset when an episode ends, resets included in the time):

* steps/s, no rendering, with the scene description in `info` (behind `DescribeWrapper`, as training runs) and without;
* frames/s: one `step` + one `render()` per frame (rgb_array) at 128 and 224 px, MuJoCo GL backend as in
  `MUJOCO_GL` (robo_prm defaults it to egl);
* descriptions/s: `StateCaptioner` called on one stored `SceneState` (the state after `reset(seed=0)`).

Each figure is the best of 3 timed runs of about `--seconds`/3 each, after a warm-up. Writes JSON and prints a
markdown table with the date, the machine and the exact command.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import robo_prm  # noqa: F401  (sets MUJOCO_GL before mujoco is imported)
from robo_prm.describe import DescribeWrapper, StateCaptioner
from robo_prm.envs.rollout import RandomPolicy
from robo_prm.envs.task import shipped_tasks
from robo_prm.provenance import command_line, load_average, provenance

RENDER_SIZES = (128, 224)


def _best_rate(fn, seconds: float, repeats: int = 3) -> float:
    """Calls per second of `fn` (which does one unit of work), best of `repeats` runs of seconds/repeats."""
    fn()  # warm-up (first render creates the GL context)
    best = 0.0
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds / repeats:
            fn()
            n += 1
        best = max(best, n / elapsed)
    return best


def _stepper(env, policy: RandomPolicy, render: bool = False):
    """One env step per call (a timing unit, so not `rollout`, which runs whole episodes)."""
    env.reset(seed=0)

    def one():
        _, _, terminated, truncated, _ = env.step(policy())
        if render:
            env.render()
        if terminated or truncated:
            env.reset()

    return one


def bench_task(task: str, seconds: float) -> dict:
    out: dict = {}
    policy = RandomPolicy(np.random.default_rng(0))  # one stream of uniform actions for every figure
    for describe in (True, False):
        env = DescribeWrapper(robo_prm.make_env(task)) if describe else robo_prm.make_env(task)
        out[f"steps_per_s_describe_{'on' if describe else 'off'}"] = _best_rate(_stepper(env, policy), seconds)
        env.close()
    for size in RENDER_SIZES:
        env = robo_prm.make_env(task, render_mode="rgb_array", width=size, height=size)
        out[f"frames_per_s_{size}px"] = _best_rate(_stepper(env, policy, render=True), seconds)
        env.close()
    env = robo_prm.make_env(task)
    env.reset(seed=0)
    state = env.unwrapped.scene_state
    captioner = StateCaptioner(env.unwrapped.task)
    out["descriptions_per_s"] = _best_rate(lambda: captioner(state), seconds)
    env.close()
    return out


def gl_renderer() -> str:
    """The OpenGL renderer behind MUJOCO_GL (egl on a CPU-only machine is Mesa llvmpipe)."""
    env = robo_prm.make_env("reach_tool", render_mode="rgb_array", width=16, height=16)
    try:
        env.reset(seed=0)
        env.render()
        from OpenGL import GL

        env.unwrapped.mujoco_renderer.viewer.make_context_current()
        return " / ".join(GL.glGetString(x).decode() for x in (GL.GL_RENDERER, GL.GL_VERSION))
    except Exception as exc:  # informative only; never fail the benchmark on it
        return f"unknown ({type(exc).__name__})"
    finally:
        env.close()


def table(results: dict) -> str:
    head = (
        "| task | steps/s (describe on) | steps/s (describe off) | "
        + " | ".join(f"frames/s {s}px" for s in RENDER_SIZES)
        + " | descriptions/s |"
    )
    rows = [head, "|" + "---|" * (5 + len(RENDER_SIZES) - 1)]
    for task, r in results.items():
        cells = [r["steps_per_s_describe_on"], r["steps_per_s_describe_off"]]
        cells += [r[f"frames_per_s_{s}px"] for s in RENDER_SIZES] + [r["descriptions_per_s"]]
        rows.append(f"| {task} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.5, help="timed seconds per figure (split over 3 runs)")
    p.add_argument("--tasks", nargs="*", default=None, help="shipped task names (default: all)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "env_speed.json"))
    args = p.parse_args(argv)

    import gymnasium
    import mujoco

    tasks = args.tasks or shipped_tasks()
    command = command_line(sys.argv[:1] + (sys.argv[1:] if argv is None else argv))
    prov = provenance(command)
    t0 = time.perf_counter()
    results = {}
    for task in tasks:
        results[task] = {k: round(v, 1) for k, v in bench_task(task, args.seconds).items()}
        print(f"{task}: done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    report = {
        **prov,
        "load_at_end": load_average(),
        "platform": platform.platform(),
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
        "gl_renderer": gl_renderer(),
        "versions": {"mujoco": mujoco.__version__, "gymnasium": gymnasium.__version__, "robo_prm": robo_prm.__version__},
        "method": "random actions, reset on episode end; best of 3 runs of seconds/3 after a warm-up",
        "seconds_per_figure": args.seconds,
        "wall_s": round(time.perf_counter() - t0, 1),
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    m = report["machine"]
    print(f"env speed — {report['date']} — {m['cores']} CPU(s), {m['cpu_model']}, load {report['load']}")
    print(f"MUJOCO_GL={report['mujoco_gl']} ({report['gl_renderer']})")
    print(f"command: `{command}`\n")
    print(table(results))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
