"""The `podium` command line."""

from __future__ import annotations

from typer.testing import CliRunner

from podium.cli import app

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


def test_train_bad_input_exits_with_a_named_problem(tmp_path):
    result = runner.invoke(app, ["train", "--env", "CartPole-v1", "--algo", "sac", "--steps", "10"])
    assert result.exit_code == 2 and "Discrete" in result.output  # SAC cannot do CartPole's actions
    result = runner.invoke(app, ["train", "--env", "CartPole-v1", "--algo", "ppo", "--steps", "10", "--hparam", "lr"])
    assert result.exit_code == 2 and "key=value" in result.output
    result = runner.invoke(app, ["train"])
    assert result.exit_code == 2 and "--env" in result.output
    result = runner.invoke(app, ["eval", str(tmp_path / "nothing")], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "does not exist" in result.output
