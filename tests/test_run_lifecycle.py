"""A run's life as a user meets it: Ctrl-C and SIGTERM save every step, a run directory belongs to one
run, and resuming says plainly what it does."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

import podium
import podium.envs as podium_envs
from podium.api import NothingToDoWarning
from podium.cli import app
from podium.config import ConfigError, PodSpec
from podium.pod import Pod, PodInterrupted
from podium.rundir import PodDir, RunDirError
from podium.store import CheckpointError, load_checkpoint, save_checkpoint
from podium.tournament import tournament

FAST = {"tensorboard": False, "eval_episodes": 8}
runner = CliRunner()


def _metric_steps(run_dir: Path) -> list[int]:
    """The env-step count of every learning phase logged in ``metrics.csv``, in order."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return []
    with path.open() as f:  # the pod may be writing it: a header or a row not yet whole is no row
        rows = csv.DictReader(f)
        return [int(r["step"]) for r in rows if r.get("name") == "charts/SPS" and (r.get("step") or "").isdigit()]


def _evaluations(run_dir: Path) -> int:
    path = run_dir / "curve.csv"
    if not path.is_file():
        return 0
    with path.open() as f:
        return len(list(csv.DictReader(f)))


def _wait_for(condition, timeout: float = 120.0, what: str = "") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


# ----------------------------------------------------------------- Ctrl-C / SIGTERM
MOMENTS = {
    # SAC during its random warm-up, before any learning or evaluation
    "sac-warm-up": ("sac", {"learning_starts": 100_000}, lambda d: len(_metric_steps(d)) >= 3),
    # SAC learning, after its first evaluation (replay buffer and optimiser state both matter)
    "sac-learning": ("sac", {"learning_starts": 200}, lambda d: _evaluations(d) >= 1),
    # PPO with an evaluation (inline: the pod is inside it) every learning phase
    "ppo-evaluating": ("ppo", {}, lambda d: len(_metric_steps(d)) >= 4),
}


# SIGINT and SIGTERM reach the same handler (podium/pod/pod.py notes both): SIGINT's exit code and message are
# checked at the cheapest moment; at the other two it runs with `make test-slow`, and SIGTERM covers those moments
SIGNAL_CASES = [
    pytest.param(
        sig,
        moment,
        id=f"{sig.name}-{moment}",
        marks=[pytest.mark.slow] if sig == signal.SIGINT and moment != "sac-warm-up" else [],
    )
    for sig in (signal.SIGINT, signal.SIGTERM)
    for moment in MOMENTS
]


@pytest.mark.parametrize(("sig", "moment"), SIGNAL_CASES)
def test_a_signal_saves_every_step_and_the_run_resumes_from_there(tmp_path, moment, sig):
    algo, hparams, ready = MOMENTS[moment]
    run_dir = tmp_path / "run"
    config = tmp_path / "run.yaml"
    spec = {"env": "Pendulum-v1", "algo": algo, "seconds": 120, "hparams": hparams, "eval_every": 400, **FAST}
    if moment == "ppo-evaluating":
        spec.update(eval_every=1, eval_mode="inline", eval_episodes=64)
    config.write_text(yaml.safe_dump(spec))
    cmd = [sys.executable, "-m", "podium.cli", "train", "--config", str(config), "--run-dir", str(run_dir)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "300"}
    )
    try:
        _wait_for(lambda: ready(run_dir), what=f"{moment} to begin")
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, output
    assert f"podium train --resume {run_dir}" in output and "Traceback" not in output
    saved = load_checkpoint(PodDir(run_dir).last)
    trained = _metric_steps(run_dir)
    assert saved["counters"]["steps"] == trained[-1]  # every step trained is in the checkpoint
    if algo == "sac":
        replay = load_checkpoint(PodDir(run_dir).replay)
        assert replay["steps"] == trained[-1] and replay["replay"]["obs"].shape[0] == trained[-1]
    # resume: it continues exactly where it stopped and counts nothing twice
    more = trained[-1] + 3 * (trained[-1] - trained[-2])
    report = podium.train(resume=run_dir, steps=more, seconds=120)
    after = _metric_steps(run_dir)
    assert after[: len(trained)] == trained and after == sorted(set(after))
    assert after[len(trained)] == trained[-1] + (trained[-1] - trained[-2])
    assert report.steps == more and report.stop_reason == "steps"


def test_ctrl_c_from_python_raises_pod_interrupted_after_saving(tmp_path):
    run_dir = tmp_path / "run"

    def interrupt_when_training() -> None:
        _wait_for(lambda: len(_metric_steps(run_dir)) >= 2, what="training")
        os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started as a background job
    thread = threading.Thread(target=interrupt_when_training, daemon=True)
    thread.start()
    with pytest.raises(PodInterrupted) as info:
        podium.train("CartPole-v1", "ppo", seconds=60, run_dir=run_dir, progress=False, **FAST)
    thread.join()
    assert isinstance(info.value, KeyboardInterrupt) and info.value.exit_code == 130
    assert info.value.steps == load_checkpoint(PodDir(run_dir).last)["counters"]["steps"] == _metric_steps(run_dir)[-1]
    assert "podium train --resume" in str(info.value)
    assert signal.getsignal(signal.SIGINT) is before  # the pod gave the handler back


# ----------------------------------------------------------------- one run per directory
def test_a_used_run_directory_is_refused_with_the_choices_and_overwrite_clears_it(tmp_path):
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "sac", steps=600, run_dir=run_dir, snapshot_every=0.01, **FAST)
    first_snapshots = PodDir(run_dir).snapshot_files()
    assert first_snapshots
    with pytest.raises(RunDirError, match=r"--resume.*--overwrite") as info:
        podium.train("Pendulum-v1", "sac", steps=600, run_dir=run_dir, **FAST)
    assert isinstance(info.value, ValueError)
    assert PodDir(run_dir).snapshot_files() == first_snapshots  # refused before touching anything
    mine = [run_dir / "notes.txt", run_dir / "checkpoints" / "my_model.ckpt", run_dir / "tb" / "events.other"]
    for path in mine:  # overwrite deleted checkpoints/ and tb/ whole, files of other tools with them
        path.parent.mkdir(exist_ok=True)
        path.write_text("mine")
    podium.train("Pendulum-v1", "ppo", steps=1024, run_dir=run_dir, overwrite=True, **FAST)
    assert PodDir(run_dir).snapshot_files() == []  # the first run's snapshots do not mix into the second
    assert not PodDir(run_dir).replay.exists()  # nor its replay buffer
    assert load_checkpoint(PodDir(run_dir).last)["algo"] == "ppo"
    assert all(path.read_text() == "mine" for path in mine)  # overwrite deletes runs, not the user's files


def test_a_folder_of_another_tools_checkpoints_is_not_a_run(tmp_path):
    """A project folder with checkpoints/ and tb/ of its own was taken for a podium run "without a checkpoint",
    to be deleted with --overwrite."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "my_model.ckpt").write_text("mine")
    (tmp_path / "tb").mkdir()
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=tmp_path, **FAST)
    assert (tmp_path / "checkpoints" / "my_model.ckpt").read_text() == "mine"
    assert PodDir(tmp_path).last.is_file()


def test_overwrite_deletes_nothing_when_the_new_run_is_refused(tmp_path):
    """overwrite used to delete the old run first, then find the new run's mistake: both were lost."""
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "sac", steps=600, run_dir=run_dir, **FAST)
    files = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if p.is_file())
    with pytest.raises(ConfigError, match="learning_rat"):
        podium.train("Pendulum-v1", "sac", steps=600, run_dir=run_dir, overwrite=True, hparams={"learning_rat": 1})
    with pytest.raises(ConfigError, match=r"init_checkpoint .* lies in .*copy the checkpoint out of it first"):
        podium.train(
            "Pendulum-v1", "sac", steps=600, run_dir=run_dir, overwrite=True, init_checkpoint=PodDir(run_dir).best
        )
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if p.is_file()) == files
    assert load_checkpoint(PodDir(run_dir).last)["algo"] == "sac"


def test_the_command_line_refuses_a_used_run_directory_and_accepts_overwrite(tmp_path):
    args = ["train", "--env", "Pendulum-v1", "--algo", "ppo", "--steps", "512", "--run-dir", str(tmp_path / "r")]
    args += ["--no-progress"]
    assert runner.invoke(app, args, env={"COLUMNS": "300"}).exit_code == 0
    again = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert again.exit_code == 2 and "already holds a run" in again.output and "--overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"], env={"COLUMNS": "300"}).exit_code == 0


def test_a_tournament_and_a_pod_never_share_a_directory(tmp_path):
    pod_dir = tmp_path / "pod"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=pod_dir, **FAST)
    from podium.config import ConfigError

    with pytest.raises(ConfigError, match="holds a pod's run"):
        tournament(env="Pendulum-v1", algos={"ppo": 1}, seconds=5, run_dir=pod_dir, backend="inline")
    t_dir = tmp_path / "t"
    tournament(
        env="Pendulum-v1",
        algos={"ppo": 1},
        steps=1024,
        pod={"steps": 1024, "tensorboard": False},
        run_dir=t_dir,
        backend="inline",
        progress=False,
    )
    with pytest.raises(RunDirError, match="holds a tournament"):
        podium.train("Pendulum-v1", "ppo", steps=512, run_dir=t_dir, overwrite=True, **FAST)


# ----------------------------------------------------------------- resume says what it does
def test_resume_of_a_checkpoint_file_or_a_tournament_names_what_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    podium.train("CartPole-v1", "ppo", steps=512, run_dir=run_dir, **FAST)
    with pytest.raises(CheckpointError, match=rf"run directory, not a file .*: resume {run_dir}, the run"):
        podium.train(resume=PodDir(run_dir).last, steps=1024)  # it said the file could not be written in
    t_dir = tmp_path / "t"
    tournament(
        env="CartPole-v1",
        algos={"ppo": 1},
        steps=512,
        pod={"steps": 512, **FAST},
        run_dir=t_dir,
        backend="inline",
        progress=False,
    )
    with pytest.raises(RunDirError, match=r"holds a tournament, not a pod: podium tournament resume"):
        podium.train(resume=t_dir, steps=1024)  # it said last.pt did not exist
    with pytest.raises(CheckpointError, match=r"missing does not exist: resume takes the run directory of a pod"):
        podium.train(resume=tmp_path / "missing", steps=1024)  # it said checkpoints/last.pt did not exist
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"empty holds no pod's run .*: nothing to resume"):
        podium.train(resume=tmp_path / "empty", steps=1024)
    with pytest.raises(ConfigError, match=r"hparams must be a mapping .* got list"):
        podium.train("CartPole-v1", "ppo", steps=512, hparams=[("gamma", 0.9)], run_dir=tmp_path / "x")


def test_resume_with_a_spent_budget_says_there_is_nothing_to_do(tmp_path):
    run_dir = tmp_path / "run"
    first = podium.train("Pendulum-v1", "ppo", steps=2048, run_dir=run_dir, **FAST)
    logged = _metric_steps(run_dir)
    with pytest.warns(NothingToDoWarning, match=r"nothing to do: .*give steps \(--steps\) larger than 2,048"):
        report = podium.train(resume=run_dir, steps=1024)  # (SB3's learn() adds steps: this says it did not)
    assert report.steps == first.steps and _metric_steps(run_dir) == logged
    assert "nothing to do" in report.message and "totals" in report.message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the command prints it once, as its note, not as a Python warning too
        result = runner.invoke(app, ["train", "--resume", str(run_dir), "--steps", "1024"], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and result.output.count("nothing to do") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", NothingToDoWarning)
        longer = podium.train(resume=run_dir, steps=4096)
    assert longer.steps == 4096 and longer.message == ""


def test_a_pod_stopped_after_its_last_step_scores_its_final_policy_when_resumed(tmp_path, monkeypatch):
    """Stopped (Ctrl-C, SIGTERM, SIGKILL) after its last learning phase but before its final evaluation, a pod
    resumed to 'nothing to do': no final score, a best of -inf and a best.pt that did not exist."""
    import podium.pod.pod as pod_module

    run_dir = tmp_path / "run"
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=2048, eval_every=100_000, **FAST)  # scored only at the end

    def killed(self, service, signals=None):  # the final evaluation never happens
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(pod_module.Pod, "_wait", killed)
        with pytest.raises(KeyboardInterrupt):
            Pod(spec, run_dir, progress=False).run()
    assert load_checkpoint(PodDir(run_dir).last)["counters"]["steps"] >= 2048
    with pytest.warns(NothingToDoWarning, match="only the final evaluation was left to do"):
        report = podium.train(resume=run_dir)
    assert math.isfinite(report.score_mean) and math.isfinite(report.last_mean)
    assert report.curve and report.curve[-1]["step"] == report.steps and PodDir(run_dir).best.is_file()
    assert "only the final evaluation was left to do" in report.message
    with pytest.warns(NothingToDoWarning, match="nothing to do"):
        again = podium.train(resume=run_dir)  # now there is nothing left
    assert "nothing to do" in again.message and again.score_mean == report.score_mean


def test_resume_removes_what_a_killed_write_left_behind(tmp_path):
    """A write killed mid-way leaves its temporary file (a replay buffer's can be gigabytes): resume cleans up."""
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "sac", steps=600, run_dir=run_dir, **FAST)
    checkpoints = PodDir(run_dir).checkpoints
    partial = [checkpoints / ".replay.pt.abc123.tmp", checkpoints / ".last.pt.x_9.tmp"]
    for path in partial:
        path.write_bytes(b"half a checkpoint")
    (checkpoints / "notes.tmp").write_text("the user's")  # not one of podium's temporaries
    podium.train(resume=run_dir, steps=1200)
    assert not any(path.exists() for path in partial) and (checkpoints / "notes.tmp").exists()


def test_resume_with_another_target_judges_it_anew(tmp_path):
    run_dir = tmp_path / "run"
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=2048, target=-5000.0, confirm_episodes=0, **FAST)
    first = Pod(spec, run_dir, progress=False).run()
    assert first.reached_target and first.stop_reason == "target"
    with pytest.warns(NothingToDoWarning, match="already reached its target"):
        again = podium.train(resume=run_dir, steps=2048)  # same target: nothing to do
    assert again.reached_target and "already reached its target" in again.message
    assert "drop it (--no-target; Python: target=None)" in again.message
    on = podium.train(resume=run_dir, steps=first.steps + 1024, target=None)  # dropped: trains on past it
    assert on.stop_reason == "steps" and on.steps >= first.steps + 1024 and not on.reached_target
    assert load_checkpoint(PodDir(run_dir).last)["spec"]["target"] is None
    harder = podium.train(resume=run_dir, steps=on.steps + 1024, target=-1.0)  # out of reach so soon
    assert not harder.reached_target and harder.time_to_target is None and harder.stop_reason == "steps"
    more = ["train", "--resume", str(run_dir), "--no-target", "--steps", str(harder.steps + 512), "--no-progress"]
    result = CliRunner().invoke(app, more)
    assert result.exit_code == 0, result.output
    assert load_checkpoint(PodDir(run_dir).last)["spec"]["target"] is None
    for args in (["--env", "Pendulum-v1"], ["--resume", str(run_dir), "--target", "-3"]):
        result = CliRunner().invoke(app, ["train", *args, "--no-target"], env={"COLUMNS": "200"})
        assert result.exit_code == 2 and "--no-target drops a resumed run's target" in result.output, result.output


def test_resume_keeps_a_best_snapshot_scored_after_the_last_checkpoint(tmp_path):
    """best.pt is written whenever a better snapshot is scored, last.pt every ``checkpoint_every`` seconds: a
    run killed in between resumes with best.pt's score as its best, so a worse snapshot cannot replace it."""
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "ppo", steps=1024, run_dir=run_dir, **FAST)
    best = PodDir(run_dir).best
    payload = load_checkpoint(best)
    payload["counters"].update(best_mean=1e6, best_std=0.0)  # as if scored after last.pt was written
    save_checkpoint(best, {k: v for k, v in payload.items() if k != "format"})
    assert Pod.resume(run_dir, progress=False).best_mean == 1e6
    with pytest.warns(NothingToDoWarning):
        report = podium.train(resume=run_dir, steps=2048)
    assert report.steps == 2048 and report.score_mean == 1e6
    assert load_checkpoint(best)["counters"]["best_mean"] == 1e6


def test_a_resumed_run_logs_each_step_once(tmp_path):
    """A run killed after its last checkpoint had logged steps past it; resumed from the checkpoint it logged
    them again, so metrics.csv (and TensorBoard) went 21504, 22528, 15360, ..."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    fields = {**FAST, "tensorboard": True}
    podium.train("Pendulum-v1", "ppo", steps=2048, run_dir=run_dir, **fields)
    with (run_dir / "metrics.csv").open("a") as f:  # what a killed leg logged after the checkpoint
        f.write("50000,charts/SPS,1\n60000,charts/SPS,1\n70000,charts/SP")
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run_dir / "tb")) as writer:
        writer.add_scalar("charts/SPS", 1.0, 50_000)
    report = podium.train(resume=run_dir, steps=6144)
    steps = _metric_steps(run_dir)
    assert steps == sorted(set(steps)) and steps[-1] == report.steps == 6144
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    logged = [e.step for e in events.Scalars("charts/SPS")]
    assert 50_000 not in logged and logged[-1] == 6144


def test_a_resumed_run_continues_its_schedules_and_draws_new_random_numbers(tmp_path):
    """Resumed with a larger budget, DQN's epsilon jumped back up (0.05 -> 0.62 here): its decay was laid out
    anew over the new budget. And every resumed leg re-seeded the agent's random stream (exploration noise,
    warm-up actions, replay sampling) exactly as at the run's start, so each leg replayed the same numbers."""
    run_dir = tmp_path / "run"
    hparams = {"exploration_fraction": 0.5, "learning_starts": 200}
    first = Pod(PodSpec(env="CartPole-v1", algo="dqn", steps=2000, hparams=hparams, **FAST), run_dir, progress=False)
    start = first.agent.generator.get_state()
    first.run()
    final = first.agent.config.final_eps
    assert first.agent.epsilon() == pytest.approx(final)
    resumed = Pod.resume(run_dir, progress=False, steps=10_000)
    assert resumed.agent.epsilon() == pytest.approx(final)
    assert not torch.equal(resumed.agent.generator.get_state(), start)
    fresh = Pod(PodSpec(env="CartPole-v1", algo="dqn", steps=10_000, hparams=hparams, **FAST), tmp_path / "b")
    assert fresh.agent.epsilon() == 1.0 and fresh.agent.budget_steps == 10_000  # a new run lays it out anew


def test_a_replay_buffer_older_than_the_checkpoint_is_named_when_resumed(tmp_path):
    """With ``checkpoint_every: 0`` the buffer is written only when a run stops cleanly: a run killed later
    resumed with the buffer of an earlier stop, silently."""
    run_dir = tmp_path / "run"
    spec = dict(env="Pendulum-v1", algo="sac", checkpoint_every=0, hparams={"learning_starts": 100}, **FAST)
    podium.train(**spec, steps=400, run_dir=run_dir)
    older = PodDir(run_dir).replay.read_bytes()
    podium.train(resume=run_dir, steps=800)
    PodDir(run_dir).replay.write_bytes(older)  # as if killed after step 400's buffer was saved
    with pytest.warns(UserWarning, match="saved at env step 400, the checkpoint at step 800"):
        pod = Pod.resume(run_dir, progress=False, steps=1200)
    assert pod._replay is not None  # still used: old experience is better than none


def test_a_loaded_policy_is_scored_on_the_env_implementation_it_trained_on(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, native_env=False, **FAST)
    made, original = [], podium_envs.make

    def make(*args, **kwargs):
        env = original(*args, **kwargs)
        made.append((kwargs.get("native"), env))
        return env

    monkeypatch.setattr(podium_envs, "make", make)
    policy = podium.load(run_dir)
    mean, _ = policy.evaluate(episodes=4)
    assert made[-1][0] is False and mean < 0  # gymnasium's own Pendulum, as in training
    assert made[-1][1].closed  # and its env is closed afterwards
    policy.evaluate(episodes=4, env="Pendulum-v1")  # another env named: podium's own implementation
    assert made[-1][0] is True


def test_resume_refuses_fields_it_cannot_change(tmp_path):
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, **FAST)
    from podium.config import ConfigError

    with pytest.raises(ConfigError, match="only steps, seconds and target"):
        podium.train(resume=run_dir, steps=1024, num_envs=8)


def test_two_pods_never_train_into_one_run_directory(tmp_path):
    """A second process (or a second pod of one process) used to train into a directory a running pod wrote
    to: with overwrite it deleted the running pod's checkpoints; with resume both wrote last.pt in turn."""
    run_dir = tmp_path / "run"
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=512, **FAST)
    first = Pod(spec, run_dir)  # a pod holds its directory from the moment it is made
    with pytest.raises(RunDirError, match=r"is in use: another pod is training into it"):
        Pod(spec, run_dir, overwrite=True)
    first.run()
    files = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if p.is_file())
    hold = f"from podium.rundir import DirLock; import time; lock = DirLock({str(run_dir)!r}); lock.acquire(); "
    hold += "print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)  # as a running pod
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match="is in use"):
            Pod.resume(run_dir, steps=1024)
        with pytest.raises(RunDirError, match="is in use"):
            podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, overwrite=True, **FAST)
        assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if p.is_file()) == files
    finally:
        holder.kill()
        holder.wait()
    assert Pod.resume(run_dir, steps=1024).run().steps >= 1024  # the lock died with its holder


def test_a_run_that_never_saved_a_checkpoint_is_not_offered_for_resume(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    PodDir(run_dir).spec.write_text("env: Pendulum-v1\n")  # a run that failed before its first checkpoint
    with pytest.raises(RunDirError, match=r"without a checkpoint .*, so there is nothing to resume"):
        podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, **FAST)
    with pytest.raises(CheckpointError, match=r"stopped before its first checkpoint.*again with --overwrite"):
        podium.train(resume=run_dir, steps=1024)  # it said only that last.pt did not exist
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, overwrite=True, **FAST)


def test_resume_refuses_a_run_directory_and_bad_budgets_in_one_line(tmp_path):
    """resume with run_dir (--run-dir) trained in the old directory and said nothing; a bad budget came out as
    pydantic's page-long ValidationError instead of the one line a new run gets."""
    run_dir = tmp_path / "run"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, **FAST)
    with pytest.raises(ConfigError, match=r"only steps, seconds and target can change \(got run_dir\)"):
        podium.train(resume=run_dir, run_dir=tmp_path / "other", steps=1024)
    with pytest.raises(ConfigError, match=r"^resume: steps: Input should be greater than 0 \(got -5\)$"):
        podium.train(resume=run_dir, steps=-5)
    with pytest.raises(ConfigError, match="seconds: Input should be a finite number"):
        podium.train(resume=run_dir, seconds=float("inf"))  # no budget at all, past the 'forever' check
    assert not (tmp_path / "other").exists()


def test_bad_run_directories_and_files_are_named_not_tracebacks(tmp_path):
    (tmp_path / "afile").write_text("x")
    for bad in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(RunDirError, match=r"cannot be a folder to write in: .*afile is a file; choose another"):
            podium.train("Pendulum-v1", "ppo", steps=512, run_dir=bad, **FAST)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match=r"list\.pt is not a podium checkpoint \(it holds a list\)"):
        load_checkpoint(tmp_path / "list.pt")  # AttributeError: 'list' object has no attribute 'get'
    spaced = tmp_path / "my runs" / "cart pole"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=spaced, **FAST)
    with pytest.raises(RunDirError, match=r"podium train --resume '[^']*/my runs/cart pole';"):
        podium.train("Pendulum-v1", "ppo", steps=512, run_dir=spaced, **FAST)  # a command to paste


def test_anneal_lr_without_a_step_budget_is_refused(tmp_path):
    """anneal_lr decays over the step budget; with seconds alone it silently did nothing."""
    with pytest.raises(ConfigError, match="anneal_lr decays the learning rate to 0 over the step budget"):
        podium.train("Pendulum-v1", "ppo", seconds=3, run_dir=tmp_path / "run", hparams={"anneal_lr": True}, **FAST)


def test_checkpoints_are_as_readable_as_the_other_files_of_a_run(tmp_path):
    """mkstemp makes its file 0600: best.pt and last.pt were unreadable to a colleague or a serving container
    of another user, while curve.csv beside them was not."""
    old = os.umask(0o022)
    try:
        podium.train("Pendulum-v1", "ppo", steps=512, run_dir=tmp_path / "run", **FAST)
    finally:
        os.umask(old)
    run = PodDir(tmp_path / "run")
    assert {oct(p.stat().st_mode & 0o777) for p in (run.last, run.best, run.curve)} == {"0o644"}


def test_a_refused_new_run_leaves_no_empty_directory_behind(tmp_path):
    with pytest.raises(ConfigError):
        podium.train("Pendulum-v1", "ppo", steps=512, run_dir=tmp_path / "new", hparams={"learning_rat": 1}, **FAST)
    assert not (tmp_path / "new").exists()
    with pytest.raises(Exception, match=r"typo does not exist: resume takes the run directory"):
        Pod.resume(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


def _set_then_sleep(event) -> None:
    event.set()
    time.sleep(30)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_does_not_keep_its_pods_directory_locked(tmp_path):
    """A pod's forked children (evaluator, learners, rollout workers) inherited its lock: killed, the pod left
    its directory locked for as long as a child lived on, and the resume was refused."""
    import multiprocessing

    from podium.rundir import DirLock

    lock = DirLock(tmp_path)
    lock.acquire()
    context = multiprocessing.get_context("fork")
    running = context.Event()
    child = context.Process(target=_set_then_sleep, args=(running,))
    child.start()
    try:
        assert running.wait(30)
        lock.release()  # as a killed pod's lock goes
        again = DirLock(tmp_path)
        again.acquire()  # the child lives on, and holds nothing
        assert again.held
        again.release()
    finally:
        child.kill()
        child.join()


def test_confirmation_seeds_are_never_used_twice_not_even_for_a_new_target(tmp_path, monkeypatch):
    """The confirmation seeds came from the count of confirmations for the current target: a resume with a new
    target confirmed its snapshots on the very episodes the first leg had used."""
    from podium.pod.evaluator import EvalResult, Evaluator

    seeds: list[int] = []
    evaluate = Evaluator.evaluate

    def scored(self, agent, seed=None):  # routine evaluations cross any target; confirmations never pass
        result = evaluate(self, agent, seed)
        confirming = self.env.num_envs == 100
        if confirming:
            seeds.append(seed)
        mean = 100.0 if confirming else 600.0
        return EvalResult(mean, 1.0, result.episodes, result.seconds, (mean,) * result.episodes)

    monkeypatch.setattr(Evaluator, "evaluate", scored)
    spec = PodSpec(
        env="CartPole-v1", algo="ppo", steps=2048, target=475, eval_every=1024, eval_mode="inline",
        tensorboard=False, eval_episodes=4,
    )  # fmt: skip
    Pod(spec, tmp_path / "run", progress=False).run()
    first = list(seeds)
    Pod.resume(tmp_path / "run", progress=False, steps=4096, target=450).run()
    second = seeds[len(first) :]
    assert first and second and not set(first) & set(second)
    # a kill after best.pt was written at a confirmation, before the next last.pt: last.pt knows of none
    from podium.store import load_checkpoint, save_checkpoint

    last = PodDir(tmp_path / "run").last
    payload = {k: v for k, v in load_checkpoint(last).items() if k != "format"}
    payload["counters"].update(confirm_seeds_used=0, confirmations=0)
    save_checkpoint(last, payload)
    done = len(seeds)
    Pod.resume(tmp_path / "run", progress=False, steps=6144, target=450).run()
    assert seeds[done:] and not set(seeds[done:]) & set(seeds[:done])
    # two kills in a row: the first lost last.pt's successors (last.pt is back at step 1,024 and neither it
    # nor best.pt knows of a confirmation: only the curve does), the second came right after the resumed leg
    # dropped the curve's rows past last.pt, before it saved anything
    for path in (last, PodDir(tmp_path / "run").best):
        payload = {k: v for k, v in load_checkpoint(path).items() if k != "format"}
        payload["counters"].update(confirm_seeds_used=0, confirmations=0)
        if path == last:
            payload["counters"].update(steps=1024, next_eval=2048)
        save_checkpoint(path, payload)

    class Killed(BaseException):
        pass

    def killed(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(Pod, "_budget_left", killed)  # the first thing after the curve is cut
        with pytest.raises(Killed):
            Pod.resume(tmp_path / "run", progress=False, steps=8192, target=450).run()
    done = len(seeds)
    Pod.resume(tmp_path / "run", progress=False, steps=8192, target=450).run()
    assert seeds[done:] and not set(seeds[done:]) & set(seeds[:done])


def test_a_tournaments_pod_is_resumed_with_its_tournament_not_alone(tmp_path, monkeypatch):
    """``podium train --resume runs/t/pods/p0001`` trained on in the tournament's directory: new checkpoints, curve
    and report behind the leaderboard's record of that pod."""
    t_dir = tmp_path / "t"
    pod_dir = t_dir / "pods" / "p0001"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=pod_dir, **FAST)
    (t_dir / "tournament.yaml").write_text("name: t\nconfig: {}\n")  # it is the tournament's pod p0001
    before = {p: p.read_bytes() for p in pod_dir.rglob("*") if p.is_file()}
    with pytest.raises(RunDirError, match=rf"pod p0001 of the tournament in {t_dir}: .*podium tournament resume"):
        podium.train(resume=pod_dir, steps=1024)
    result = runner.invoke(app, ["train", "--resume", str(pod_dir), "--steps", "1024"], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert f"Resume the tournament instead (podium tournament resume {t_dir};" in result.output
    monkeypatch.chdir(t_dir / "pods")
    with pytest.raises(RunDirError, match="Resume the tournament instead"):
        podium.train(resume="p0001", steps=1024)  # a relative path from inside pods/ too
    assert {p: p.read_bytes() for p in pod_dir.rglob("*") if p.is_file()} == before  # nothing lost or changed
    (t_dir / "tournament.yaml").unlink()  # a pod's run elsewhere resumes as before
    with pytest.warns(NothingToDoWarning):  # (its round had trained 2,048 steps)
        assert podium.train(resume=pod_dir, steps=1024).steps >= 1024


def test_a_new_run_in_a_tournaments_pods_folder_is_refused_with_or_without_overwrite(tmp_path):
    """``podium train --run-dir t/pods/p0001 --overwrite`` replaced the tournament's pod behind its leaderboard,
    and a new ``t/pods/p0009`` took a name the tournament gives its ninth pod (which then failed on it)."""
    t_dir = tmp_path / "t"
    pod_dir = t_dir / "pods" / "p0001"
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=pod_dir, **FAST)
    (t_dir / "tournament.yaml").write_text("name: t\nconfig: {}\n")
    before = {p: p.read_bytes() for p in t_dir.rglob("*") if p.is_file()}
    for run_dir, overwrite in ((pod_dir, True), (t_dir / "pods" / "p0009", False)):
        with pytest.raises(RunDirError, match=rf"lies in the pods folder of the tournament in {t_dir}"):
            podium.train("Pendulum-v1", "ppo", steps=512, run_dir=run_dir, overwrite=overwrite, **FAST)
    result = runner.invoke(
        app,
        ["train", "Pendulum-v1", "--steps", "512", "--run-dir", str(pod_dir), "--overwrite"],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 2 and "choose a run directory outside that folder" in result.output, result.output
    assert {p: p.read_bytes() for p in t_dir.rglob("*") if p.is_file()} == before  # nothing written or deleted
