"""Frames with labels for the perception models: `robo-prm perception collect`.

Rollouts of random, scripted-expert and perturbed-expert policies (a share of them from a
scattered start: objects anywhere on the table, at the edges, tipped or on the floor, so hazards,
grasps and placements are all covered). Every `stride`-th frame is kept with its labels: caption
slots (facts.py → slots.py), the state caption text, the task's predicates, rule progress,
milestones, and a state vector. Frames are rendered by the env's own camera
(`TidyTableEnv(task, render_mode="rgb_array", width=S, height=S)`), the same call the
pixels-only describer renders with. Held-out split by episode seed.

Layout of DIR: `meta.json` + `shard_XXXX.npz` (uint8 frames, compressed).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mujoco
import numpy as np

from robo_prm.config_flags import opt
from robo_prm.perception.slots import STATE_DIM, SlotLabels, slot_names
from robo_prm.describe.state_captioner import StateCaptioner
from robo_prm.envs.scene import OBJECT_KIND, OBJECT_REST_Z, TABLE_TOP_Z, TABLE_X, TABLE_Y
from robo_prm.envs.task import load_task

POLICIES = ("random", "expert", "perturbed")


@dataclass
class CollectConfig:
    # frames/stride/max_steps: the first of the two collections the shipped perception model was trained on
    # (robo_prm/models/perception/manifest.json, data.collect[0]).
    tasks: list[str] = opt(["reach_tool", "push_tool_from_edge", "place_cup_in_bin", "tidy_table"], "tasks to roll out")
    frames: int = opt(14_000, "frames in total (train + held-out)")
    size: int = opt(128, "frame width = height of each camera view, pixels")
    views: list[str] = opt(["front", "side"], "camera views side by side in each frame (envs/tidy_env.py VIEWS; "
                               "the shipped model reads front,side)")
    stride: int = opt(3, "keep every stride-th step of an episode")
    heldout_every: int = opt(6, "every n-th round of episodes (one per task, by seed) is held out")
    scatter: float = opt(0.35, "share of episodes that start from a scattered scene")
    mix: tuple[float, float, float] = opt((0.25, 0.35, 0.40), "shares of random, expert and perturbed-expert episodes")
    max_steps: int = opt(240, "cap per episode (tidy_table's own limit is 300)")
    seed: int = opt(0, "seed of the first episode")
    shard_size: int = opt(2_000, "frames per npz shard")
    split: str = opt("all", "keep only this split's frames (all, train, heldout); the episodes run as in a full "
                     "collection, so `--split heldout` writes exactly the held-out frames of the same config")
    previous: bool = opt(False, "also keep the frame one env step before each kept one (prev_frames; the first "
                                "step's is its own), for a window slot head that reads motion (window_slots.py)")


def predicate_keys(tasks: list[str]) -> list[str]:
    """Global predicate columns: 'task:key' for every task's predicate_values keys."""
    keys = []
    for name in tasks:
        task = load_task(name)
        keys += [f"{task.name}:success"] + [f"{task.name}:milestone/{m.name}" for m in task.spec.milestones]
        keys += [f"{task.name}:hazard/{h}" for h in task.hazard_checks]
    return keys


def scatter(env, rng: np.random.Generator):
    """Put the task's objects anywhere on the table (edges included), sometimes tipped or on the floor."""
    env = env.unwrapped
    placed: list[np.ndarray] = []
    for sim in env.task.movable:
        for _ in range(50):
            xy = np.array([rng.uniform(TABLE_X[0] + 0.01, TABLE_X[1] - 0.01), rng.uniform(TABLE_Y[0] + 0.01, TABLE_Y[1] - 0.01)])
            if all(np.linalg.norm(xy - p) > 0.09 for p in placed):
                break
        placed.append(xy)
        z = TABLE_TOP_Z + OBJECT_REST_Z[sim]
        roll = 0.0
        u = rng.uniform()
        if u < 0.08:  # on the floor in front of or beside the table
            xy = np.array([rng.uniform(TABLE_X[1] + 0.05, TABLE_X[1] + 0.15), rng.uniform(*TABLE_Y)])
            z = OBJECT_REST_Z[sim]
        elif OBJECT_KIND[sim] == "fragile" and u < 0.3:
            roll, z = np.pi / 2, TABLE_TOP_Z + 0.045
        yaw = rng.uniform(-np.pi, np.pi) if OBJECT_KIND[sim] == "fragile" else rng.uniform(-0.6, 0.6)
        env._set_pose(sim, np.array([*xy, z]), yaw)
        if roll:
            adr = env._joint_qpos_adr[sim]
            q_yaw = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
            q_roll = np.array([np.cos(roll / 2), np.sin(roll / 2), 0.0, 0.0])
            q = np.zeros(4)
            mujoco.mju_mulQuat(q, q_yaw, q_roll)
            env.data.qpos[adr + 3: adr + 7] = q
    mujoco.mj_forward(env.model, env.data)
    for _ in range(5):  # let lifted-by-overlap objects settle
        mujoco.mj_step(env.model, env.data, nstep=20)
    env._snapshot()


class _Shards:
    def __init__(self, out: Path, shard_size: int):
        self.out, self.shard_size, self.n_shards = out, shard_size, 0
        self.rows: dict[str, list] = {}

    def add(self, **row):
        for k, v in row.items():
            self.rows.setdefault(k, []).append(v)
        if len(self.rows["frames"]) >= self.shard_size:
            self.flush()

    def flush(self):
        if not self.rows.get("frames"):
            return
        arrays = {k: np.stack(v) if isinstance(v[0], np.ndarray) else np.asarray(v) for k, v in self.rows.items()}
        np.savez_compressed(self.out / f"shard_{self.n_shards:04d}.npz", **arrays)
        self.n_shards += 1
        self.rows = {}


class _Rows:
    """Labels each kept state into the shards; counts frames by split and policy; drives the progress bar."""

    def __init__(self, cfg: CollectConfig, keys: list[str], shards: _Shards, progress: bool):
        self.cfg, self.keys, self.shards = cfg, keys, shards
        self.col = {k: i for i, k in enumerate(keys)}
        self.n = 0  # frames kept or, outside cfg.split, passed over
        self.counts = {"train": 0, "heldout": 0}
        self.stored = 0
        self.by_policy = {p: 0 for p in POLICIES}
        self.bar = None
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.frames, desc="collect", unit="frame")

    @property
    def full(self) -> bool:
        return self.n >= self.cfg.frames

    def add(self, env, cap: StateCaptioner, ti: int, t: int, ep: dict, previous: np.ndarray | None = None):
        """The env's current state (step t of episode `ep`: episode, seed, split, kind, scattered) as one row;
        `previous`: the frame one step before (cfg.previous; None at the first step: this frame). A frame outside
        cfg.split counts towards cfg.frames and is not stored."""
        self.counts[ep["split"]] += 1
        self.by_policy[ep["kind"]] += 1
        self.n += 1
        if self.bar is not None:
            self.bar.update(1)
        if not self.wanted(ep):
            return
        self.stored += 1
        task = env.unwrapped.task
        s = env.unwrapped.scene_state
        status = task.status(s)
        d = cap(s, status=status)
        labels = SlotLabels.of(cap.facts(s, status), s)
        preds = np.full(len(self.keys), -1, dtype=np.int8)
        for k, v in task.predicate_values(s, status).items():
            preds[self.col[f"{task.name}:{k}"]] = int(bool(v))
        frame = env.unwrapped.render_views(tuple(self.cfg.views))
        extra = {"prev_frames": frame if previous is None else previous} if self.cfg.previous else {}
        self.shards.add(frames=frame, **extra, slots=labels.slots, state=labels.state, preds=preds,
                        task=ti, rule_progress=np.float32(status.rule_progress), milestones=status.reached,
                        caption=d.text, episode=ep["episode"], seed=ep["seed"], step=t, heldout=ep["split"] == "heldout",
                        policy=POLICIES.index(ep["kind"]), scattered=ep["scattered"], success=status.success)

    def wanted(self, ep: dict) -> bool:
        return self.cfg.split in ("all", ep["split"])

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _policy(kind: str, env, seed: int, ep_rng: np.random.Generator):
    from robo_prm.envs.experts import ScriptedExpert
    from robo_prm.envs.rollout import RandomPolicy

    if kind == "random":  # a smoothed random walk covers the workspace better than independent actions
        return RandomPolicy(ep_rng, smooth=0.6, binary_grip=True)
    if kind == "expert":
        return ScriptedExpert(env, noise=0.05, seed=seed)
    return ScriptedExpert(env, noise=float(ep_rng.uniform(0.1, 0.4)), perturb=float(ep_rng.uniform(0.1, 0.4)), seed=seed)


def _episode(cfg: CollectConfig, episode: int, ti: int, env, cap: StateCaptioner, rng: np.random.Generator, rows: _Rows):
    """One episode of a policy drawn from cfg.mix (random only for a task without a scripted expert), from a
    scattered scene with probability cfg.scatter; every cfg.stride-th state (from a random offset) is kept."""
    from robo_prm.envs.rollout import rollout

    task = env.unwrapped.task
    seed = cfg.seed * 1_000_003 + episode
    n_tasks = len(cfg.tasks)
    split = "heldout" if (episode // n_tasks) % cfg.heldout_every == 0 else "train"  # whole rounds: every task
    start = start_episode(cfg, env, seed, rng)
    offset = int(start.ep_rng.integers(cfg.stride))
    ep = {"episode": episode, "seed": seed, "split": split, "kind": start.kind, "scattered": start.scattered}

    before = {}  # the frame one step before the next kept one (cfg.previous)

    def keep(step) -> bool:
        if (step.t - offset) % cfg.stride == 0:
            rows.add(env, cap, ti, step.t, ep, before.pop("frame", None))
        if cfg.previous and (step.t + 1 - offset) % cfg.stride == 0 and rows.wanted(ep):
            before["frame"] = env.unwrapped.render_views(tuple(cfg.views))
        return rows.full

    rollout(env, start.policy, seed, on_step=keep, max_steps=min(task.spec.max_steps, cfg.max_steps),
            start=(start.obs, start.info))


@dataclass
class EpisodeStart:
    """A reset env's first observation, the policy drawn for the episode, and the episode's own generator
    (what is drawn from it after the policy, e.g. the collection's stride offset, follows from here)."""
    kind: str
    scattered: bool
    policy: object
    obs: object
    info: dict
    ep_rng: np.random.Generator


def start_episode(cfg: CollectConfig, env, seed: int, rng: np.random.Generator) -> EpisodeStart:
    """Reset `env` at `seed` as a collected episode starts: a policy kind drawn from cfg.mix (random for a task
    without a scripted expert) and a scattered scene with probability cfg.scatter, both drawn from `rng`; the
    scatter and the policy's own draws from a generator seeded with `seed`."""
    from robo_prm.envs.experts import PLANS

    kind = POLICIES[int(rng.choice(3, p=np.asarray(cfg.mix) / sum(cfg.mix)))]
    if env.unwrapped.task.name not in PLANS:
        kind = "random"
    obs, info = env.reset(seed=seed)
    ep_rng = np.random.default_rng(seed)  # scatter, policy, then whatever the caller draws: in this order
    scattered = bool(rng.uniform() < cfg.scatter)
    if scattered:
        scatter(env, ep_rng)
        obs = env.unwrapped._observe(env.unwrapped.scene_state)
    policy = _policy(kind, env, seed, ep_rng)
    return EpisodeStart(kind, scattered, policy, obs, info, ep_rng)


def collect(cfg: CollectConfig, out: str | Path, progress: bool = True) -> dict:
    """Write frames + labels to `out`; returns the meta dict (also written to out/meta.json)."""
    from robo_prm.envs.tidy_env import TidyTableEnv

    if cfg.split not in ("all", "train", "heldout"):  # before anything in `out` is touched
        raise ValueError(f"split: '{cfg.split}' is not one of all, train, heldout")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("shard_*.npz"):
        old.unlink()
    keys = predicate_keys(cfg.tasks)
    tasks = [load_task(t) for t in cfg.tasks]
    envs = [TidyTableEnv(t, render_mode="rgb_array", width=cfg.size, height=cfg.size) for t in tasks]
    captioners = [StateCaptioner(t) for t in tasks]
    rng = np.random.default_rng(cfg.seed)
    rows = _Rows(cfg, keys, _Shards(out, cfg.shard_size), progress)
    t0, episode = time.perf_counter(), 0
    try:
        while not rows.full:
            ti = episode % len(tasks)
            _episode(cfg, episode, ti, envs[ti], captioners[ti], rng, rows)
            episode += 1
    finally:
        for env in envs:
            env.close()
        rows.close()
    rows.shards.flush()
    meta = {
        "config": {**asdict(cfg), "mix": list(cfg.mix)},
        "tasks": [t.name for t in tasks],
        "predicate_keys": keys,
        "slot_names": slot_names(),
        "state_dim": STATE_DIM,
        "size": cfg.size,
        "views": list(cfg.views),
        "frames": rows.stored,
        "episodes": episode,
        "splits": {k: n if cfg.split in ("all", k) else 0 for k, n in rows.counts.items()},
        "policies": rows.by_policy,
        "shards": rows.shards.n_shards,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


FRAME_KEYS = {"frames", "prev_frames"}  # image arrays (prev_frames: collected with `previous`)


@dataclass
class FrameSet:
    """A collected folder in memory (all shards concatenated)."""

    meta: dict
    arrays: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.arrays["frames"])

    def split(self, heldout: bool) -> "FrameSet":
        m = self.arrays["heldout"] == heldout
        return FrameSet(self.meta, {k: v[m] for k, v in self.arrays.items()})

    def subset(self, idx: np.ndarray) -> "FrameSet":
        return FrameSet(self.meta, {k: v[idx] for k, v in self.arrays.items()})

    def with_views(self, views: list[str] | tuple[str, ...]) -> "FrameSet":
        """The frames cut to these camera views (in this order), e.g. the front view of front + side frames."""
        have, views = list(self.meta["views"]), list(views)
        if views == have:
            return self
        missing = [v for v in views if v not in have]
        if missing:
            raise ValueError(f"the frames hold the {'+'.join(have)} views, not {', '.join(missing)}")
        s = self.meta["size"]
        cut = {}
        for key in FRAME_KEYS & self.arrays.keys():
            tiles = [self.arrays[key][:, :, have.index(v) * s:(have.index(v) + 1) * s] for v in views]
            cut[key] = np.ascontiguousarray(np.concatenate(tiles, axis=2))
        return FrameSet(self.meta | {"views": views}, self.arrays | cut)


def _load_one(folder: Path, views: list[str] | None = None, heldout: bool | None = None) -> FrameSet:
    if not (folder / "meta.json").exists():
        raise FileNotFoundError(f"{folder}: no meta.json (make one with `robo-prm perception collect --out {folder}`)")
    meta = json.loads((folder / "meta.json").read_text())
    meta.setdefault("views", ["front"])  # folders collected before camera views were a choice
    parts: dict[str, list] = {}
    for p in sorted(folder.glob("shard_*.npz")):
        with np.load(p) as z:
            shard = FrameSet(meta, {k: z[k] for k in z.files})
        shard = shard.split(heldout) if heldout is not None else shard
        for k, v in (shard.with_views(views) if views else shard).arrays.items():  # cut shard by shard: less memory
            parts.setdefault(k, []).append(v)
    if views:
        meta = meta | {"views": list(views)}
    return FrameSet(meta, {k: np.concatenate(v) for k, v in parts.items()})


_SAME = ("tasks", "predicate_keys", "slot_names", "state_dim", "size", "views")  # what folders must share to be merged


def load_frames(folder: str | Path | list, views: list[str] | None = None, heldout: bool | None = None) -> FrameSet:
    """One collected folder, or several ("a,b" or a list) merged into one set: they must hold the same tasks,
    predicate columns, slots, frame size and camera views; each keeps its own held-out split (by its episode seeds,
    so collect them with different --seed), and episode numbers are offset so they stay distinct. `views`: cut the
    frames to these camera views (`FrameSet.with_views`); `heldout`: keep only that split (`FrameSet.split`)."""
    names = folder.split(",") if isinstance(folder, str) else folder if isinstance(folder, list) else [folder]
    folders = [Path(f) for f in names if str(f)]
    sets = [_load_one(f, views, heldout) for f in folders]
    if len(sets) == 1:
        return sets[0]
    first = sets[0].meta
    for f, fs in zip(folders[1:], sets[1:]):
        bad = [k for k in _SAME if fs.meta.get(k) != first.get(k)]
        if bad:
            raise ValueError(f"{f}: cannot merge with {folders[0]}: different {', '.join(bad)}")
    seeds = np.concatenate([fs.arrays["seed"] for fs in sets])
    if len(set(seeds.tolist())) != sum(len(set(fs.arrays["seed"].tolist())) for fs in sets):
        raise ValueError(f"{folder}: the folders share episode seeds (collect them with different --seed)")
    arrays: dict[str, list] = {}
    offset = 0
    shared = set.intersection(*(set(fs.arrays) for fs in sets))  # prev_frames only where every folder has them
    for fs in sets:
        for k, v in ((k, v) for k, v in fs.arrays.items() if k in shared):
            arrays.setdefault(k, []).append(v + offset if k == "episode" else v)
        offset += int(fs.meta["episodes"])
    meta = {k: first.get(k) for k in _SAME}
    meta |= {"folders": [str(f) for f in folders], "config": [fs.meta.get("config") for fs in sets],
             "frames": sum(fs.meta["frames"] for fs in sets), "episodes": sum(fs.meta["episodes"] for fs in sets),
             "splits": {s: sum(fs.meta["splits"][s] for fs in sets) for s in first["splits"]},
             "policies": {p: sum(fs.meta["policies"][p] for fs in sets) for p in first["policies"]},
             "seconds": round(sum(fs.meta.get("seconds", 0.0) for fs in sets), 1)}
    return FrameSet(meta, {k: np.concatenate(v) for k, v in arrays.items()})
