"""The `podium` command line."""

from __future__ import annotations

from typer.testing import CliRunner

from podium.cli import app

runner = CliRunner()


def test_demo_prints_throughput():
    result = runner.invoke(app, ["demo", "--num-envs", "256", "--seconds", "0.3"])
    assert result.exit_code == 0, result.output
    assert "steps/s" in result.output and "256" in result.output


def test_demo_unknown_env_is_a_clear_error():
    result = runner.invoke(app, ["demo", "--env", "CartPol-v1"])
    assert result.exit_code == 2
    assert "CartPole-v1" in result.output


def test_envs_lists_registered_ids():
    result = runner.invoke(app, ["envs"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for env_id in ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"]:
        assert env_id in result.output
