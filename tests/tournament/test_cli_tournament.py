"""``podium tournament``, ``podium tournament resume``, ``podium leaderboard`` and ``podium backtest`` of a
tournament, through the command line (inline backend: quick)."""

from __future__ import annotations

import csv

import yaml
from typer.testing import CliRunner

from podium.cli import app

runner = CliRunner()
POD = {"steps": 2048, "eval_every": 2048, "eval_episodes": 4, "tensorboard": False, "num_envs": 16}
WIDE = {"COLUMNS": "200"}


def _yaml(tmp_path, **config):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"env": "CartPole-v1", "algos": {"ppo": 1, "dqn": 1}, "pod": POD, **config}))
    return str(path)


def test_tournament_resume_and_leaderboard_commands(tmp_path):
    config = _yaml(tmp_path, steps=4 * 2048, generator={"explore": 0.0})
    run_dir = str(tmp_path / "run")
    result = runner.invoke(
        app,
        ["tournament", config, "--backend", "inline", "--pods", "2", "--run-dir", run_dir, "--no-progress"],
        env=WIDE,
    )
    assert result.exit_code == 0, result.output
    assert "leaderboard of" in result.output and "champion lineage" in result.output
    assert "the step budget is spent" in result.output

    result = runner.invoke(app, ["tournament", "resume", run_dir, "--steps", str(8 * 2048), "--no-progress"], env=WIDE)
    assert result.exit_code == 0, result.output

    result = runner.invoke(app, ["leaderboard", run_dir, "--history", "--lineage", "p0001"], env=WIDE)
    assert result.exit_code == 0, result.output
    for column in ("rank", "algo", "score", "steps", "parent"):
        assert column in result.output
    assert "ppo" in result.output and "dqn" in result.output
    assert "entered" in result.output and "p0001 " in result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│") and " p0" in line]
    assert rows, result.output


def test_bad_tournament_input_exits_with_a_clear_message(tmp_path):
    bad = _yaml(tmp_path, algos={"ppo": 1, "a2c": 1}, seconds=10)
    result = runner.invoke(app, ["tournament", bad, "--run-dir", str(tmp_path / "r1")])
    assert result.exit_code == 2 and "a2c" in result.output

    ok = _yaml(tmp_path, seconds=10)
    url = "postgresql://podium:pw@127.0.0.1:9/nowhere"
    result = runner.invoke(app, ["tournament", ok, "--db", url, "--run-dir", str(tmp_path / "r2")], env=WIDE)
    assert result.exit_code == 2 and "cannot use the leaderboard database" in result.output
    assert "pw@" not in result.output and not (tmp_path / "r2").exists()  # nothing started, nothing left

    result = runner.invoke(app, ["tournament", "resume"])
    assert result.exit_code == 2 and "podium tournament resume RUN_DIR" in result.output
    result = runner.invoke(app, ["tournament", "resume", str(tmp_path)], env=WIDE)
    assert result.exit_code == 2 and "holds no tournament" in result.output
    result = runner.invoke(app, ["leaderboard", str(tmp_path)], env=WIDE)
    assert result.exit_code == 2 and "holds no tournament" in result.output
    result = runner.invoke(app, ["tournament", str(tmp_path / "missing.yaml")], env=WIDE)
    assert result.exit_code == 2 and "does not exist" in result.output


def test_backtest_of_a_trading_tournament_uses_the_leaderboards_best(tmp_path):
    config = tmp_path / "trade.yaml"
    pod = {"steps": 256, "eval_every": 256, "eval_episodes": 2, "tensorboard": False, "num_envs": 8}
    env_kwargs = {"period": ["2015-10-01", "2015-12-31"], "max_episode_steps": 20}
    config.write_text(
        yaml.safe_dump(
            {"env": "StockTrading-v0", "env_kwargs": env_kwargs, "algos": {"ppo": 1}, "pod": pod, "steps": 512}
        )
    )
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["tournament", str(config), "--backend", "inline", "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "bt"
    args = ["backtest", str(run_dir), "--start", "2016-01-04", "--end", "2016-03-31", "--top-k", "2", "--out", str(out)]
    result = runner.invoke(app, args, env=WIDE)
    assert result.exit_code == 0, result.output
    assert "ensemble of 2" in result.output and "DIA" in result.output
    daily = list(csv.DictReader((out / "backtest.csv").open()))
    assert daily[0]["date"] == "2016-01-04" and daily[-1]["date"] == "2016-03-31"
    result = runner.invoke(app, [*args[:-4], "--top-k", "5"], env=WIDE)
    assert result.exit_code == 2 and "top_k=5" in result.output
