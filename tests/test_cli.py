"""The `podium` command line."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from podium import _pod_entry
from podium.cli import app
from podium.envs import make
from podium.envs.gym_adapter import MissingDependencyError

runner = CliRunner()


def test_throughput_prints_steps_per_second():
    result = runner.invoke(app, ["throughput", "--num-envs", "256", "--seconds", "0.3"])
    assert result.exit_code == 0, result.output
    assert "steps/s" in result.output and "256" in result.output


def test_throughput_unknown_env_is_a_clear_error():
    result = runner.invoke(app, ["throughput", "--env", "CartPol-v1"])
    assert result.exit_code == 2
    assert "CartPole-v1" in result.output


def test_envs_lists_registered_ids():
    result = runner.invoke(app, ["envs"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for env_id in ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"]:
        assert env_id in result.output


def test_train_then_eval_from_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "train",
            "--env",
            "CartPole-v1",
            "--algo",
            "ppo",
            "--steps",
            "2048",
            "--run-dir",
            str(run_dir),
            "--hparam",
            "learning_rate=0.001",
            "--no-progress",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "best score" in result.output and (run_dir / "checkpoints" / "best.pt").is_file()
    result = runner.invoke(app, ["eval", str(run_dir), "--episodes", "4"])
    assert result.exit_code == 0, result.output
    assert "over 4 episodes" in result.output
    result = runner.invoke(app, ["eval", str(run_dir), "--episodes", "0"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "episodes: evaluate at least 1 episode, got 0" in result.output
    result = runner.invoke(app, ["train", "--resume", str(run_dir), "--overwrite"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "choose one" in result.output
    assert (run_dir / "checkpoints" / "best.pt").is_file()  # neither resumed nor deleted


def test_train_takes_the_env_first_as_the_python_api_does(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "CartPole-v1", "--algo", "ppo", "--steps", "512", "--run-dir", str(run_dir), "--no-progress"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "CartPole-v1" in (run_dir / "spec.yaml").read_text()
    result = runner.invoke(app, ["train", "CartPole-v1", "--env", "Pendulum-v1", "--algo", "ppo"])
    assert result.exit_code == 2 and "two environments" in result.output


def test_train_bad_input_exits_with_a_named_problem(tmp_path):
    result = runner.invoke(app, ["train", "--env", "CartPole-v1", "--algo", "sac", "--steps", "10"])
    assert result.exit_code == 2 and "Discrete" in result.output  # SAC cannot do CartPole's actions
    result = runner.invoke(app, ["train", "--env", "CartPole-v1", "--algo", "ppo", "--steps", "10", "--hparam", "lr"])
    assert result.exit_code == 2 and "key=value" in result.output
    result = runner.invoke(app, ["train"])
    assert result.exit_code == 2 and "--env" in result.output
    result = runner.invoke(app, ["eval", str(tmp_path / "nothing")], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "does not exist" in result.output
    # each of these used to end in a traceback
    (tmp_path / "null.yaml").write_text("env: CartPole-v1\nalgo: ppo\nsteps: 10\nhparams:\n")
    (tmp_path / "list.yaml").write_text("env: CartPole-v1\nalgo: ppo\nsteps: 10\nhparams: [1, 2]\n")
    (tmp_path / "typo.yaml").write_text("env: CartPole-v1\nalgo: ppo\nsteps: 10\nenv_kwargs: {max_episode_step: 3}\n")
    wide = {"COLUMNS": "300"}
    out = tmp_path / "out"
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "null.yaml"), "--run-dir", str(out)], env=wide)
    assert result.exit_code == 0, result.output  # "hparams:" with nothing under it means none
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "list.yaml")], env=wide)
    assert result.exit_code == 2 and "hparams must be a mapping" in result.output
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "typo.yaml")], env=wide)
    assert result.exit_code == 2 and "did you mean 'max_episode_steps'" in result.output
    result = runner.invoke(app, ["demo", "--seconds", "-1", "--run-dir", str(tmp_path / "demo")], env=wide)
    assert result.exit_code == 2 and "seconds: Input should be greater than 0" in result.output
    assert not (tmp_path / "demo").exists()


# ------------------------------------------------------------------------------------ a newcomer's first minutes
LIGHT = """
import sys
from typer.testing import CliRunner
from podium.cli import app

runner = CliRunner()
for args, code, text in [
    (["--help"], 0, "tournament"),
    (["train", "--help"], 0, "--env"),
    (["train"], 2, "--env"),
    (["train", "--env", "CartPole-v1", "--hparam", "lr"], 2, "key=value"),
    (["tournament", "missing.yaml"], 2, "does not exist"),
    (["tournament", "resume"], 2, "RUN_DIR"),
    (["backtest", "somewhere", "--top-k", "0"], 2, "--top-k"),
]:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == code and text in result.output, (args, result.exit_code, result.output)
import podium

heavy = sorted(m for m in ("torch", "gymnasium", "pandas", "sqlalchemy", "matplotlib") if m in sys.modules)
print("heavy:", heavy)
"""


def test_help_and_bad_arguments_answer_without_importing_torch(tmp_path):
    """``podium --help`` and mistakes in the arguments must not pay torch's import (seconds): the package and
    the CLI import heavy modules only inside the commands that need them."""
    done = subprocess.run([sys.executable, "-c", LIGHT], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "heavy: []" in done.stdout, done.stdout


def test_the_package_names_resolve_on_first_use():
    import podium
    import podium.api

    assert podium.train is podium.api.train and podium.load is podium.api.load
    assert podium.Policy is podium.api.Policy and podium.make_spec is podium.api.make_spec
    assert {"train", "load", "Policy", "make_spec", "__version__"} <= set(dir(podium))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        podium.nope  # noqa: B018


@pytest.fixture
def env_with_a_missing_extra():
    """A gymnasium env whose extra is not installed, the way gymnasium's Box2D and MuJoCo envs fail."""

    def entry_point(**kwargs):
        raise gym.error.DependencyNotInstalled('Foo is not installed, run `pip install "gymnasium[foo]"`')

    gym.register(id="PodiumMissingExtra-v0", entry_point=entry_point)
    yield "PodiumMissingExtra-v0"
    del gym.registry["PodiumMissingExtra-v0"]


def test_an_env_whose_extra_is_missing_is_one_error_line_naming_the_install(env_with_a_missing_extra, tmp_path):
    env_id = env_with_a_missing_extra
    with pytest.raises(MissingDependencyError, match=r'pip install "gymnasium\[foo\]"') as caught:
        make(env_id, num_envs=2)
    assert isinstance(caught.value, ValueError) and "\n" not in str(caught.value)
    for args in (
        ["train", "--env", env_id, "--algo", "ppo", "--steps", "64", "--run-dir", str(tmp_path / "r"), "--no-progress"],
        ["throughput", "--env", env_id],
    ):
        result = runner.invoke(app, args, env={"COLUMNS": "60"})
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith("error: ") and 'pip install "gymnasium[foo]"' in lines[0], result.output


@pytest.mark.skipif(importlib.util.find_spec("Box2D") is not None, reason="Box2D is installed")
def test_lunar_lander_without_box2d_says_how_to_install_it(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "podium.cli", "train", "--env", "LunarLander-v3", "--algo", "ppo", "--steps", "64"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    out = (done.stdout + done.stderr).strip()
    assert done.returncode == 2 and "Traceback" not in out, out
    assert len(out.splitlines()) == 1 and out.startswith("error:") and 'pip install "gymnasium[box2d]"' in out, out


def test_paths_are_printed_whole_on_a_narrow_terminal(tmp_path):
    """rich must not wrap a path mid-word: the run directory and the checkpoint can be copied from the output."""
    run_dir = tmp_path / ("a-rather-long-directory-name-" * 3) / "cartpole-ppo-run"
    args = ["train", "--env", "CartPole-v1", "--algo", "ppo", "--steps", "512", "--run-dir", str(run_dir)]
    result = runner.invoke(app, [*args, "--no-progress"], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert str(run_dir) in result.output and str(run_dir / "checkpoints" / "best.pt") in result.output
    missing = run_dir / "no-such-run"
    result = runner.invoke(app, ["eval", str(missing)], env={"COLUMNS": "60"})
    assert result.exit_code == 2 and str(missing) in result.output, result.output


def test_a_negative_exploration_noise_is_refused(tmp_path):
    args = ["train", "--env", "Pendulum-v1", "--algo", "td3", "--steps", "64", "--run-dir", str(tmp_path / "r")]
    result = runner.invoke(app, [*args, "--hparam", "exploration_noise=-1", "--no-progress"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "exploration_noise" in result.output, result.output
    assert "greater than or equal to 0" in result.output


def test_an_unknown_env_is_refused_before_torch_is_imported():
    import subprocess
    import sys

    code = (
        "import sys; from typer.testing import CliRunner; from podium.cli import app; "
        "r = CliRunner().invoke(app, ['train', '--env', 'Pendulm-v1', '--algo', 'sac']); "
        "print(r.exit_code, 'torch' in sys.modules, 'Pendulum-v1' in r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["2", "False", "True"]


def test_a_newcomers_slips_are_answered_with_the_fix(tmp_path):
    """Each used to be a traceback or a bare "unknown field"."""
    import podium
    from podium.config import ConfigError

    with pytest.raises(ConfigError, match=r"learning_rate: a hyperparameter .* hparams=\{'learning_rate': 0\.001\}"):
        podium.train("CartPole-v1", "ppo", learning_rate=1e-3)
    with pytest.raises(ConfigError, match="stesp: unknown field; did you mean steps"):
        podium.train("CartPole-v1", "ppo", stesp=1000)
    with pytest.raises(ConfigError, match="learningrate: unknown field; did you mean learning_rate"):
        podium.train("CartPole-v1", "ppo", steps=1000, hparams={"learningrate": 1e-3})
    wide = {"COLUMNS": "300"}
    args = ["train", "--env", "CartPole-v1", "--algo", "ppo", "--steps", "600", "--no-progress"]
    result = runner.invoke(app, [*args, "--seed", "-1", "--run-dir", str(tmp_path / "a")], env=wide)
    assert result.exit_code == 2 and "seed: Input should be greater than or equal to 0" in result.output
    result = runner.invoke(app, [*args, "--target", "475", "--run-dir", str(tmp_path / "b")], env=wide)
    assert result.exit_code == 0 and "475 not reached" in result.output, result.output
    with pytest.raises(ValueError, match=r"cuda:99.*does not exist|CUDA is not available"):
        podium.load(tmp_path / "b", device="cuda:99")  # was "corrupt or not a podium checkpoint"


@pytest.mark.parametrize("command", [None, *(c.name for c in app.registered_commands)])
def test_help_shows_no_docstring_markup(command):
    # docstrings are Sphinx-styled (``code``); what reaches --help is read in a terminal, where the backticks
    # would print as they are
    args = ["--help"] if command is None else [command, "--help"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "``" not in result.output and ":class:" not in result.output and ":func:" not in result.output


def test_bad_paths_and_numbers_outside_train_get_one_line(tmp_path, monkeypatch):
    """From a review of every command's bad input: a tournament's --run-dir that is a file was a traceback
    (after the backend and the pod checks had run); podium eval on a tournament's directory asked whether it was
    a podium run directory; throughput --seconds -1 reported 0 steps/s. The pod processes the refused demo
    started ahead end: they stayed in this process, and the next process backend built here took them as its
    first idle ones (another test then saw pods in processes it had not started)."""
    started, real_spawn = [], _pod_entry.spawn

    def spawn(*args, **kwargs):
        started.append(real_spawn(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(_pod_entry, "spawn", spawn)
    (tmp_path / "afile").write_text("x")
    tournament = runner.invoke(app, ["demo", "--seconds", "5", "--run-dir", str(tmp_path / "afile")])
    assert tournament.exit_code == 2 and "afile is a file; choose another --run-dir" in tournament.output
    assert tournament.exception is None or isinstance(tournament.exception, SystemExit)
    assert started and not _pod_entry._AHEAD  # started ahead of the refusal, then released
    assert [p.wait(60) for p in started] == [0] * len(started)  # each exits once its imports are done
    monkeypatch.undo()
    (tmp_path / "tour").mkdir()
    (tmp_path / "tour" / "tournament.yaml").write_text("name: t\nconfig: {}\n")
    evaluated = runner.invoke(app, ["eval", str(tmp_path / "tour")], env={"COLUMNS": "300"})
    assert evaluated.exit_code == 2 and "is a tournament's run directory; give one of its pods" in evaluated.output
    stepped = runner.invoke(app, ["throughput", "--seconds", "-1"])
    assert stepped.exit_code == 2 and "--seconds" in stepped.output


def test_a_bad_value_is_blamed_on_the_option_that_gave_it_not_on_the_config_file(tmp_path):
    """``podium train --config c.yaml --steps -5`` said "c.yaml: steps: ...", as if the file held -5; without a
    file it said "pod spec: steps", naming no option either."""
    from podium.api import make_spec
    from podium.config import ConfigError

    config = tmp_path / "c.yaml"
    config.write_text("env: CartPole-v1\nalgo: ppo\nsteps: 100\n")
    wide = {"COLUMNS": "300"}
    out = ["--run-dir", str(tmp_path / "r"), "--no-progress"]
    for args, expected in [
        (["--config", str(config), "--steps", "-5"], "command line --steps: Input should be greater than 0 (got -5)"),
        (["--env", "CartPole-v1", "--algo", "ppo", "--steps", "-5"], "command line --steps: Input should be"),
        (["--config", str(config), "--num-envs", "0"], "command line --num-envs: Input should be greater than 0"),
        (["--config", str(config), "--hparam", "learning_rate=-1"], "command line --hparam learning_rate: Input"),
        (["CartPole-v1", "--steps", "9", "--hparam", "gamma=2"], "command line --hparam gamma: Input should be less"),
    ]:
        result = runner.invoke(app, ["train", *args, *out], env=wide)
        assert result.exit_code == 2 and expected in result.output, (args, result.output)
        assert "c.yaml" not in result.output and "pod spec" not in result.output, result.output
    # a value the file gave is still the file's, also when options are given beside it
    (tmp_path / "bad.yaml").write_text("env: CartPole-v1\nalgo: ppo\nsteps: -5\nhparams: {learning_rate: -1}\n")
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "bad.yaml"), "--seed", "3", *out], env=wide)
    assert result.exit_code == 2 and "bad.yaml: steps: Input should be greater than 0" in result.output
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "bad.yaml"), "--steps", "9", *out], env=wide)
    assert result.exit_code == 2 and "bad.yaml: hparams.learning_rate: Input should be greater" in result.output
    assert not (tmp_path / "r").exists()
    # Python: a keyword argument beside a file is named as the argument
    with pytest.raises(ConfigError, match=r"^argument steps: Input should be greater than 0 \(got -5\)$"):
        make_spec(config, steps=-5)
    with pytest.raises(ConfigError, match=r"^argument hparams.learning_rate: Input should be greater than 0"):
        make_spec(config, hparams={"learning_rate": -1})


def test_a_boolean_in_a_list_of_numbers_is_refused_not_read_as_one(tmp_path):
    """``hidden_sizes: [64, true]`` built a network with a hidden layer of 1 unit: pydantic reads true as 1."""
    from pydantic import ValidationError

    from podium.api import make_spec
    from podium.config import ConfigError, PodSpec

    wide = {"COLUMNS": "300"}
    out = ["--run-dir", str(tmp_path / "r"), "--no-progress"]
    (tmp_path / "c.yaml").write_text("env: CartPole-v1\nalgo: ppo\nsteps: 100\nhparams: {hidden_sizes: [64, true]}\n")
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "c.yaml"), *out], env=wide)
    assert result.exit_code == 2, result.output
    assert "c.yaml: hparams.hidden_sizes: item 1 is true, a boolean among numbers ([64, true])" in result.output
    for value in ("[64, true]", "[64,true]", "[false, 64]"):  # YAML or JSON
        args = ["train", "CartPole-v1", "--algo", "ppo", "--steps", "100", "--hparam", f"hidden_sizes={value}"]
        result = runner.invoke(app, [*args, *out], env=wide)
        assert result.exit_code == 2 and "command line --hparam hidden_sizes: item " in result.output, result.output
        assert "a boolean among numbers" in result.output
    assert not (tmp_path / "r").exists()
    for algo in ("ppo", "sac", "td3", "ddpg", "dqn", "d3qn"):
        with pytest.raises(ValidationError, match=r"hidden_sizes: item 0 is false"):
            PodSpec(algo=algo, steps=100, hparams={"hidden_sizes": (False, 64)})
    with pytest.raises(ConfigError, match=r"^pod spec: hparams.hidden_sizes: item 1 is true"):
        make_spec(env="Pendulum-v1", algo="sac", steps=100, hparams={"hidden_sizes": [64, True]})
    spec = make_spec(env="Pendulum-v1", algo="sac", steps=100, hparams={"hidden_sizes": [64, 32], "batch_size": 64})
    assert spec.hparams["hidden_sizes"] == [64, 32]  # numbers are as welcome as ever


def test_a_boolean_where_a_number_belongs_is_refused_not_read_as_one(tmp_path):
    """``steps: true`` trained one step and ``learning_rate: true`` at a step size of 1: pydantic's lax mode
    reads a boolean as 1 or 0 in a number field, in a pod spec, an algorithm's config and a tournament's."""
    from pydantic import ValidationError

    from podium.algos.ppo import PPOConfig
    from podium.algos.sac import SACConfig
    from podium.api import make_spec
    from podium.config import ConfigError
    from podium.tournament.config import load_tournament_config

    (tmp_path / "c.yaml").write_text("env: CartPole-v1\nalgo: ppo\nsteps: yes\n")  # YAML 1.1's yes is true
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "c.yaml: steps: true is a boolean where a number belongs" in result.output
    with pytest.raises(ConfigError, match=r"^pod spec: hparams.learning_rate: true is a boolean where a number"):
        make_spec(env="Pendulum-v1", algo="ppo", steps=100, hparams={"learning_rate": True})
    with pytest.raises(ValidationError, match="update_epochs: false is a boolean where a number belongs"):
        PPOConfig(update_epochs=False)
    with pytest.raises(ValidationError, match="target_entropy: true is a boolean"):
        SACConfig(target_entropy=True)  # float | None
    for fields, where in ((dict(seconds=True), "seconds"), (dict(seconds=60, pool={"max": True}), "pool.max")):
        with pytest.raises(ConfigError, match=rf"^tournament config: {where}: true is a boolean where a number"):
            load_tournament_config(None, env="Pendulum-v1", **fields)
    assert PPOConfig(normalize_reward=True, learning_rate=1).learning_rate == 1.0  # booleans and numbers as ever
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", [["throughput", "--seconds", "0.1"], ["eval", "nowhere"]])
def test_a_seed_outside_what_the_envs_take_is_refused_by_its_option(command):
    """A negative seed crashed eval and throughput with gymnasium's traceback (train refused it already)."""
    for seed in ("-1", str(2**31)):
        result = runner.invoke(app, [*command, "--seed", seed])
        assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output


def test_ctrl_c_before_training_starts_says_so(monkeypatch, capsys):
    """Ctrl-C while the command imported torch or built the pod exited 130 without a word (typer's silent
    Exit(130)); a second Ctrl-C's reason was lost the same way."""
    import podium.api
    import podium.machine
    from podium.cli import main

    registry = importlib.import_module("podium.envs.registry")  # (podium.envs.registry is also a dict's name)

    for raised, said in (
        (KeyboardInterrupt(), "interrupted: before training started; no checkpoint was written"),
        (KeyboardInterrupt("SIGINT again: stopping at once, without saving"), "interrupted: SIGINT again: stopping"),
    ):

        def interrupted(*args, exc=raised, **kwargs):
            raise exc

        monkeypatch.setattr(podium.api, "train", interrupted)
        result = CliRunner().invoke(app, ["train", "CartPole-v1", "--steps", "100"], env={"COLUMNS": "200"})
        assert result.exit_code == 130 and result.output.startswith(said), result.output

    def exit_here(code=0):
        raise SystemExit(code)

    monkeypatch.setattr(podium.machine, "exit_process", exit_here)  # main ends the process there
    monkeypatch.setattr(registry, "check_env_id", lambda env: (_ for _ in ()).throw(KeyboardInterrupt()))
    monkeypatch.setattr(sys, "argv", ["podium", "train", "CartPole-v1", "--steps", "100"])
    with pytest.raises(SystemExit) as stopped:
        main()  # interrupted outside any command's own handling: typer's Exit(130)
    assert stopped.value.code == 130 and "interrupted: stopped by Ctrl-C" in capsys.readouterr().out
