"""The Python API: ``podium.train(...)`` and ``podium.load(...)`` (same names as the CLI)."""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError

from podium.algos import get_algo
from podium.config import ConfigError, PodSpec, load_yaml, validation_message
from podium.pod import Evaluator, Pod, PodReport, build_agent
from podium.pod.pod import resolve_config
from podium.rundir import PodDir, RunDirError, TournamentDir
from podium.store import CheckpointError, load_checkpoint

__all__ = ["Ensemble", "NothingToDoWarning", "Policy", "load", "load_ensemble", "make_spec", "train"]


class NothingToDoWarning(UserWarning):
    """A resumed run whose budgets were already spent trained nothing (budgets are totals over the run); the
    message says which budget and what to give instead. ``podium train`` prints it as a note."""


def make_spec(config: str | Path | None = None, *, options: Mapping[str, str] | None = None, **fields: Any) -> PodSpec:
    """Build a :class:`PodSpec` from an optional YAML file plus keyword overrides (None = not given), and check
    its hyperparameters against the algorithm's.

    ``options``: the command line's, for the error messages: the option that gave each override (``{"steps":
    "--steps", "hparams": "--hparam"}``). Without it, an override is named as a keyword argument where a file
    gave the rest.

    Raises:
        ConfigError: unknown field, wrong type, or invalid value — the message names the field, and the file,
        the option or the argument that gave it.
    """
    data: dict[str, Any] = load_yaml(config) if config is not None else {}
    base = data.pop("hparams", None) or {}  # "hparams:" with nothing under it is YAML's null
    if not isinstance(base, dict):
        raise ConfigError(
            f"{config}: hparams must be a mapping of hyperparameter names to values (e.g. 'hparams: "
            f"{{learning_rate: 0.001}}'), got {type(base).__name__} {base!r}"
        )
    extra = fields.pop("hparams", None) or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(
            f"hparams must be a mapping of hyperparameter names to values, e.g. hparams={{'learning_rate': 1e-3}}, "
            f"got {type(extra).__name__} {extra!r}"
        )
    hparams = {**base, **extra}
    given = {k: v for k, v in fields.items() if v is not None}
    data.update(given)
    if hparams:
        data["hparams"] = hparams
    sources: dict[str, str] = {}  # where each override came from, for the messages
    if options is not None:
        sources = {k: f"command line {options[k]}" for k in given if k in options}
        if "hparams" in options:
            sources.update({f"hparams.{k}": f"command line {options['hparams']} {k}" for k in extra})
    elif config is not None:  # a file and keyword arguments: name which one gave a bad value
        sources = {k: f"argument {k}" for k in given} | {f"hparams.{k}": f"argument hparams.{k}" for k in extra}
    try:
        spec = PodSpec(**data)
    except ValidationError as exc:
        message = validation_message(exc, str(config) if config else "pod spec", PodSpec, given=sources)
        hparams = [e["loc"][0] for e in exc.errors() if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
        hparams = [str(k) for k in hparams if _is_hyperparameter(str(k), data.get("algo"))]
        if hparams:
            example = ", ".join(f"{k!r}: {data[k]!r}" for k in hparams)
            message += (
                f"\n{', '.join(hparams)}: a hyperparameter of the algorithm, not a pod-spec field: pass it as "
                f"hparams={{{example}}} (YAML: under 'hparams:'; command line: --hparam {hparams[0]}=VALUE)"
            )
        raise ConfigError(message) from None
    try:
        resolve_config(spec)  # as the pod will: an invalid hyperparameter answers here, naming its source
    except ConfigError as exc:
        cause = exc.__context__  # the algorithm's ValidationError
        if not isinstance(cause, ValidationError) or (config is None and not sources):
            raise
        where = str(config) if config else "pod spec"
        model = get_algo(spec.algo).Config
        raise ConfigError(validation_message(cause, where, model, given=sources, prefix=("hparams",))) from None
    return spec


def _is_hyperparameter(name: str, algo: Any) -> bool:
    """Whether ``name`` is a hyperparameter of ``algo`` (of any algorithm when ``algo`` is unknown)."""
    from podium.algos import algo_names, get_algo

    known = isinstance(algo, str) and algo.lower() in algo_names()
    return any(name in get_algo(a).Config.model_fields for a in ([algo] if known else algo_names()))


def train(
    env: str | None = None,
    algo: str | None = None,
    *,
    config: str | Path | None = None,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    **fields: Any,
) -> PodReport:
    """Train one pod and return its :class:`~podium.pod.PodReport`.

    With a ``target``, the pod stops once a snapshot's score reaches it on the routine evaluation *and*
    on ``confirm_episodes`` (100) fresh episodes; ``report.reached_target`` means that confirmation.

    Args:
        env: environment id (e.g. ``"Pendulum-v1"``); required unless ``config`` or ``resume`` is given.
        algo: algorithm name (``ppo``, ``sac``, ``td3``, ``ddpg``, ``dqn``, ``d3qn``; default ``ppo``).
        config: optional YAML file with :class:`~podium.config.PodSpec` fields; keyword arguments override it.
        run_dir: output directory (default ``runs/ENV-ALGO-seedS-TIMESTAMP``); it must not hold another run.
        resume: continue the run in this directory from its last checkpoint. ``steps``, ``seconds`` and
            ``target`` may be given: budgets are totals over the whole run, not amounts to add; one given as
            None is dropped (``target=None``: train on past a target the run reached, to its other budgets).
        overwrite: delete a previous run in ``run_dir`` first (otherwise a used ``run_dir`` is refused).
        progress: show a progress bar; None (default): when standard error is a terminal.
        **fields: any other :class:`~podium.config.PodSpec` field: ``steps``, ``seconds``, ``target``,
            ``num_envs``, ``seed``, ``device``, ``hparams={...}``, ...

    Raises:
        PodInterrupted: Ctrl-C/SIGTERM stopped training; its last checkpoint holds every step (resume it).
        RunDirError: ``run_dir`` holds another run (choose another, resume it, or ``overwrite=True``) or lies
            in a tournament's ``pods`` folder, or ``resume`` is a tournament's pod (resume the tournament).
        ConfigError: a bad field or hyperparameter (the message names it), or no env.

    Warns:
        NothingToDoWarning: ``resume`` with budgets the run has already spent (it trains nothing; at most it
            scores the final policy, if it was stopped before that).

    Example:
        >>> report = podium.train("CartPole-v1", "ppo", target=475, seconds=60)
        >>> report.score_mean, report.time_to_target
    """
    if resume is not None and overwrite:
        raise ConfigError(
            "resume continues the run in its directory and overwrite deletes it: choose one (resume keeps it)"
        )
    if resume is not None:
        budget = {k: fields.pop(k) for k in ("steps", "seconds", "target") if k in fields}  # None given: dropped
        given = {**fields, "env": env, "algo": algo, "config": config, "run_dir": run_dir}
        unused = sorted(k for k, v in given.items() if v is not None)
        if unused:
            raise ConfigError(
                f"resume continues a run as it was configured, in its own directory; only steps, seconds and "
                f"target can change (got {', '.join(unused)})"
            )
        owner = PodDir(resume).tournament()
        if owner is not None:  # its checkpoints, curve and report are the tournament's record of that pod
            raise RunDirError(
                f"{resume} is pod {Path(resume).name} of the tournament in {owner.root}: resuming it on its own "
                f"would change the tournament's record of it behind its leaderboard. Resume the tournament instead "
                f"(podium tournament resume {shlex.quote(str(owner.root))}; Python: "
                f"podium.tournament.resume_tournament(...)), or train a new pod from its policy (init_checkpoint: "
                f"{PodDir(resume).last})"
            )
        report = Pod.resume(resume, progress=progress, **budget).run()
        if report.message:
            warnings.warn(f"{resume}: {report.message}", NothingToDoWarning, stacklevel=2)
        return report
    if env is not None and not isinstance(env, str):
        raise ConfigError(
            f"env: give an environment id, not a {type(env).__name__}: a pod saves the id with its checkpoints and "
            "makes its envs from it again (its evaluator, a resume, podium.load). For your own gymnasium env (or a "
            "wrapped one), register a constructor in a module: gymnasium.register('MyEnv-v0', entry_point=make_env) "
            "in my_module, then podium.train('my_module:MyEnv-v0', ...); a tensor env: podium.envs.register"
        )
    if env is None and config is None:
        raise ConfigError(
            "give the environment to train on: podium.train('CartPole-v1', 'ppo', ...) (an id of `podium envs` or "
            "any gymnasium id), or config='run.yaml'; to continue a run, resume='runs/...'"
        )
    spec = make_spec(config, env=env, algo=algo, **fields)
    owner = PodDir(run_dir).tournament() if run_dir is not None else None
    if owner is not None:  # the tournament names its pods p0001, p0002, ... and claims them as it goes
        raise RunDirError(
            f"{run_dir} lies in the pods folder of the tournament in {owner.root}, whose pods it names and "
            "writes (overwrite would replace one of them behind its leaderboard, a new name would be taken when "
            "the tournament reaches it); choose a run directory outside that folder"
        )
    return Pod(spec, run_dir=run_dir, progress=progress, overwrite=overwrite).run()


class Policy:
    """A trained agent for deployment: ``policy.act(obs)`` works on single or batched observations,
    numpy (e.g. from a gymnasium env; returns numpy) or torch (returns torch)."""

    def __init__(
        self,
        agent: Any,
        spec: PodSpec,
        path: Path,
        encode: Callable[[np.ndarray], torch.Tensor] | None = None,
    ) -> None:
        self.agent, self.spec, self.path = agent, spec, path
        self._encode = encode  # gymnasium observations -> the tensors the agent was trained on (e.g. one-hot)

    @property
    def algo(self) -> str:
        """The algorithm that trained it: ``"ppo"``, ``"sac"``, ... (:attr:`Ensemble.algo` names a mix)."""
        return self.agent.name

    @property
    def discrete_observations(self) -> bool:
        """Whether the env's observations are integers (a Discrete space), one-hot encoded for the networks."""
        return self._encode is not None

    def act(self, obs: np.ndarray | torch.Tensor | int, deterministic: bool = True) -> Any:
        """Actions for one observation (``[obs_dim]``; an int for a Discrete observation space) or a batch
        (``[B, obs_dim]``; ``[B]`` ints). numpy (or int) in, numpy (or int) out; torch in, torch out.
        Discrete observations are one-hot encoded as they were in training. Their one-hot vectors are taken as
        they are from torch as float tensors (``[n]`` or ``[B, n]``), and from numpy as a ``[B, n]`` batch only:
        a 1-D numpy array is always a batch of integers (give one one-hot vector as ``[1, n]``).

        Raises:
            ValueError: an observation of another shape, or an integer outside a Discrete space."""
        is_numpy = not isinstance(obs, torch.Tensor)
        dim, env = self.agent.obs_dim, self.spec.env
        if is_numpy:
            obs = np.asarray(obs)
            # Discrete observations come as integers (numpy floats too, as before); any [B, n] is one-hot (JSON,
            # say, has no floats apart from ints: 0 and 1 come as ints)
            integers = not (obs.ndim == 2 and obs.shape[-1] == dim)
        else:  # torch: integer tensors are the env's integers, float tensors its one-hot vectors
            integers = not (obs.is_floating_point() or obs.is_complex())
        if self._encode is not None and integers:  # Discrete observations: integers, as the env gives them
            raw = obs if is_numpy else obs.detach().cpu().numpy()
            if raw.ndim > 1 or raw.dtype.kind not in "iubf" or (raw.dtype.kind == "f" and (raw != raw.round()).any()):
                raise ValueError(
                    f"Policy.act: {env}'s observations are integers (a Discrete space): give one int or a [B] "
                    f"batch of them (or their one-hot vectors [B, {dim}]), got {raw.dtype} of shape "
                    f"{list(raw.shape)}"
                )
            single = raw.ndim == 0
            flat = raw.reshape(-1)
            try:
                if raw.dtype.kind == "f" and not (np.abs(flat) < 2**53).all():  # 1e30 has no int64 to cast to
                    raise ValueError("beyond any integer")
                x = self._encode(flat.astype(np.int64)).to(self.agent.device)
            except (ValueError, RuntimeError) as exc:  # the encoding checks the space's range
                raise ValueError(f"Policy.act: {env}'s observations lie in a Discrete space of {dim} values, "
                                 f"got {flat.tolist()[:8]}") from exc  # fmt: skip
        else:
            x = torch.as_tensor(np.asarray(obs, dtype=np.float32) if is_numpy else obs, device=self.agent.device)
            if x.dim() not in (1, 2) or x.shape[-1] != dim:
                raise ValueError(
                    f"Policy.act: give one observation of shape [{dim}] or a batch [B, {dim}] for {env}, "
                    f"got shape {list(x.shape)}"
                )
            single = x.dim() == 1
            x = (x.unsqueeze(0) if single else x).float()  # float64 in (MuJoCo's numpy, say): the networks' dtype
        out = self.agent.act(x, deterministic=deterministic)
        out = out[0] if single else out
        if not is_numpy:
            return out
        arr = out.cpu().numpy()
        return int(arr) if single and self.agent.discrete else arr

    def evaluate(self, episodes: int = 32, seed: int = 0, env: str | None = None) -> tuple[float, float]:
        """Mean and std of the return over ``episodes`` parallel episodes (deterministic policy)."""
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes: evaluate at least 1 episode, got {episodes!r}")
        from podium.envs import make

        spec = self.spec
        kwargs = {**spec.env_kwargs, **spec.eval_env_kwargs}
        native = spec.native_env if env is None else True  # the implementation it trained on, unless told
        eval_env = make(env or spec.env, num_envs=episodes, device=self.agent.device, native=native, **kwargs)
        try:
            spaces = _spaces(eval_env.single_observation_space, eval_env.single_action_space)
            if env is not None and spaces != (self.agent.obs_dim, self.agent.discrete, self.agent.action_dim):
                raise ValueError(
                    f"Policy.evaluate: {env} has {_describe_spaces(*spaces)}, but this policy acts on "
                    f"{_describe_spaces(self.agent.obs_dim, self.agent.discrete, self.agent.action_dim)} "
                    f"({spec.env}): evaluate it on an env with the same spaces"
                )
            result = Evaluator(eval_env, seed=seed).evaluate(self.agent)
        finally:
            eval_env.close()
        return result.mean, result.std

    def __repr__(self) -> str:
        return f"Policy({self.agent.name} on {self.spec.env}, from {self.path})"


def _spaces(observation_space: Any, action_space: Any) -> tuple[int, bool, int]:
    """(observation size, discrete actions, number of actions or action size) of an env's spaces, as an
    agent's ``obs_dim``, ``discrete`` and ``action_dim`` count them."""
    discrete = hasattr(action_space, "n")
    size = int(action_space.n) if discrete else int(np.prod(action_space.shape))
    return int(np.prod(observation_space.shape)), discrete, size


def _describe_spaces(obs_dim: int, discrete: bool, actions: int) -> str:
    kind = f"{actions} discrete actions" if discrete else f"continuous actions of size {actions}"
    return f"observations of size {obs_dim} and {kind}"


class Ensemble:
    """Several trained policies acting as one: the mean of their actions (continuous actions), or the action
    most of them pick (discrete; a tie goes to the first member's choice). Members are given best first, e.g.
    a tournament leaderboard's top entries, and must share the env and action space.

    ``ensemble.act(obs)`` takes and returns what :meth:`Policy.act` does; ``ensemble.members`` are the
    :class:`Policy` objects.
    """

    def __init__(self, members: list[Policy]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one policy")
        first = members[0]
        for other in members[1:]:
            if other.spec.env != first.spec.env or other.agent.discrete != first.agent.discrete:
                raise ValueError(
                    f"ensemble members must act on the same env: {other.path} was trained on {other.spec.env!r}, "
                    f"{first.path} on {first.spec.env!r}"
                )
            for what in ("observation_space", "action_space"):  # the same id with other env_kwargs may differ
                theirs, ours = getattr(other.agent, what), getattr(first.agent, what)
                if theirs != ours:
                    raise ValueError(
                        f"ensemble members must act on the same env: {other.path} has the {what} {theirs}, "
                        f"{first.path} {ours} (the same id with other env_kwargs?)"
                    )
        self.members = members

    @property
    def algo(self) -> str:
        """The members' algorithms in their order (best first), each once, joined by ``+``: ``"sac"`` for
        three SAC policies, ``"sac+td3"`` for a tournament's mixed top 3. What ``/info`` and an ONNX
        export's metadata call the ensemble."""
        return "+".join(dict.fromkeys(m.algo for m in self.members))

    def act(self, obs: np.ndarray | torch.Tensor | int, deterministic: bool = True) -> Any:
        """The ensemble's action for one observation or a batch (see :meth:`Policy.act`)."""
        actions = [m.act(obs, deterministic=deterministic) for m in self.members]
        if len(actions) == 1:
            return actions[0]
        is_numpy = not isinstance(actions[0], torch.Tensor)
        stacked = torch.stack([torch.as_tensor(np.asarray(a)) if is_numpy else a for a in actions])  # [K, ...]
        if self.members[0].agent.discrete:
            n = self.members[0].agent.action_dim
            votes = torch.nn.functional.one_hot(stacked.long(), n).sum(0).float()  # [..., n]
            votes += 0.5 * torch.nn.functional.one_hot(stacked[0].long(), n)  # ties: the first (best) member
            out = votes.argmax(-1)
        else:
            out = stacked.float().mean(0)
        if not is_numpy:
            return out
        arr = out.cpu().numpy()
        return int(arr) if arr.ndim == 0 and self.members[0].agent.discrete else arr

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"Ensemble of {len(self.members)} on {self.members[0].spec.env}"


def load_ensemble(paths: list[str | Path], device: str = "cpu") -> Ensemble:
    """Load several policies (checkpoint files or run directories, best first) as one :class:`Ensemble`.

    Example: the top 3 of a tournament::

        from podium.tournament import leaderboard
        ensemble = podium.load_ensemble([e.checkpoint for e in leaderboard("runs/pendulum")[:3]])

    Raises:
        CheckpointError: a missing, corrupt or foreign file; ValueError: no paths, or members of different envs.
        TypeError: one path instead of a list of them.
    """
    if isinstance(paths, str | os.PathLike):  # a string is a sequence too: of one-letter "paths"
        raise TypeError(
            f"load_ensemble takes a list of checkpoints or run directories, got one path ({paths!r}): "
            f"load_ensemble([{str(paths)!r}, ...]), or podium.load({str(paths)!r}) for a single policy"
        )
    return Ensemble([load(p, device=device) for p in paths])


def _resolve_checkpoint(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        run = PodDir(path)
        found = run.policy_checkpoint()
        if found is None and TournamentDir(path).holds_tournament():
            raise CheckpointError(
                f"{path} is a tournament's run directory; give one of its pods, {TournamentDir(path).pods}/POD_ID "
                f"(podium leaderboard {path} lists them, best first)"
            )
        if found is None:
            raise CheckpointError(
                f"{path} has no {run.best.relative_to(path)} or {run.last.relative_to(path)}; "
                "is it a podium run directory?"
            )
        return found
    return path


def load(path: str | Path, device: str = "cpu") -> Policy:
    """Load a trained policy from a run directory (its best snapshot) or a checkpoint file.

    Raises:
        CheckpointError: missing, corrupt or foreign file.
        ValueError: ``device`` is not a device, or not one this machine has (the checkpoint is fine).
    """
    from podium.envs.base import resolve_device

    resolve_device(device)  # a GPU-less machine is not a corrupt file
    ckpt = _resolve_checkpoint(path)
    payload = load_checkpoint(ckpt, map_location=device)
    if "spec" not in payload and "replay" in payload:
        run = PodDir.of_checkpoint(ckpt)
        raise CheckpointError(
            f"{ckpt} is a pod's replay buffer, not a policy: load {run.best} or {run.last} (or the run directory, "
            f"{run.root})"
        )
    try:
        spec = PodSpec(**{**payload["spec"], "device": device})
    except (KeyError, ValidationError) as exc:
        raise CheckpointError(f"{ckpt} has no valid pod spec: {exc}") from exc
    from podium.envs import make

    probe = make(spec.env, num_envs=1, device=device, native=spec.native_env, **spec.env_kwargs)
    # the hyperparameters it was trained with (older checkpoints: its spec with today's presets)
    num_envs = int(payload.get("num_envs") or 1)
    obs_space, act_space = probe.single_observation_space, probe.single_action_space
    try:
        agent = build_agent(spec, obs_space, act_space, num_envs, probe.device, payload.get("agent_config"))
    finally:
        probe.close()
    encode = probe.observations_to_tensor if getattr(probe, "discrete_observations", False) else None
    if payload.get("algo") != agent.name:
        raise CheckpointError(f"{ckpt} holds a {payload.get('algo')!r} agent, but its spec says {agent.name!r}")
    agent.load_state_dict(payload["agent"])
    return Policy(agent, spec, ckpt, encode)
