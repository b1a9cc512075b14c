"""Preallocated, contiguous tensor buffers on the env's device (the paper's replay buffer in device memory).

Every ``add`` writes one step of all ``N`` sub-envs at once; nothing loops over transitions.
"""

from __future__ import annotations

import torch

__all__ = ["GoodEpisodes", "ReplayBuffer", "RolloutBuffer"]


class RolloutBuffer:
    """On-policy storage for ``T`` steps of ``N`` sub-envs: tensors shaped ``[T, N, ...]``.

    Holds observations, actions, log-probabilities, value estimates, rewards (already including
    the bootstrap ``gamma * V(final_obs)`` on truncation) and ``dones`` (episode ended at this step).
    """

    def __init__(
        self,
        steps: int,
        num_envs: int,
        obs_dim: int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        t, n = steps, num_envs
        self.steps, self.num_envs = steps, num_envs
        self.obs = torch.zeros(t, n, obs_dim, device=device)
        self.actions = torch.zeros(t, n, *action_shape, dtype=action_dtype, device=device)
        self.logprobs = torch.zeros(t, n, device=device)
        self.values = torch.zeros(t, n, device=device)
        self.rewards = torch.zeros(t, n, device=device)
        self.dones = torch.zeros(t, n, device=device)
        self.advantages = torch.zeros(t, n, device=device)
        self.returns = torch.zeros(t, n, device=device)
        self.pos = 0

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        logprob: torch.Tensor,
        value: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
    ) -> None:
        if self.pos >= self.steps:
            raise RuntimeError("RolloutBuffer is full; call compute_gae() and reset() before adding more")
        i = self.pos
        self.obs[i], self.actions[i], self.logprobs[i] = obs, actions, logprob
        self.values[i], self.rewards[i], self.dones[i] = value, reward, done
        self.pos += 1

    @torch.no_grad()
    def compute_gae(self, last_value: torch.Tensor, gamma: float, lam: float) -> None:
        """Generalised advantage estimation over the ``T`` steps (a loop over time, batched over envs)."""
        next_value, gae = last_value, torch.zeros_like(last_value)
        for t in reversed(range(self.steps)):
            not_done = 1.0 - self.dones[t]
            delta = self.rewards[t] + gamma * next_value * not_done - self.values[t]
            gae = delta + gamma * lam * not_done * gae
            self.advantages[t] = gae
            next_value = self.values[t]
        torch.add(self.advantages, self.values, out=self.returns)

    def reset(self) -> None:
        self.pos = 0

    def flat(self) -> dict[str, torch.Tensor]:
        """All ``T * N`` samples, flattened: the learner's dataset for this phase."""
        return {
            "obs": self.obs.flatten(0, 1),
            "actions": self.actions.flatten(0, 1),
            "logprobs": self.logprobs.flatten(),
            "values": self.values.flatten(),
            "advantages": self.advantages.flatten(),
            "returns": self.returns.flatten(),
        }


_REPLAY_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")


class ReplayBuffer:
    """Circular off-policy storage of ``capacity`` transitions in contiguous tensors.

    Each :meth:`add` writes the ``N`` transitions of one batched step; :meth:`sample` draws a uniform
    batch. ``next_obs`` is the true next observation (``final_obs`` for finished episodes) and
    ``terminated`` only marks real terminations, so truncated episodes are bootstrapped.
    """

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity, self.device = capacity, device
        self.obs = torch.zeros(capacity, obs_dim, device=device)
        self.next_obs = torch.zeros(capacity, obs_dim, device=device)
        self.actions = torch.zeros(capacity, *action_shape, dtype=action_dtype, device=device)
        self.rewards = torch.zeros(capacity, device=device)
        self.terminated = torch.zeros(capacity, device=device)
        self.pos, self.size = 0, 0
        self.good: GoodEpisodes | None = None
        """The H-term's episodes (set by an agent whose ``h_term_lambda`` is positive), saved and restored with
        the transitions: a resumed pod, or a tournament member's next round, keeps the episodes that worked."""

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> None:
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(f"a batch of {n} transitions does not fit a replay buffer of {self.capacity}")
        idx = (torch.arange(n, device=self.device) + self.pos) % self.capacity
        self.obs[idx], self.actions[idx], self.rewards[idx] = obs, actions, reward
        self.next_obs[idx], self.terminated[idx] = next_obs, terminated.to(self.terminated.dtype)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The stored transitions, oldest first: ``obs [size, obs_dim]``, ``actions [size, ...]``,
        ``rewards [size]``, ``next_obs [size, obs_dim]``, ``terminated [size]``; with the H-term on, also
        its memory under ``good.*`` keys (:meth:`GoodEpisodes.state_dict`)."""
        state = {
            name: getattr(self, name)[_oldest_first(self.pos, self.size, self.capacity, self.device)]
            for name in _REPLAY_FIELDS
        }
        if self.good is not None:
            state.update({f"good.{k}": v for k, v in self.good.state_dict().items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Replace the contents with ``state`` (from :meth:`state_dict`); keeps the newest ``capacity``. The
        H-term's memory is restored when both sides have one (a buffer saved without it keeps its own empty)."""
        shapes = {name: tuple(getattr(self, name).shape[1:]) for name in _REPLAY_FIELDS}
        got = {name: tuple(state[name].shape[1:]) for name in _REPLAY_FIELDS if name in state}
        if got != shapes:
            raise ValueError(f"replay buffer state has shapes {got}, this buffer stores {shapes}")
        good = {k[len("good.") :]: v for k, v in state.items() if k.startswith("good.")}
        if self.good is not None and good:
            self.good.load_state_dict(good)
        self.pos, self.size = 0, 0
        keep = min(int(state["rewards"].shape[0]), self.capacity)
        if keep == 0:
            return
        recent = {name: state[name][-keep:].to(self.device) for name in _REPLAY_FIELDS}
        self.add(recent["obs"], recent["actions"], recent["rewards"], recent["next_obs"], recent["terminated"])

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "terminated": self.terminated[idx],
        }


class GoodEpisodes:
    """The off-policy H-term's memory: the transitions of recent *good* episodes, each with its discounted
    return-to-go (what a replay buffer of single transitions cannot know).

    Every sub-env's current episode is staged, at most ``max_len`` steps of it (a longer episode is cut into
    segments of ``max_len`` steps, each scored on its own). When a sub-env's episode or segment ends, the
    return-to-go of each of its steps, ``G_t = sum_{k >= t} gamma^(k - t) r_k``, comes from one matrix
    product with a ``[max_len, max_len]`` discount table, for all the sub-envs that ended together. The
    episode is kept when its (undiscounted) return is at or above the ``drop`` quantile of the last
    ``history`` returns, its own included; its transitions then enter a ring of ``capacity`` transitions.

    Args:
        num_envs: sub-envs recorded at each step.
        max_len: longest stretch of one episode scored at once (memory: ``num_envs * max_len`` staged steps).
        capacity: good transitions kept (the oldest are overwritten).
        obs_dim, action_shape, action_dtype: as the replay buffer's.
        gamma: discount of the return-to-go.
        drop: fraction of recent episodes, the lowest by return, whose transitions are not kept.
        device: where everything lives.
        history: recent episode returns the ``drop`` quantile is taken over.
    """

    def __init__(
        self,
        num_envs: int,
        max_len: int,
        capacity: int,
        obs_dim: int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        gamma: float,
        drop: float,
        device: torch.device,
        history: int = 100,
    ) -> None:
        self.max_len, self.capacity, self.drop, self.device = max_len, capacity, drop, device
        n, m = num_envs, max_len
        self.stage_obs = torch.zeros(n, m, obs_dim, device=device)
        self.stage_actions = torch.zeros(n, m, *action_shape, dtype=action_dtype, device=device)
        self.stage_rewards = torch.zeros(n, m, device=device)
        self.length = torch.zeros(n, dtype=torch.long, device=device)
        steps = torch.arange(m, device=device)
        lag = steps[:, None] - steps[None, :]  # [k, t]: k - t
        self.discount = torch.where(lag >= 0, gamma ** lag.clamp_min(0).float(), 0.0)  # G = rewards @ discount
        self.returns = torch.zeros(history, device=device)  # recent episode returns (a ring)
        self.episodes = 0
        self.obs = torch.zeros(capacity, obs_dim, device=device)
        self.actions = torch.zeros(capacity, *action_shape, dtype=action_dtype, device=device)
        self.return_to_go = torch.zeros(capacity, device=device)
        self.pos, self.size = 0, 0

    @torch.no_grad()
    def add(self, obs: torch.Tensor, actions: torch.Tensor, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Stage one step of every sub-env (``obs [N, obs_dim]``, ``actions [N, ...]``, ``reward [N]``,
        ``done [N]``: its episode ended at this step) and score the episodes that ended."""
        rows = torch.arange(obs.shape[0], device=self.device)
        self.stage_obs[rows, self.length] = obs
        self.stage_actions[rows, self.length] = actions
        self.stage_rewards[rows, self.length] = reward
        self.length += 1
        ended = done | (self.length == self.max_len)
        if bool(ended.any()):  # one host sync per step; the scoring itself runs only when something ended
            self._score(ended.nonzero().squeeze(1))

    def _score(self, envs: torch.Tensor) -> None:
        length = self.length[envs]  # [E]
        valid = torch.arange(self.max_len, device=self.device) < length[:, None]  # [E, M]
        rewards = self.stage_rewards[envs] * valid
        return_to_go = rewards @ self.discount  # [E, M]
        totals = rewards.sum(1)
        history = self.returns.shape[0]
        latest = totals[-history:]  # more episodes than the ring holds may end at once: keep the last of them
        slots = (torch.arange(len(latest), device=self.device) + self.episodes + len(envs) - len(latest)) % history
        self.returns[slots] = latest
        self.episodes += len(envs)
        recent = self.returns[: min(self.episodes, self.returns.shape[0])]
        floor = torch.quantile(recent, self.drop) if self.drop > 0 else recent.min()
        keep = valid & (totals >= floor)[:, None]  # [E, M]
        self._write(self.stage_obs[envs][keep], self.stage_actions[envs][keep], return_to_go[keep])
        self.length[envs] = 0

    def _write(self, obs: torch.Tensor, actions: torch.Tensor, return_to_go: torch.Tensor) -> None:
        n = min(obs.shape[0], self.capacity)
        if n == 0:
            return
        idx = (torch.arange(n, device=self.device) + self.pos) % self.capacity
        self.obs[idx], self.actions[idx], self.return_to_go[idx] = obs[-n:], actions[-n:], return_to_go[-n:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The good transitions held, oldest first (``obs``, ``actions``, ``return_to_go``), and the recent
        episode returns the ``drop`` quantile is taken over (``returns``, oldest first). Episodes still being
        staged are not kept: they start again."""
        order = _oldest_first(self.pos, self.size, self.capacity, self.device)
        seen = min(self.episodes, self.returns.shape[0])
        history = _oldest_first(self.episodes % self.returns.shape[0], seen, self.returns.shape[0], self.device)
        return {
            "obs": self.obs[order],
            "actions": self.actions[order],
            "return_to_go": self.return_to_go[order],
            "returns": self.returns[history],
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Replace the memory with ``state`` (from :meth:`state_dict`), keeping the newest that fit."""
        if tuple(state["obs"].shape[1:]) != tuple(self.obs.shape[1:]):
            raise ValueError(
                f"H-term memory has observations of shape {tuple(state['obs'].shape[1:])}, "
                f"this buffer stores {tuple(self.obs.shape[1:])}"
            )
        self.pos, self.size = 0, 0
        self.length.zero_()
        returns = state["returns"][-self.returns.shape[0] :].to(self.device)
        self.returns[: returns.shape[0]] = returns
        self.episodes = int(returns.shape[0])
        self._write(
            state["obs"].to(self.device), state["actions"].to(self.device), state["return_to_go"].to(self.device)
        )

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """A uniform batch of good transitions: ``obs``, ``actions`` and ``weight [B]``, the return-to-go
        min-max-normalised to ``[0, 1]`` over the good transitions held (the best weighs 1)."""
        if self.size == 0:
            raise RuntimeError("no good episode has ended yet; check .size before sampling")
        idx = torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)
        held = self.return_to_go[: self.size]
        low, high = held.min(), held.max()
        weight = (self.return_to_go[idx] - low) / (high - low).clamp_min(1e-8)
        return {"obs": self.obs[idx], "actions": self.actions[idx], "weight": weight}


def _oldest_first(pos: int, size: int, capacity: int, device: torch.device) -> torch.Tensor:
    """Indices of a ring's ``size`` entries, oldest first (``pos``: where the next entry goes)."""
    if size < capacity:
        return torch.arange(size, device=device)
    return (torch.arange(capacity, device=device) + pos) % capacity
