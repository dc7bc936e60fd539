"""Behaviour cloning from the demo store: the demonstrations used as a policy, not only as replay rows.

Kept as rows alone (train/demos.py), 50 scripted episodes barely move SAC on place_cup_in_bin: the critic has to
learn their value before the actor follows them, and SAC's first `learning_starts` steps act at random. These pieces
use the demonstrations' actions too, all outside SAC's own training loop:

* `StandardizedObs`: the policy's and critics' inputs standardised with the demos' statistics and clipped to
  ±`CLIP` (SB3's VecNormalize clips at 10 too). The observation mixes table-scale positions with centimetre
  offsets and constant slots; unscaled, the same 4k-step clone of place_cup_in_bin's expert succeeds in 0 of 30
  episodes, standardised in 30 of 30 (benchmarks/clone_check.py). The scale of a slot is floored at `MIN_STD`
  (5 cm), so a slot the demos never move (an absent object, a cup that only ever stood) is not blown up when it
  does move; a 1 mm floor cloned tidy_table no better (0.24 vs 0.32, 3 fits each) and one of three place_cup_in_bin
  runs with it collapsed to 0.0 at the end (with it a cup's tilt of ~2° reads ±10: a likely cause, not shown). The statistics are
  buffers of the features extractor, so they are saved in policy.pth and a loaded policy reads observations the
  same way.
* `clone_actor` (`demo_bc.pretrain_steps`): before learning, the actor's Gaussian is fitted to the demos: its
  squashed mean tanh(μ) to the demo action by squared error, log-σ to log `demo_bc.std` (a fixed exploration
  width: the residual of a scripted expert is ~0, and a collapsed σ leaves SAC nothing to explore with). The
  cloned actor acts from `demo_bc.learning_starts` on. Why the squashed action: on tidy_table (three
  pick-and-places) the actor fitted in pre-tanh space (μ → atanh of the action clipped to ±0.97) succeeded in
  3 % of episodes (3 fits, benchmarks/clone_actor.py), fitted to the squashed action in 32 % (0.20–0.40) — most
  expert actions are saturated at ±1, and a pre-tanh loss spends the fit on hitting atanh(0.97) there rather
  than on the fine moves near a grasp; place_cup_in_bin 0.91 → 1.00, push_tool_from_edge 1.00 either way.
* `select_clone` (`demo_bc.select_fits`): the clone fitted K times from fresh initialisations and the fit that
  succeeds most on validation rollouts kept; fits of one demo set range 0.03–0.80 on tidy_table.
* `DemoBCCallback`: for `demo_bc.critic_warmup` steps after `learning_starts` the actor is held still while SAC's
  critics learn the clone's values (released at once, an untrained critic's gradient wiped the clone out within
  1k updates); then (`demo_bc.weight`), after every SAC update, one actor step on the Q-filtered behaviour-cloning
  loss of Nair et al. (2018, "Overcoming Exploration in RL with Demonstrations"): on a batch of demo rows,
  ‖π(s) − a_demo‖² where the critic rates the demo's action above the actor's, so the pull toward the demos
  switches itself off where the agent has found better (`demo_bc.q_filter false`: on every demo row). Its share
  of demo rows that passed the filter is logged (`train/bc_q_filter_pass`), with the loss (`train/bc_loss`).
* `ClonePolicy` (`demo_bc.keep_clone`): SB3's SAC policy plus a frozen copy of the clone; it acts, in training and
  in evaluation, with whichever of the actor's and the clone's action the critics rate higher — the action
  selection of IBRL (Hu et al., 2023, "Imitation Bootstrapped Reinforcement Learning"). Why: on tidy_table the
  clone succeeds in 0.8 of evaluation episodes and SAC's first 2k actor updates take it to 0.0–0.1, even with a
  BC weight of 1000 that keeps the actor's error on the demo rows at the clone's level (the drift is on the states
  the demos never show); continued BC alone does not lose it (docs/BENCHMARKS.md). With the clone kept, the policy
  leaves it only where the critics expect better — which did not keep tidy_table's clone either (the critics are
  the weak part there), and on place_cup_in_bin ended at 0.93 against 0.90 without it (3 seeds): off by default.
  Unlike IBRL the critics' bootstrap target stays SAC's own (the actor's next action): changing it would mean
  rewriting SAC's train step. The share of steps that acted with the clone is logged (`train/clone_chosen`).
* `ResidualPolicy` (`demo_bc.residual`): the clone frozen as a base, the actor a residual of at most ±scale around
  it (`ResidualActor`). Fine-tuning can then bend the clone's actions but not replace them: place_cup_in_bin's
  end-of-run dips went away (3 seeds); tidy_table's clone is lost even within ±0.2 (docs/BENCHMARKS.md).
"""
from __future__ import annotations

import copy
from typing import Callable

import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.sac.policies import Actor, SACPolicy

MIN_STD = 0.05  # floor of a slot's scale (module doc)
CLIP = 10.0  # bound of a standardised input: a slot the demos never moved reads ±CLIP once it moves by CLIP × MIN_STD


class StandardizedObs(BaseFeaturesExtractor):
    """Flattened observation, (x − mean) / std; the identity until `standardize_inputs` sets the statistics."""

    def __init__(self, observation_space: spaces.Space):
        super().__init__(observation_space, get_flattened_obs_dim(observation_space))
        self.register_buffer("mean", th.zeros(self.features_dim))
        self.register_buffer("std", th.ones(self.features_dim))

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return ((th.flatten(observations, start_dim=1) - self.mean) / self.std).clamp(-CLIP, CLIP)


def standardize_inputs(model) -> None:
    """Set every `StandardizedObs` of a SAC model (actor, critic, target critic) to the demo observations' mean and
    standard deviation (floored at MIN_STD)."""
    demos = _demos(model)
    obs = th.as_tensor(demos.observations[: demos.size()].reshape(demos.size(), -1), dtype=th.float32)
    mean, std = obs.mean(dim=0), obs.std(dim=0).clamp_min(MIN_STD)
    for net in (model.actor, model.critic, model.critic_target):
        extractor = net.features_extractor
        if not isinstance(extractor, StandardizedObs):
            raise ValueError("demo_bc: the policy's features extractor is not StandardizedObs")
        extractor.mean.copy_(mean)
        extractor.std.copy_(std)


def _demos(model):
    demos = getattr(model.replay_buffer, "demos", None)
    if demos is None or demos.size() == 0:
        raise ValueError("demo_bc: the replay buffer holds no demonstrations (set demos > 0)")
    return demos


def clone_actor(model, steps: int, std: float, batch_size: int = 256, lr: float = 1e-3) -> dict:
    """Fit `model.actor` (SB3 SAC) to the demo store for `steps` gradient steps (module doc); returns the first and
    last loss and the cloned action's mean squared error on the demos."""
    demos, actor = _demos(model), model.actor
    opt = th.optim.Adam(actor.parameters(), lr=lr)  # its own: SAC's optimiser state starts clean afterwards
    target_log_std = float(th.log(th.tensor(std)))
    actor.set_training_mode(True)
    first = last = float("nan")
    for i in range(steps):
        batch = demos.sample(batch_size)
        mean, log_std, _ = actor.get_action_dist_params(batch.observations)
        loss = ((th.tanh(mean) - batch.actions) ** 2).mean() + ((log_std - target_log_std) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = float(loss.detach())
        first = last if i == 0 else first
    actor.set_training_mode(False)
    with th.no_grad():
        batch = demos.sample(min(2048, demos.size()))
        mse = float(((actor(batch.observations, deterministic=True) - batch.actions) ** 2).mean())
    return {"bc_steps": steps, "bc_first_loss": first, "bc_last_loss": last, "bc_action_mse": mse}


def select_clone(model, steps: int, std: float, fits: int, validate: Callable[[], float], seed: int = 0) -> dict:
    """`clone_actor` `fits` times from fresh initialisations (torch seeds seed·1000 + k) and keep the fit whose
    `validate()` — its success rate on validation rollouts in the simulator — is highest (the first of equals).
    Why: fits of the same demos differ far more than their losses do; on tidy_table five 512×512×512 fits of one
    demo set succeeded in 0.70 / 0.20 / 0.03 / 0.10 / 0.80 of 30 test episodes, and 10 validation episodes ranked
    them alike (0.9 / 0.2 / 0.0 / 0.0 / 0.7; docs/BENCHMARKS.md). One fit: no rollouts, `clone_actor` alone."""
    if fits <= 1:
        return clone_actor(model, steps, std)
    best, runs = None, []
    for k in range(fits):
        th.manual_seed(seed * 1000 + k)
        for layer in model.actor.modules():
            if layer is not model.actor and hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
        stats = clone_actor(model, steps, std)
        runs.append({"success": float(validate()), "bc_action_mse": stats["bc_action_mse"]})
        if best is None or runs[-1]["success"] > runs[best[0]]["success"]:
            best = (k, copy.deepcopy(model.actor.state_dict()), stats)
    k, state, stats = best
    model.actor.load_state_dict(state)
    return {**stats, "clone_fits": runs, "clone_chosen_fit": k}


class ClonePolicy(SACPolicy):
    """SAC's MlpPolicy with a frozen copy of the cloned actor, acting with the action the critics rate higher (module
    doc). Until `keep_clone` is called it is SAC's MlpPolicy; the copy and its switch are saved in policy.pth."""

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self.clone = self.make_actor()
        self.clone.requires_grad_(False)
        self.register_buffer("clone_kept", th.zeros((), dtype=th.bool))
        self.acted = self.clone_chosen = 0  # counters for train/clone_chosen

    def keep_clone(self) -> None:
        """Freeze the actor as it is now (right after `clone_actor`) as the clone."""
        self.clone.load_state_dict(self.actor.state_dict())
        self.clone_kept.fill_(True)

    def _predict(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        action = self.actor(observation, deterministic)
        if not bool(self.clone_kept):
            return action
        clone = self.clone(observation, deterministic=True)
        q_actor = th.min(th.cat(self.critic(observation, action), dim=1), dim=1, keepdim=True).values
        q_clone = th.min(th.cat(self.critic(observation, clone), dim=1), dim=1, keepdim=True).values
        use_clone = q_clone > q_actor
        self.acted += len(use_clone)
        self.clone_chosen += int(use_clone.sum())
        return th.where(use_clone, clone, action)


class ResidualActor(Actor):
    """SB3's SAC actor whose action, once `keep_base` has run, is clip(base(s) + scale × its own action): `base` is a
    frozen copy of the clone, and the actor — its mean layer zeroed then — learns a residual around it (residual
    policy learning, Silver et al. 2018; Johannink et al. 2019). SAC trains it unmodified: `forward` and
    `action_log_prob` both give the composed action, so the replay buffer, the critics and the actor loss all see
    the action the env gets; the log-probability is the residual's (a constant shift of the composed one's, which
    the entropy coefficient absorbs). What it is for: SAC's updates take tidy_table's clone from 0.8 to 0.0 within
    2k actor updates (module doc) — here they can move the action at most `scale` from the clone's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.base = Actor(*args, **kwargs)  # shares the features extractor (StandardizedObs: buffers, no weights)
        self.base.requires_grad_(False)
        self.register_buffer("scale", th.zeros(()))  # 0 until keep_base: the actor alone, as clone_actor fits it

    def keep_base(self, scale: float) -> None:
        """The actor as it is now (the clone) becomes the frozen base; the residual starts at zero."""
        own = {k: v for k, v in self.state_dict().items() if not k.startswith("base.") and k != "scale"}
        self.base.load_state_dict(own)
        with th.no_grad():
            self.mu.weight.zero_()
            self.mu.bias.zero_()
        self.scale.fill_(scale)

    def _compose(self, obs: th.Tensor, residual: th.Tensor) -> th.Tensor:
        if float(self.scale) == 0.0:
            return residual
        with th.no_grad():
            base = self.base(obs, deterministic=True)
        return (base + self.scale * residual).clamp(-1.0, 1.0)

    def forward(self, obs: th.Tensor, deterministic: bool = False) -> th.Tensor:
        return self._compose(obs, super().forward(obs, deterministic))

    def action_log_prob(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        action, log_prob = super().action_log_prob(obs)
        return self._compose(obs, action), log_prob


class ResidualPolicy(SACPolicy):
    """SAC's MlpPolicy with a `ResidualActor` (`demo_bc.residual`); the base and its scale are saved in policy.pth."""

    def make_actor(self, features_extractor=None) -> ResidualActor:
        actor_kwargs = self._update_features_extractor(self.actor_kwargs, features_extractor)
        return ResidualActor(**actor_kwargs).to(self.device)


class DemoBCCallback(BaseCallback):
    """Holds the cloned actor still while the critic warms up, then one Q-filtered behaviour-cloning step of the
    actor after each SAC update (module doc)."""

    def __init__(self, weight: float, critic_warmup: int = 0, batch_size: int = 128, q_filter: bool = True):
        super().__init__()
        self.weight, self.critic_warmup, self.batch_size, self.q_filter = weight, critic_warmup, batch_size, q_filter
        self.steps = 0
        self._held: bool | None = None

    def _on_step(self) -> bool:
        model = self.model
        warming = model.num_timesteps <= model.learning_starts + self.critic_warmup
        if warming != self._held:  # SAC's actor step finds no gradient to apply while the actor is held
            model.actor.requires_grad_(not warming)
            self._held = warming
        self._log_clone_share(model.policy)
        if warming or self.weight <= 0:
            return True  # the critic is still learning the clone's values: nothing to filter with yet
        batch = _demos(model).sample(self.batch_size)
        obs, demo_action = batch.observations, batch.actions
        actor = model.actor
        with th.no_grad():
            if self.q_filter:
                q_demo = th.min(th.cat(model.critic(obs, demo_action), dim=1), dim=1).values
                q_actor = th.min(th.cat(model.critic(obs, actor(obs, deterministic=True)), dim=1), dim=1).values
                keep = (q_demo > q_actor).float()
            else:
                keep = th.ones(len(obs), device=obs.device)
        action = actor(obs, deterministic=True)
        per_row = ((action - demo_action) ** 2).sum(dim=1)
        loss = self.weight * (keep * per_row).sum() / max(1.0, float(keep.sum()))
        actor.optimizer.zero_grad()
        loss.backward()
        actor.optimizer.step()
        self.steps += 1
        if self.steps % 100 == 0:
            self.logger.record_mean("train/bc_loss", float(loss.detach()))
            self.logger.record_mean("train/bc_q_filter_pass", float(keep.mean()))
        return True

    def _log_clone_share(self, policy) -> None:
        if isinstance(policy, ClonePolicy) and policy.acted >= 100:
            self.logger.record_mean("train/clone_chosen", policy.clone_chosen / policy.acted)
            policy.acted = policy.clone_chosen = 0
