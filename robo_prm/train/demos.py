"""Demonstrations for SAC (`demos: N`): the task's scripted plan, run through the training envs themselves.

`collect_demos` steps the training VecEnv — the same wrappers, judge and blended reward the agent trains on,
so a stored reward is the reward the agent would have got — with the scripted expert's actions
(`ExpertHook.expert_action`, reached through `env_method`, so subprocess envs work too) for N whole episodes,
and puts them into the demo store of the model's replay buffer. Under `reward.async` the demos' provisional
rewards are replaced by the final ones before training starts.

`DemoReplayBuffer` (SB3's `replay_buffer_class`) keeps the demos apart from the replay rows, never
overwritten, and draws `demo_ratio` of every batch from them (null: in proportion to their count, as if they
were rows of the replay buffer); `DemoRelabelReplayBuffer` is the same on the async judge's `RelabelReplayBuffer`
(`demo_buffer_class(base)` picks). Saved with the buffer, so a resumed run keeps its demos.
"""
from __future__ import annotations

import gymnasium
import numpy as np
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from robo_prm.envs.experts import ScriptedExpert
from robo_prm.reward.relabel import RelabelReplayBuffer
from robo_prm.reward.wrappers import LLMRewardVecEnv


class ExpertHook(gymnasium.Wrapper):
    """Gives the scripted expert's next action for this env's current state (reset with every episode)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.expert = ScriptedExpert(env)  # fails here, with the task's name, when it has no `expert:` plan

    def reset(self, **kwargs):
        out = self.env.reset(**kwargs)
        self.expert.reset()
        return out

    def expert_action(self) -> np.ndarray:
        return self.expert()


class _Demos:
    """The demo store and the mixed sampling of `DemoReplayBuffer` (module doc)."""

    def _init_demos(self, demo_ratio: float | None) -> None:
        if demo_ratio is not None and not 0.0 <= demo_ratio <= 1.0:
            raise ValueError(f"demo_ratio must be in [0, 1] or null, got {demo_ratio}")
        self.demo_ratio = demo_ratio
        self.demos: ReplayBuffer | None = None
        self.demo_sampled = 0

    def add_demos(self, rows: list[tuple]) -> None:
        """rows: (obs, next_obs, action, reward, done, info) of one env each; replaces the demos held."""
        if not rows:
            return
        store = ReplayBuffer(len(rows), self.observation_space, self.action_space, device=self.device, n_envs=1,
                             handle_timeout_termination=self.handle_timeout_termination)
        for obs, next_obs, action, reward, done, info in rows:
            store.add(obs[None], next_obs[None], action[None], np.array([reward]), np.array([done]), [info])
        self.demos = store

    def n_demo(self, batch_size: int) -> int:
        if self.demos is None or self.demos.size() == 0:
            return 0
        if self.demo_ratio is None:
            held = self.demos.size()
            return int(np.random.binomial(batch_size, held / (held + self.size() * self.n_envs)))
        return int(round(batch_size * self.demo_ratio))

    def sample(self, batch_size: int, env=None) -> ReplayBufferSamples:
        k = min(batch_size, self.n_demo(batch_size))
        if k == 0:
            return super().sample(batch_size, env)
        self.demo_sampled += k
        demo = self.demos.sample(k, env)
        if k == batch_size:
            return demo
        main = super().sample(batch_size - k, env)
        return ReplayBufferSamples(*(None if a is None else th.cat([a, b]) for a, b in zip(main, demo)))


class DemoReplayBuffer(_Demos, ReplayBuffer):
    """SAC's replay buffer plus demonstrations kept apart and sampled at `demo_ratio` (module doc)."""

    def __init__(self, *args, demo_ratio: float | None = 0.25, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_demos(demo_ratio)


class DemoRelabelReplayBuffer(_Demos, RelabelReplayBuffer):
    """The async judge's relabelling buffer (reward/relabel.py) plus demonstrations."""

    def __init__(self, *args, demo_ratio: float | None = 0.25, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_demos(demo_ratio)


DEMO_BUFFERS = {ReplayBuffer: DemoReplayBuffer, RelabelReplayBuffer: DemoRelabelReplayBuffer}


def demo_buffer_class(base: type[ReplayBuffer]) -> type[ReplayBuffer]:
    """`base` with demonstrations kept beside it (classes defined here, so a saved buffer unpickles)."""
    if base not in DEMO_BUFFERS:
        raise ValueError(f"demos: no demo buffer for {base.__name__} (known: {', '.join(c.__name__ for c in DEMO_BUFFERS)})")
    return DEMO_BUFFERS[base]


def _blend(venv):
    while venv is not None:
        if isinstance(venv, LLMRewardVecEnv):
            return venv.blend
        venv = getattr(venv, "venv", None)
    return None


def collect_demos(venv, episodes: int, successful_only: bool = False) -> tuple[list[tuple], dict]:
    """`episodes` whole expert episodes through the training VecEnv (its envs wrapped in ExpertHook) →
    (rows, stats). Rows of episodes still running when the count is reached are dropped. `successful_only`: only
    episodes that end in success are kept, until `episodes` of them (at most 2 × `episodes` are run) — a failed
    expert episode is mostly retries the expert itself got wrong."""
    blend = _blend(venv)
    finals: dict[int, np.ndarray] = {}
    listen = None
    if blend is not None and blend.asynchronous is not None:
        listen = lambda step, final, provisional: finals.__setitem__(step, np.asarray(final))  # noqa: E731
        blend.asynchronous.listeners.append(listen)
    rows: list[tuple] = []
    running: list[list[tuple]] = [[] for _ in range(venv.num_envs)]
    wins, lengths, kept = 0, [], 0
    tries = 2 * episodes if successful_only else episodes
    obs = venv.reset()
    try:
        while kept < episodes and len(lengths) < tries:
            actions = np.stack(venv.env_method("expert_action"))
            new_obs, rewards, dones, infos = venv.step(actions)
            for i in range(venv.num_envs):
                next_obs = infos[i]["terminal_observation"] if dones[i] else new_obs[i]
                running[i].append((obs[i].copy(), np.asarray(next_obs).copy(), actions[i], float(rewards[i]), bool(dones[i]),
                                   {k: infos[i][k] for k in ("TimeLimit.truncated", "reward_step", "reward_pending") if k in infos[i]}, i))
                if dones[i] and kept < episodes and len(lengths) < tries:
                    success = bool(infos[i].get("is_success", False))
                    lengths.append(len(running[i]))
                    wins += success
                    if success or not successful_only:
                        rows += running[i]
                        kept += 1
                if dones[i]:
                    running[i] = []
            obs = new_obs
        if listen is not None:
            blend.asynchronous.flush()
    finally:
        if listen is not None:
            blend.asynchronous.listeners.remove(listen)
    rows = [_final(row, finals) for row in rows]
    return rows, {"demo_episodes": kept, "demo_episodes_run": len(lengths), "demo_successes": wins,
                  "demo_transitions": len(rows), "demo_mean_length": float(np.mean(lengths)) if lengths else 0.0}


def _final(row: tuple, finals: dict[int, np.ndarray]) -> tuple:
    """The row with its final reward (async judging: the one that replaced the provisional reward)."""
    obs, next_obs, action, reward, done, info, i = row
    if info.pop("reward_pending", False) and info.get("reward_step") in finals:
        reward = float(finals[info["reward_step"]][i])
    info.pop("reward_step", None)
    return obs, next_obs, action, reward, done, info
