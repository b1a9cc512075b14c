"""PPO: proximal policy optimisation with a clipped surrogate, GAE and advantage normalisation.

Discrete (categorical) and continuous (diagonal Gaussian, state-independent std) actions; optional
observation and reward normalisation and value clipping. Continuous actions are sampled in
``[-1, 1]``-scaled units, mapped to the env's bounds and clipped there; the log-probability is that
of the unclipped sample (the usual practice). Truncated episodes are bootstrapped with
``gamma * V(final_obs)``.

Optional **H-term** (``h_term_lambda > 0``), after ElegantRL's Hamiltonian term: besides the clipped
surrogate, the loss rewards the policy for keeping the actions of the rollout's *good* transitions — those
whose discounted return-to-go (GAE's ``returns``) is above the ``h_term_drop`` quantile of the rollout —
weighted by that return min-max-normalised to ``[0, 1]`` over the good ones:
``loss += -h_term_lambda * mean(w * clamp(log pi(a|s), min=-20))`` over each minibatch, where the
transitions below the floor weigh 0 (so about ``1 - h_term_drop`` of a minibatch pulls; the replay-based
agents average over a batch of good transitions only, so one ``h_term_lambda`` is a little stronger there).
ElegantRL computed this reward-weighted likelihood over stored whole episodes (windows of k steps, in a
separate buffer); podium computes it over each rollout's own transitions, so it costs no memory and no extra
pass.

Optional **gSDE** (``use_sde``, continuous actions; Raffin, Kober & Stulp 2022): instead of white Gaussian
noise with a learned state-independent std, the exploration noise is ``latent(s) @ E``, where
``latent(s)`` are the actor's last hidden features and ``E ~ N(0, sigma^2)`` an ``[L, A]`` matrix per
sub-env, drawn at each rollout's start (or every ``sde_sample_freq`` steps). For a fixed ``E`` the action
is a smooth function of the state, so an episode explores consistently instead of jittering; over ``E``
the action is Gaussian with variance ``latent^2 @ sigma^2``, which gives the log-probability PPO's ratio
uses. ``sigma`` (``[L, A]``, initialised to ``exp(init_log_std)``) is learned with the policy.

Reading order: ``PPOConfig`` (hyperparameters) -> ``PPO.__init__`` (networks) -> worker side
(``explore``/``record``) -> learner side (``learn`` then ``update``, which holds the loss).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import torch
from pydantic import Field
from torch import nn

from podium.algos.base import Agent, AgentConfig, HiddenSizes, register_algo
from podium.algos.buffers import RolloutBuffer
from podium.algos.networks import adam, mlp
from podium.algos.normalization import RewardScaler, RunningMeanStd, statistics_dtype

__all__ = ["PPO", "PPOConfig"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class PPOConfig(AgentConfig):
    """PPO hyperparameters. Defaults suit tens to thousands of sub-envs on classic control."""

    mutable: ClassVar[dict[str, tuple[float, float]]] = {
        "learning_rate": (1e-5, 1e-2),
        "ent_coef": (0.0, 0.05),
        "clip_coef": (0.05, 0.5),
        "gae_lambda": (0.8, 0.99),
    }
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {"use_sde": (False, True)}
    shape: ClassVar[frozenset[str]] = frozenset({"use_sde"})  # gSDE's sigma replaces log_std
    alternatives: ClassVar[tuple[frozenset[str], ...]] = (frozenset({"num_steps", "rollout_size"}),)

    num_steps: int = Field(default=32, gt=0)
    """Env steps per sub-env per rollout (the rollout holds ``num_steps * num_envs`` transitions)."""
    rollout_size: int | None = Field(default=None, gt=0)
    """If set, the rollout's total size instead: ``num_steps = ceil(rollout_size / num_envs)``, so the
    same setting works with 4 or 4,096 sub-envs."""
    learning_rate: float = Field(default=3e-4, gt=0)
    """Adam step size for actor and critic."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the pod's step budget (needs a step budget): the step size is
    ``learning_rate * (1 - steps / budget)``, so resuming with a larger budget raises it to that fraction of the
    new total (as SB3's schedules do when training continues)."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    """GAE lambda (bias/variance trade-off of the advantage)."""
    num_minibatches: int = Field(default=4, gt=0)
    """Minibatches per epoch: minibatch size = ``num_steps * num_envs / num_minibatches``."""
    update_epochs: int = Field(default=4, gt=0)
    """Passes over each rollout."""
    clip_coef: float = Field(default=0.2, gt=0)
    """Surrogate clipping range epsilon: the ratio is clipped to ``[1 - eps, 1 + eps]``."""
    clip_vloss: bool = False
    """Clip the value update around the old value estimate with the same epsilon."""
    ent_coef: float = Field(default=0.0, ge=0)
    """Entropy bonus coefficient."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Value loss coefficient."""
    max_grad_norm: float = Field(default=0.5, gt=0)
    """Global gradient-norm clip."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    target_kl: float | None = Field(default=None, gt=0)
    """Stop the epoch loop early when the approximate KL exceeds this (None: never)."""
    normalize_obs: bool = False
    """Normalise observations with running statistics (saved in checkpoints)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return."""
    hidden_sizes: HiddenSizes = (64, 64)
    """Hidden layer widths of actor and critic."""
    activation: str = "tanh"
    """Hidden activation (tanh, relu, elu, silu)."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    ortho_init: bool = True
    """Orthogonal initial weights (gain sqrt 2 in hidden layers, 0.01 for the policy head, 1 for the value
    head) and zero biases, as CleanRL and SB3 do by default; False keeps PyTorch's default init (SB3's
    ``ortho_init=False``, which rl-zoo's tuned MuJoCo entries use)."""
    h_term_lambda: float = Field(default=0.0, ge=0)
    """Weight of the H-term (module docstring); 0 = off. ElegantRL's default was 2^-3 = 0.125."""
    h_term_drop: float = Field(default=0.25, ge=0, lt=1)
    """The H-term ignores this lowest fraction of each rollout's transitions by return-to-go."""
    use_sde: bool = False
    """Generalised state-dependent exploration (gSDE, continuous actions; module docstring): the noise is
    ``latent(s) @ E`` for a matrix ``E ~ N(0, sigma^2)`` per sub-env that is drawn anew every
    ``sde_sample_freq`` steps, so exploration is smooth along a trajectory instead of white noise."""
    sde_sample_freq: int = Field(default=-1, ge=-1)
    """Env steps between two draws of the gSDE noise matrices; -1 (default): once per rollout."""


def _gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``log N(actions; mean, exp(log_std)^2)`` summed over the action dimensions ``[B]``."""
    return (-0.5 * ((actions - mean) / log_std.exp()).square() - log_std - _LOG_SQRT_2PI).sum(-1)


@register_algo
class PPO(Agent):
    """Proximal policy optimisation (Schulman et al. 2017) for Discrete and Box action spaces."""

    name: ClassVar[str] = "ppo"
    Config: ClassVar[type[AgentConfig]] = PPOConfig
    on_policy: ClassVar[bool] = True
    added_modules: ClassVar[dict[str, str]] = {"log_std": "init_log_std"}
    config: PPOConfig

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box | gym.spaces.Discrete,
        config: PPOConfig,
        num_envs: int,
        device: torch.device,
    ) -> None:
        super().__init__(observation_space, action_space, config, num_envs, device)
        c = config
        ortho = c.ortho_init
        self.actor = mlp(self.obs_dim, c.hidden_sizes, self.action_dim, c.activation, out_gain=0.01, orthogonal=ortho)
        self.critic = mlp(self.obs_dim, c.hidden_sizes, 1, c.activation, out_gain=1.0, orthogonal=ortho)
        self.actor, self.critic = self.actor.to(device), self.critic.to(device)
        # state-independent log standard deviation of the Gaussian policy: a module of its own so that
        # checkpoints, parameter fusion and evaluation snapshots carry it like any network
        self.log_std_module = nn.ParameterDict(
            {"log_std": torch.full((self.action_dim,), c.init_log_std, device=device)}
        )
        self.log_std = self.log_std_module["log_std"]
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.use_sde = c.use_sde and not self.discrete
        if self.use_sde:  # gSDE: log sigma of each (latent feature, action) weight of the noise matrices
            latent = c.hidden_sizes[-1] if c.hidden_sizes else self.obs_dim
            self.sde_module = nn.ParameterDict(
                {"log_std": torch.full((latent, self.action_dim), c.init_log_std, device=device)}
            )
            params.append(self.sde_module["log_std"])
            self.noise_matrices = torch.zeros(num_envs, latent, self.action_dim, device=device)
            self.sde_steps = 0  # explore calls since the last draw of the noise matrices
        elif not self.discrete:
            params.append(self.log_std)
        self.optimizer = adam(params, c.learning_rate, device, eps=1e-5)
        stats = statistics_dtype(device)  # float64, but mps has none
        self.obs_rms = RunningMeanStd((self.obs_dim,), dtype=stats).to(device)
        self.reward_scaler = RewardScaler(num_envs, c.gamma, dtype=stats).to(device)
        self.generator = torch.Generator(device=device)
        self.lr_fraction = 1.0  # set by the pod when anneal_lr is on

    # ----------------------------------------------------------------- policy
    def _norm(self, obs: torch.Tensor) -> torch.Tensor:
        return self.obs_rms.normalize(obs) if self.config.normalize_obs else obs

    def _log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``actions`` and entropy of the policy at ``obs`` (both ``[B]``)."""
        if self.use_sde:
            mean, log_std = self._sde_mean_log_std(obs)
            return _gaussian_log_prob(actions, mean, log_std), (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)
        out = self.actor(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), entropy
        std = self.log_std.exp()
        logp = (-0.5 * ((actions - out) / std).square() - self.log_std - _LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + _LOG_SQRT_2PI + self.log_std).sum().expand(out.shape[0])
        return logp, entropy

    def _sde_latent(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """gSDE: the actor's mean ``[B, A]`` and its last hidden features ``[B, L]`` (detached: exploration
        does not train the features, as in the paper's default)."""
        latent = self.actor[:-1](obs)
        return self.actor[-1](latent), latent.detach()

    def _sde_mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """gSDE's mean and log std ``[B, A]``: ``latent @ E`` with ``E ~ N(0, sigma^2)`` has variance
        ``latent^2 @ sigma^2`` per action."""
        mean, latent = self._sde_latent(obs)
        return mean, self._sde_log_std(latent)

    def _sde_log_std(self, latent: torch.Tensor) -> torch.Tensor:
        """gSDE's log std ``[B, A]`` for (detached) features ``latent [B, L]``."""
        return 0.5 * torch.log(latent.square() @ (2 * self.sde_module["log_std"]).exp() + 1e-6)

    def _draw_noise_matrices(self, rows: int) -> torch.Tensor:
        """``rows`` gSDE noise matrices ``E ~ N(0, sigma^2)`` ``[rows, L, A]``."""
        sigma = self.sde_module["log_std"].exp()
        return sigma * torch.randn((rows, *sigma.shape), device=sigma.device, generator=self.generator)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        obs = self._norm(obs)
        if deterministic:
            out = self.actor(obs)
            return out.argmax(-1) if self.discrete else self._to_env(out)
        return self._to_env(self._sample(obs)[0]) if not self.discrete else self._sample(obs)[0]

    def _sample(self, obs: torch.Tensor, matrices: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions (policy units) and their log-probabilities for normalised ``obs``. gSDE uses the
        noise ``matrices`` ``[B, L, A]`` given (the worker's sub-envs: their current ones), else fresh ones."""
        out = self.actor(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            u = torch.rand(out.shape, device=out.device, generator=self.generator)
            actions = (logp_all - torch.log(-torch.log(u))).argmax(-1)  # Gumbel-max sampling
            return actions, logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        if self.use_sde:
            mean, latent = self._sde_latent(obs)
            if matrices is None:  # not the worker's batch (e.g. a stochastic evaluation): matrices of its own
                matrices = self._draw_noise_matrices(obs.shape[0])
            actions = mean + (latent.unsqueeze(-1) * matrices).sum(1)  # latent @ E per row
            return actions, _gaussian_log_prob(actions, mean, self._sde_log_std(latent))
        std = self.log_std.exp()
        noise = torch.randn(out.shape, device=out.device, generator=self.generator)
        actions = out + std * noise
        logp = (-0.5 * noise.square() - self.log_std - _LOG_SQRT_2PI).sum(-1)
        return actions, logp

    def _to_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Policy units -> env bounds, clipped."""
        low, high = self.action_bias - self.action_scale, self.action_bias + self.action_scale
        return torch.clamp(self.scale_action(actions), low, high)

    # ----------------------------------------------------------------- worker side
    @property
    def rollout_steps(self) -> int:
        if self.config.rollout_size is not None:
            return -(-self.config.rollout_size // self.num_envs)  # ceil
        return self.config.num_steps

    @property
    def gradient_batch(self) -> int:
        return max(1, self.rollout_steps * self.num_envs // self.config.num_minibatches)

    def make_buffer(self) -> RolloutBuffer:
        shape, dtype = ((), torch.long) if self.discrete else ((self.action_dim,), torch.float32)
        return RolloutBuffer(self.rollout_steps, self.num_envs, self.obs_dim, shape, dtype, self.device)

    def explored(self, obs: torch.Tensor) -> None:
        if self.config.normalize_obs:
            self.obs_rms.update(obs)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self.explored(obs)
        if self.use_sde:  # a new draw at each rollout's start, or every sde_sample_freq steps
            every = self.config.sde_sample_freq if self.config.sde_sample_freq > 0 else self.rollout_steps
            if self.sde_steps % every == 0:
                self.noise_matrices = self._draw_noise_matrices(obs.shape[0])
            self.sde_steps += 1
        nobs = self._norm(obs)
        actions, logp = self._sample(nobs, self.noise_matrices if self.use_sde else None)
        value = self.critic(nobs).squeeze(-1)
        env_actions = actions if self.discrete else self._to_env(actions)
        return env_actions, {"policy_actions": actions, "logprob": logp, "value": value, "nobs": nobs}

    @torch.no_grad()
    def record(
        self,
        buffer: RolloutBuffer,
        obs: torch.Tensor,
        actions: torch.Tensor,
        extras: dict[str, torch.Tensor],
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor,
    ) -> None:
        done = terminated | truncated
        if self.config.normalize_reward:
            reward = self.reward_scaler.scale(reward, done)
        # bootstrap cut-off episodes from the value of their last observation; a step that is both
        # terminated and truncated ended for real and is not bootstrapped (branch-free off the CPU: no
        # host sync per step)
        cut = truncated & ~terminated
        if self.device.type != "cpu" or bool(cut.any()):
            final_value = self.critic(self._norm(final_obs)).squeeze(-1)
            reward = torch.where(cut, reward + self.config.gamma * final_value, reward)
        buffer.add(extras["nobs"], extras["policy_actions"], extras["logprob"], extras["value"], reward, done.float())

    # ----------------------------------------------------------------- learner side
    def learn(self, buffer: RolloutBuffer, next_obs: torch.Tensor) -> dict[str, float]:
        c = self.config
        with torch.no_grad():
            buffer.compute_gae(self.critic(self._norm(next_obs)).squeeze(-1), c.gamma, c.gae_lambda)
        for group in self.optimizer.param_groups:
            group["lr"] = c.learning_rate * self.lr_fraction
        data = buffer.flat()
        if c.h_term_lambda > 0:  # the H-term's weight per transition: 0 below the drop quantile
            ret = data["returns"]
            floor = _quantile(ret, c.h_term_drop) if c.h_term_drop > 0 else ret.min()
            top = ret.max()
            data["h_weight"] = torch.where(ret >= floor, (ret - floor) / (top - floor).clamp_min(1e-8), 0.0)
        n, size = data["obs"].shape[0], self.gradient_batch
        stats: list[dict[str, torch.Tensor]] = []
        for _ in range(c.update_epochs):
            perm = torch.randperm(n, device=self.device, generator=self.generator)
            for start in range(0, n - size + 1, size):
                idx = perm[start : start + size]
                stats.append(self.update({k: v[idx] for k, v in data.items()}))
            if c.target_kl is not None and float(stats[-1]["approx_kl"]) > c.target_kl:
                break
            if self.stop_early is not None and self.stop_early():  # the pod's target is confirmed: it stops
                break
        buffer.reset()
        keys = stats[0].keys()
        means = torch.stack([torch.stack([s[k] for s in stats]).mean() for k in keys]).tolist()  # one host sync
        out = dict(zip(keys, means, strict=True))
        var_y = data["returns"].var()
        out["explained_variance"] = float(1 - (data["returns"] - data["values"]).var() / var_y) if var_y > 0 else 0.0
        return out

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        new_logp, entropy = self._log_prob_entropy(batch["obs"], batch["actions"])
        log_ratio = new_logp - batch["logprobs"]
        ratio = log_ratio.exp()
        adv = batch["advantages"]
        if c.norm_adv and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        # clipped surrogate objective (as a loss to minimise)
        pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - c.clip_coef, 1 + c.clip_coef)).mean()
        value = self.critic(batch["obs"]).squeeze(-1)
        if c.clip_vloss:
            clipped = batch["values"] + (value - batch["values"]).clamp(-c.clip_coef, c.clip_coef)
            v_loss = 0.5 * torch.max((value - batch["returns"]).square(), (clipped - batch["returns"]).square()).mean()
        else:
            v_loss = 0.5 * (value - batch["returns"]).square().mean()
        entropy_mean = entropy.mean()
        loss = pg_loss - c.ent_coef * entropy_mean + c.vf_coef * v_loss
        h_term = torch.zeros((), device=loss.device)
        if "h_weight" in batch:  # reward-weighted likelihood of the good transitions' actions
            h_term = (batch["h_weight"] * new_logp.clamp_min(-20.0)).mean()
            loss = loss - c.h_term_lambda * h_term
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.optimizer.param_groups[0]["params"], c.max_grad_norm, foreach=True)
        self.optimizer.step()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()
            clipfrac = ((ratio - 1).abs() > c.clip_coef).float().mean()
        return {
            "loss/policy": pg_loss.detach(),
            "loss/value": v_loss.detach(),
            "loss/entropy": entropy_mean.detach(),
            "loss/h_term": h_term.detach(),
            "approx_kl": approx_kl,
            "clipfrac": clipfrac,
        }

    # ----------------------------------------------------------------- persistence
    def modules(self) -> dict[str, nn.Module]:
        modules = {
            "actor": self.actor,
            "log_std": self.log_std_module,
            "critic": self.critic,
            "obs_rms": self.obs_rms,
            "reward_scaler": self.reward_scaler,
        }
        if self.use_sde:
            modules["sde_log_std"] = self.sde_module
        return modules

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}


def _quantile(x: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(x, q)`` for a flat tensor of any size (``torch.quantile`` refuses more than 2**24
    elements, a rollout of 65,536 sub-envs x 256 steps; beyond that: the nearest order statistic below)."""
    if x.numel() <= 2**24:
        return torch.quantile(x, q)
    return x.kthvalue(max(1, math.floor(q * (x.numel() - 1)) + 1)).values
