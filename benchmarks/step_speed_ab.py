"""Env steps/s with the scene description, this checkout against another one, interleaved.

    git clone -q . /tmp/old && git -C /tmp/old checkout -q REV
    python benchmarks/step_speed_ab.py --old /tmp/old [--rounds 4] [--seconds 3] [--task tidy_table]

Each round runs one child process per side (the other side's checkout first on PYTHONPATH, so its
`robo_prm` is imported), alternating, and each child reports its best of 3 timed windows: random
actions, reset when an episode ends, a SceneDescription made every step (through `DescribeWrapper`
where the checkout has it, else by the env itself), and descriptions/s of one stored state.
Ratios new/old per round are printed; the machine is noisy, so read the ratios, not the rates.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
import robo_prm
task, seconds = sys.argv[1], float(sys.argv[2])
try:
    from robo_prm.describe import DescribeWrapper
    env = DescribeWrapper(robo_prm.make_env(task))
except ImportError:  # before the describe stage was a wrapper: the env described itself
    env = robo_prm.make_env(task)
from robo_prm.describe.state_captioner import StateCaptioner
rng = np.random.default_rng(0)
env.reset(seed=0)
def window(fn, s):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < s:
        fn(); n += 1
    return n / (time.perf_counter() - t0)
def step():
    *_, term, trunc, info = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
    assert "description" in info
    if term or trunc:
        env.reset()
window(step, 0.3)
steps = max(window(step, seconds / 3) for _ in range(3))
cap, s = StateCaptioner(env.unwrapped.task), env.unwrapped.scene_state
desc = max(window(lambda: cap(s), seconds / 6) for _ in range(3))
print(json.dumps({"steps_per_s": steps, "descriptions_per_s": desc}))
env.close()
"""


def run(side: str, path: str | None, task: str, seconds: float) -> dict:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", CHILD, task, str(seconds)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--old", required=True, help="a checkout of the older revision")
    p.add_argument("--task", default="tidy_table")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", default=None, help="write the rounds as JSON here")
    a = p.parse_args()
    rounds = []
    for r in range(a.rounds):
        old, new = run("old", a.old, a.task, a.seconds), run("new", None, a.task, a.seconds)
        rounds.append({"old": old, "new": new})
        print(f"round {r}: steps/s old {old['steps_per_s']:.0f} new {new['steps_per_s']:.0f} "
              f"(×{new['steps_per_s'] / old['steps_per_s']:.2f}); descriptions/s old {old['descriptions_per_s']:.0f} "
              f"new {new['descriptions_per_s']:.0f} (×{new['descriptions_per_s'] / old['descriptions_per_s']:.2f})")
    if a.out:
        from robo_prm.provenance import provenance

        with open(a.out, "w") as f:
            json.dump({"provenance": provenance(), "task": a.task, "rounds": rounds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
