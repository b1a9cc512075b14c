"""ONNX export (podium/deploy/export.py): the exported graph, run by onnxruntime, acts as podium's policy does on
real env observations, for every algorithm, an ensemble and a Discrete observation space; its names, types,
dynamic batch and metadata; a graph that disagrees is not kept; bad paths are refused; the CLI command."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import podium
from podium.cli import app
from podium.deploy import ExportError, export_onnx
from podium.deploy import export as export_module
from podium.store import CheckpointError

ort = pytest.importorskip("onnxruntime", reason="the deploy extra: pip install 'podium[deploy]'")
onnx = pytest.importorskip("onnx", reason="the deploy extra: pip install 'podium[deploy]'")

FAST = {"tensorboard": False, "eval_episodes": 4, "eval_mode": "inline", "progress": False}
CASES = [  # every algorithm, on every kind of action space it supports
    ("Pendulum-v1", "ppo"),
    ("CartPole-v1", "ppo"),
    ("Pendulum-v1", "sac"),
    ("Pendulum-v1", "td3"),
    ("MountainCarContinuous-v0", "ddpg"),
    ("CartPole-v1", "dqn"),
    ("Acrobot-v1", "d3qn"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for env, algo in CASES:
        report = podium.train(env, algo, steps=512, seed=1, run_dir=root / f"{algo}-{env}", **FAST)
        out[env, algo] = Path(report.run_dir)
    return out


def _env_observations(env_id: str, count: int) -> np.ndarray:
    """``count`` observations ``[count, obs_dim]`` from gymnasium's own env, visited by random actions."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=123)
    env.action_space.seed(123)
    rows = []
    for _ in range(count):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize(("env_id", "algo"), CASES, ids=[f"{a}-{e}" for e, a in CASES])
def test_the_onnx_graph_acts_as_the_policy_on_the_envs_observations(
    runs: dict[tuple[str, str], Path], env_id: str, algo: str
) -> None:
    run = runs[env_id, algo]
    path = export_onnx(run)
    assert path == run / "checkpoints" / "best.onnx"
    policy = podium.load(run)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, out.name) == ("obs", "tensor(float)", "action")
    assert out.type == ("tensor(int64)" if policy.agent.discrete else "tensor(float)")
    obs = _env_observations(env_id, 300)
    for batch in (obs, obs[:1], obs[:37]):  # the batch dimension is dynamic
        (got,) = session.run(None, {"obs": batch})
        want = policy.act(batch)
        assert got.shape == want.shape
        if policy.agent.discrete:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, atol=1e-5)
            assert np.abs(want).max() > 0  # a real policy, not zeros
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert meta["env"] == env_id and meta["algo"] == algo and meta["podium_version"] == podium.__version__
    assert meta["checkpoints"] == str(run / "checkpoints" / "best.pt")


def test_the_observation_normaliser_is_inside_the_graph(tmp_path: Path) -> None:
    hparams = {"normalize_obs": True}
    report = podium.train("Pendulum-v1", "ppo", steps=1024, seed=1, run_dir=tmp_path / "run", hparams=hparams, **FAST)
    policy = podium.load(report.run_dir)
    norm = policy.agent.obs_rms
    assert float(norm.mean.abs().max()) > 0
    path = export_onnx(policy, tmp_path / "ppo.onnx")
    obs = _env_observations("Pendulum-v1", 64)
    (got,) = ort.InferenceSession(str(path)).run(None, {"obs": obs})
    np.testing.assert_allclose(got, policy.act(obs), atol=1e-5)
    norm.mean.add_(1.0)  # the graph holds the statistics it was exported with
    assert np.abs(policy.act(obs) - got).max() > 1e-3


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_an_ensemble_exports_its_mean_or_its_vote(
    runs: dict[tuple[str, str], Path], tmp_path: Path, env_id: str
) -> None:
    # CartPole: the first member is outvoted where the other three agree against it
    algos = ("ppo", "sac", "td3") if env_id == "Pendulum-v1" else ("ppo", "dqn", "dqn", "dqn")
    ensemble = podium.load_ensemble([runs[env_id, a] for a in algos])
    path = export_onnx(ensemble, tmp_path / "ensemble.onnx")
    obs = _env_observations(env_id, 200)
    (got,) = ort.InferenceSession(str(path)).run(None, {"obs": obs})
    want = ensemble.act(obs)
    if env_id == "CartPole-v1":
        np.testing.assert_array_equal(got, want)
        assert (ensemble.members[0].act(obs) != want).any()  # the vote, not the first member
    else:
        np.testing.assert_allclose(got, want, atol=1e-5)
        member = ensemble.members[0].act(obs)
        assert np.abs(member - want).max() > 1e-3  # the mean, not the first member
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert len(meta["checkpoints"].splitlines()) == len(algos)
    assert meta["algo"] == ("ppo+sac+td3" if env_id == "Pendulum-v1" else "ppo+dqn")  # not the first member's


def test_a_tie_goes_to_the_first_member(runs: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    ensemble = podium.load_ensemble([runs["CartPole-v1", "ppo"], runs["CartPole-v1", "dqn"]])
    obs = _env_observations("CartPole-v1", 200)
    first, second = (m.act(obs) for m in ensemble.members)
    assert (first != second).any()
    (got,) = ort.InferenceSession(str(export_onnx(ensemble, tmp_path / "pair.onnx"))).run(None, {"obs": obs})
    np.testing.assert_array_equal(got, first)


def test_discrete_observations_are_one_hot_vectors(tmp_path: Path) -> None:
    report = podium.train("FrozenLake-v1", "dqn", steps=512, seed=0, run_dir=tmp_path / "lake", **FAST)
    policy = podium.load(report.run_dir)
    path = export_onnx(policy)
    states = np.arange(16)
    (got,) = ort.InferenceSession(str(path)).run(None, {"obs": np.eye(16, dtype=np.float32)})
    np.testing.assert_array_equal(got, policy.act(states))


@pytest.mark.parametrize(
    ("env_id", "algo", "says"),
    [("Pendulum-v1", "sac", "differ from podium's by up to 0.01"), ("CartPole-v1", "dqn", "another action")],
)
def test_a_graph_that_disagrees_with_the_policy_is_not_kept(
    runs: dict[tuple[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env_id: str,
    algo: str,
    says: str,
) -> None:
    forward = export_module._Deterministic.forward

    def off(self: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:  # a graph slightly off podium's actions
        action = forward(self, obs)
        return (1 - action) if action.dtype == torch.int64 else action + 0.01

    monkeypatch.setattr(export_module._Deterministic, "forward", off)
    out = tmp_path / "policy.onnx"
    with pytest.raises(ExportError, match=says):
        export_onnx(runs[env_id, algo], out)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its partial write


def test_the_callers_networks_keep_their_mode(runs: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    policy = podium.load(runs["Pendulum-v1", "td3"])
    policy.agent.actor.train()
    export_onnx(policy, tmp_path / "td3.onnx")
    assert policy.agent.actor.training


def test_the_file_stands_alone(runs: dict[tuple[str, str], Path]) -> None:
    path = export_onnx(runs["Pendulum-v1", "sac"])
    assert sorted(p.name for p in path.parent.iterdir() if p.suffix != ".pt") == ["best.onnx"]


def test_bad_paths_are_refused(runs: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    run = runs["Pendulum-v1", "td3"]
    with pytest.raises(ValueError, match=r"ends in \.onnx"):
        export_onnx(run, tmp_path / "policy.pt")
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        export_onnx(run, tmp_path / "dir.onnx")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match="cannot write"):
        export_onnx(run, tmp_path / "a-file" / "policy.onnx")
    with pytest.raises(CheckpointError, match="podium run directory"):
        export_onnx(tmp_path)
    with pytest.raises(TypeError, match="Policy, an Ensemble or a path"):
        export_onnx(42)  # type: ignore[arg-type]


def test_an_opset_the_file_would_not_have_is_refused(runs: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    """--opset 999 printed the exporter's traceback and --opset 9 a failed conversion, and both reported
    success: the file held the exporter's default opset (18), not the one asked for."""
    run = runs["CartPole-v1", "dqn"]
    for bad in (0, 999):
        with pytest.raises(ValueError, match=r"opset: ONNX opsets run from 1 to \d+"):
            export_onnx(run, tmp_path / "x.onnx", opset=bad)
    with pytest.raises(ExportError, match=r"opset 9 was asked for, but the exporter writes opset \d+"):
        export_onnx(run, tmp_path / "x.onnx", opset=9)
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize("case", [("CartPole-v1", "dqn"), ("Pendulum-v1", "ppo")])
def test_an_opset_too_low_to_convert_to_names_the_lowest_that_works(
    case: tuple[str, str], runs: dict[tuple[str, str], Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--opset 13 printed onnx's converter traceback and then "give --opset 18 or more", where 14 worked for one
    policy and 13 for another. The error names why the conversion stopped and the lowest opset it reaches, and
    that opset exports."""
    with pytest.raises(ExportError, match=r"could not convert it down to 9 \(onnx's converter: .+\)") as error:
        export_onnx(runs[case], tmp_path / "x.onnx", opset=9)
    assert capfd.readouterr().err == ""  # said once, in the error
    lowest = int(re.search(r"give --opset (\d+) or more", str(error.value)).group(1))
    assert 9 < lowest < onnx.defs.onnx_opset_version()
    written = export_onnx(runs[case], tmp_path / "x.onnx", opset=lowest)
    assert [o.version for o in onnx.load(str(written)).opset_import if o.domain == ""] == [lowest]
    with pytest.raises(ExportError, match=f"give --opset {lowest} or more"):
        export_onnx(runs[case], tmp_path / "y.onnx", opset=lowest - 1)


def test_the_cli_exports_and_names_the_file(runs: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    out = tmp_path / "cartpole.onnx"
    result = CliRunner().invoke(app, ["export", str(runs["CartPole-v1", "dqn"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output and out.is_file()
    assert "input 'obs' float32 [batch, 4], output 'action' int64 [batch]" in result.output
    result = CliRunner().invoke(app, ["export", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "error:" in result.output


@pytest.fixture(scope="module")
def tournament_dir(small_tournament) -> Path:
    """A finished inline tournament of tiny CartPole pods whose leaderboard holds three entries."""
    return small_tournament("tournament", {"ppo": 1, "dqn": 1}, pods=4, eval_every=1024)


def test_a_tournament_exports_its_champion_or_its_top_k(tournament_dir: Path) -> None:
    from podium.tournament import leaderboard

    entries = leaderboard(tournament_dir)
    assert len(entries) == 3
    champion = export_onnx(tournament_dir)
    assert champion == tournament_dir / "champion.onnx"
    meta = {p.key: p.value for p in onnx.load(str(champion)).metadata_props}
    assert meta["checkpoints"] == str(entries[0].checkpoint)
    top3 = export_onnx(tournament_dir, top_k=3)
    assert top3 == tournament_dir / "top3.onnx"
    obs = _env_observations("CartPole-v1", 100)
    (got,) = ort.InferenceSession(str(top3)).run(None, {"obs": obs})
    np.testing.assert_array_equal(got, podium.load_ensemble([e.checkpoint for e in entries]).act(obs))
    with pytest.warns(UserWarning, match="holds 3: using those"):
        assert export_onnx(tournament_dir, top_k=5) == tournament_dir / "top3.onnx"  # named by what it holds
    result = CliRunner().invoke(app, ["export", str(tournament_dir), "--top-k", "2"])
    assert result.exit_code == 0 and str(tournament_dir / "top2.onnx") in result.output
    result = CliRunner().invoke(app, ["export", str(tournament_dir), "--top-k", "5"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output  # the CLI's warning line, not Python's FILE:LINE: UserWarning
    assert re.search(r"^warning: top_k=5, but the leaderboard of .* holds 3: using those$", result.output, re.M)
    assert "UserWarning" not in result.output, result.output


def test_a_moved_or_copied_tournament_deploys_its_own_checkpoints(tournament_dir: Path, tmp_path: Path) -> None:
    """The leaderboard records absolute paths: a copy of a tournament exported the original's checkpoints
    (retrained since, perhaps), and failed once the original was gone; its dashboard showed empty curves."""
    import shutil

    from podium.deploy.dashboard.state import TournamentWatch
    from podium.deploy.source import load_policy
    from podium.tournament import leaderboard

    copy = tmp_path / "copied"
    shutil.copytree(tournament_dir, copy)
    entries = leaderboard(copy)
    assert all(Path(e.checkpoint).is_relative_to(copy) and Path(e.checkpoint).is_file() for e in entries)
    assert [e.pod_id for e in entries] == [e.pod_id for e in leaderboard(tournament_dir)]
    policy = load_policy(copy)
    assert Path(policy.path).is_relative_to(copy)
    moved = tmp_path / "moved"
    shutil.move(copy, moved)  # and the original? it stays: the copy must not read it
    curve = moved / "pods" / entries[0].pod_id / "curve.csv"
    curve.write_text(curve.read_text() + "999999,1.0,-999.0,0.0,4,-999.0,,1.0\n")
    watch = TournamentWatch(moved)
    try:  # read from moved/pods/..., not from where the tournament ran
        assert watch.curve(entries[0].pod_id)["rows"][-1]["eval_mean"] == -999.0
    finally:
        watch.close()


def test_top_k_needs_a_tournament_and_an_ensemble_needs_a_file(
    runs: dict[tuple[str, str], Path], tournament_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="holds one pod's policy"):
        export_onnx(runs["CartPole-v1", "dqn"], top_k=2)
    with pytest.raises(ValueError, match="at least 1"):
        export_onnx(tournament_dir, top_k=0)
    with pytest.raises(ValueError, match=r"give the \.onnx file"):
        export_onnx(podium.load_ensemble([runs["CartPole-v1", "dqn"]] * 2))
    with pytest.raises(ValueError, match="only a tournament's run directory"):
        export_onnx(podium.load(runs["CartPole-v1", "dqn"]), tmp_path / "x.onnx", top_k=2)
