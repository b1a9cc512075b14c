"""``podium tournament``, ``podium tournament resume``, ``podium leaderboard`` and ``podium backtest`` of a
tournament, through the command line (inline backend: quick)."""

from __future__ import annotations

import csv
import re
from types import SimpleNamespace

import yaml
from typer.testing import CliRunner

from podium.cli import app
from podium.tournament import load_tournament_config
from podium.tournament.leaderboard import Leaderboard
from podium.tournament.view import PoolView

runner = CliRunner()
POD = {"steps": 2048, "eval_every": 2048, "eval_episodes": 4, "tensorboard": False, "num_envs": 16}
WIDE = {"COLUMNS": "200"}


def _yaml(tmp_path, **config):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"env": "CartPole-v1", "algos": {"ppo": 1, "dqn": 1}, "pod": POD, **config}))
    return str(path)


def test_tournament_resume_and_leaderboard_commands(tmp_path):
    config = _yaml(tmp_path, steps=4 * 2048, generator={"scheme": "leaderboard", "explore": 0.0})
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
    # the history names each result's parent (explore=0: every pod after the first of its algo is a child)
    assert re.search(r"│\s*p0003\s*│\s*(ppo|dqn)\s*│\s*p000[12]\s*│", result.output), result.output

    # a lineage is a table (no raw Python dicts), and "champion" names the leaderboard's best
    result = runner.invoke(app, ["leaderboard", run_dir, "--lineage", "champion"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "changed from parent" in result.output and "{" not in result.output and "'" not in result.output
    assert re.search(r"│\s*p\d{4}\s*│\s*(ppo|dqn)\s*│", result.output.split("lineage of")[1]), result.output
    # a pod that is not there: the error alone, not the whole board above it
    result = runner.invoke(app, ["leaderboard", run_dir, "--lineage", "p9999"], env=WIDE)
    assert result.exit_code == 2 and result.output.startswith("error: ") and "p9999" in result.output, result.output


def test_a_tournament_without_run_dir_writes_runs_named_after_its_config(tmp_path, monkeypatch):
    """``podium tournament examples/stock_dow29.yaml`` writes runs/stock_dow29, which the README's next
    command reads; a second run does not clobber it. It says what runs and where as it starts."""
    monkeypatch.chdir(tmp_path)
    config = _yaml(tmp_path, algos={"ppo": 1}, steps=2048)
    for expected in ("runs/t", "runs/t-2"):
        result = runner.invoke(app, ["tournament", config, "--backend", "inline", "--no-progress"], env=WIDE)
        assert result.exit_code == 0, result.output
        assert (tmp_path / expected / "tournament.yaml").is_file()
        start = next(line for line in result.output.splitlines() if "tournament on CartPole-v1" in line)
        assert f"run dir {tmp_path / expected}" in start and "p0001 ppo started" in result.output
    result = runner.invoke(app, ["leaderboard", "runs/t"], env=WIDE)
    assert result.exit_code == 0 and "p0001" in result.output, result.output


def test_without_a_terminal_a_tournament_prints_a_status_line_between_events(tmp_path, capsys):
    config = load_tournament_config(_yaml(tmp_path, algos={"ppo": 1}, steps=2048))
    pod = SimpleNamespace(id="p0007", algo="ppo", run_dir=str(tmp_path / "nowhere"))
    entry = SimpleNamespace(score_mean=123.4, pod_id="p0003")
    board = SimpleNamespace(pods=lambda *states: [pod], entries=lambda: [entry])
    view = PoolView(config, live=False, status_every=0.0)
    view.update(board, elapsed=42.0, capacity=2)
    out = capsys.readouterr().out
    assert "42 s: 1 running (p0007 ppo -)" in out and "best on the leaderboard 123.4 (p0003)" in out


def test_bad_tournament_input_exits_with_a_clear_message(tmp_path):
    bad = _yaml(tmp_path, algos={"ppo": 1, "a2c": 1}, seconds=10)
    result = runner.invoke(app, ["tournament", bad, "--run-dir", str(tmp_path / "r1")])
    assert result.exit_code == 2 and "a2c" in result.output

    noise = {"ranges": {"td3": {"exploration_noise": [-0.5, 0.5]}}}
    bad = _yaml(tmp_path, env="Pendulum-v1", algos={"td3": 1}, steps=256, generator=noise)
    result = runner.invoke(app, ["tournament", bad, "--backend", "inline", "--run-dir", str(tmp_path / "r0")], env=WIDE)
    assert result.exit_code == 2 and "exploration_noise" in result.output and "-0.5" in result.output, result.output
    assert not (tmp_path / "r0").exists()

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
    validation = {
        "period": ["2015-10-01", "2015-12-31"],
        "random_start": False,
        "score": "sharpe",
        "max_episode_steps": None,
    }
    pod = {"steps": 256, "eval_every": 256, "eval_episodes": 1, "tensorboard": False, "num_envs": 8}
    pod["eval_env_kwargs"] = validation  # selected on data it did not train on
    env_kwargs = {"period": ["2015-07-01", "2015-09-30"], "max_episode_steps": 20}
    after = {"start": "2016-01-04", "end": "2016-01-29", "top_k": 3}  # the config's own backtest, announced
    config.write_text(
        yaml.safe_dump(
            {
                "env": "StockTrading-v0",
                "env_kwargs": env_kwargs,
                "algos": {"ppo": 1},
                "pod": pod,
                "steps": 512,
                "selection": {"episodes": 0},
                "backtest": after,
            }
        )
    )
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["tournament", str(config), "--backend", "inline", "--run-dir", str(run_dir)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert re.search(r"champion and the ensemble of the best [23] policies on 2016-01-04\.\.2016-01-29", result.output)
    assert re.search(r"backtest, champion: .*Sharpe -?\d", result.output), result.output
    assert re.search(r"backtest, ensemble of [23]: .*_top[23]", result.output), result.output
    name = yaml.safe_load((run_dir / "tournament.yaml").read_text())["name"]
    board = Leaderboard(f"sqlite:///{run_dir / 'leaderboard.db'}", name)
    for entry in board.entries():  # ranked by the Sharpe ratio of the validation quarter: one number per policy
        assert abs(entry.score_mean) < 20 and entry.score_std == 0.0
    board.close()
    assert "podium backtest" in result.output  # the next command, with the run directory
    out = tmp_path / "bt"
    args = ["backtest", str(run_dir), "--start", "2016-01-04", "--end", "2016-03-31", "--top-k", "2", "--out", str(out)]
    result = runner.invoke(app, args, env=WIDE)
    assert result.exit_code == 0, result.output
    assert "ensemble of 2" in result.output and "DIA" in result.output
    daily = list(csv.DictReader((out / "backtest.csv").open()))
    assert daily[0]["date"] == "2016-01-04" and daily[-1]["date"] == "2016-03-31"
    # --top-k beyond the leaderboard: what there is, with a warning
    result = runner.invoke(app, [*args[:-4], "--top-k", "5", "--out", str(tmp_path / "bt5")], env=WIDE)
    assert result.exit_code == 0, result.output
    held = re.search(r"warning: top_k=5 asked for, but .*: its leaderboard holds ([23]);", result.output)
    assert held and f"ensemble of {held.group(1)}" in result.output, result.output
    # dates written with slashes name one directory, not three
    result = runner.invoke(app, ["backtest", str(run_dir), "--start", "2016/01/04", "--end", "2016/02/26"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert (run_dir / "backtest_2016-01-04_2016-02-26" / "backtest.csv").is_file()
    assert not (run_dir / "backtest_2016").exists()
    # an ensemble by default lands beside the champion's report, not over it (as the README runs it)
    champion = (run_dir / "backtest_2016-01-04_2016-01-29" / "metrics.csv").read_bytes()  # the config's own
    top2 = ["backtest", str(run_dir), "--start", "2016-01-04", "--end", "2016-01-29", "--top-k", "2"]
    result = runner.invoke(app, top2, env=WIDE)
    assert result.exit_code == 0, result.output
    assert (run_dir / "backtest_2016-01-04_2016-01-29" / "metrics.csv").read_bytes() == champion
    assert (run_dir / "backtest_2016-01-04_2016-01-29_top2" / "metrics.csv").is_file()


def test_a_run_directory_where_a_file_or_a_tournament_belongs_says_what_it_is_and_the_command(tmp_path):
    """``podium tournament runs/t`` said "config file runs/t does not exist"; ``podium leaderboard`` of a pod's run
    said it held no tournament and offered to start one."""
    from podium.config import ConfigError
    from podium.tournament import leaderboard, resume_tournament

    tour, pod, empty = tmp_path / "tour", tmp_path / "pod", tmp_path / "empty"
    (tour / "pods" / "p0001").mkdir(parents=True)
    (tour / "tournament.yaml").write_text("name: t\nconfig: {}\n")
    (tour / "pods" / "p0001" / "spec.yaml").write_text("env: CartPole-v1\n")
    pod.mkdir()
    (pod / "spec.yaml").write_text("env: CartPole-v1\n")
    empty.mkdir()
    member = tour / "pods" / "p0001"

    def error(*args: str) -> str:
        result = runner.invoke(app, list(args), env=WIDE)
        assert result.exit_code == 2 and "does not exist" not in result.output, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, result.output
        return lines[0]

    said = error("tournament", str(tour))
    assert f"config file {tour} is a directory, not a YAML file; {tour} is a tournament's run directory" in said
    assert f"'podium tournament resume {tour}'" in said and f"'podium leaderboard {tour}'" in said
    said = error("tournament", str(pod))
    assert "is a directory, not a YAML file" in said and f"'podium eval {pod}'" in said
    assert "is a directory, not a YAML file; give the path of a YAML file" in error("tournament", str(empty))
    for args in (("leaderboard", str(pod)), ("tournament", "resume", str(pod))):
        said = error(*args)
        assert f"{pod} holds no tournament; {pod} is a single pod's run directory (podium train)" in said
        assert f"'podium eval {pod}'" in said
    said = error("leaderboard", str(member))
    assert f"{member} is pod p0001 of the tournament in {tour}: see it ranked with 'podium leaderboard {tour}'" in said
    for call in (lambda: leaderboard(pod), lambda: resume_tournament(member)):
        try:
            call()
        except ConfigError as exc:
            assert "holds no tournament;" in str(exc) and "podium eval" in str(exc)
        else:
            raise AssertionError("a pod's run directory was taken for a tournament's")


def test_a_bad_value_from_an_option_is_blamed_on_the_option_not_the_config_file(tmp_path):
    """``podium tournament t.yaml --seconds -5`` said "t.yaml: seconds: ...", as if the file held -5."""
    config = _yaml(tmp_path, seconds=10)
    out = ["--run-dir", str(tmp_path / "r"), "--no-progress"]
    result = runner.invoke(app, ["tournament", config, "--seconds", "-5", *out], env=WIDE)
    assert result.exit_code == 2 and "error: command line --seconds: Input should be greater than 0" in result.output
    result = runner.invoke(app, ["tournament", config, "--pods", "0", *out], env=WIDE)
    assert result.exit_code == 2 and result.output.count("command line --pods: Input should be greater") == 1
    assert "t.yaml: pool" not in result.output, result.output
    bad = _yaml(tmp_path, steps=-1, seconds=10)  # the file's own mistake is still the file's
    result = runner.invoke(app, ["tournament", bad, "--seconds", "-5", *out], env=WIDE)
    assert result.exit_code == 2 and "t.yaml: steps: Input should be greater than 0" in result.output
    assert "command line --seconds: Input" in result.output and "t.yaml: seconds" not in result.output
    assert not (tmp_path / "r").exists()
