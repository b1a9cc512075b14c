"""Selection that a lucky evaluation cannot fool: pods are ranked by a fresh re-score of their best snapshot,
and a pod displaces an entry of a full board only when it is better by more than the noise."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path

import pytest

from podium.config import PodSpec
from podium.pod import Pod, PodReport
from podium.rundir import PodDir
from podium.tournament import tournament
from podium.tournament.leaderboard import Leaderboard
from podium.tournament.updater import Updater, checkpoint_holds, score_of, selection_bar


def _board(url: str) -> Leaderboard:
    board = Leaderboard(url, f"t-{uuid.uuid4().hex[:8]}")
    board.create({"env": "Pendulum-v1"})
    return board


def _pod(board: Leaderboard, root: Path, number: int):
    fields = {"algo": "sac", "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "status": "running"}
    return board.add_pod(id=f"p{number:04d}", number=number, parent_id=None, run_dir=str(root), **fields)


def _report(run: PodDir, trained: float, selected: float, std: float = 10.0, episodes: int = 100) -> PodReport:
    """A pod whose best training-time evaluation said ``trained`` and whose fresh re-score said ``selected``."""
    return PodReport(
        **{"score_mean": trained, "score_std": std, "last_mean": trained, "last_std": std, "steps": 1000},
        **{"wall_time": 1.0, "reached_target": False, "time_to_target": None, "steps_to_target": None},
        **{"train_time_to_target": None, "stop_reason": "steps", "eval_time": 0.1, "run_dir": str(run.root)},
        checkpoint=str(run.best),
        selection_mean=selected,
        selection_std=std,
        selection_episodes=episodes,
    )


def test_pods_rank_by_their_fresh_score_and_a_lucky_evaluation_displaces_nobody(db_url, tmp_path):
    board = _board(db_url)
    updater = Updater(board, size=2, margin=1.0)  # noise of a difference here: sqrt(2 * 10^2 / 100) = 1.41
    offers = [
        (1, -200.0, -150.0),  # a steady pod
        (2, -250.0, -160.0),
        (3, -100.0, -159.0),  # a lucky training-time evaluation; its fresh score is inside the noise of -160
        (4, -300.0, -155.0),  # a dull training curve, but better than -160 by more than the noise
    ]
    ranks = {}
    for number, trained, selected in offers:
        run = PodDir(tmp_path / f"p{number:04d}")
        ranks[number] = updater.offer(_pod(board, run.root, number), _report(run, trained, selected), elapsed=1.0)
    assert ranks == {1: 1, 2: 2, 3: None, 4: 2}
    assert [(e.pod_id, e.score_mean) for e in board.entries()] == [("p0001", -150.0), ("p0004", -155.0)]
    history = {h["pod_id"]: (h["outcome"], h["score_mean"]) for h in board.history()}
    assert history["p0003"] == ("rejected", -159.0)  # judged by its fresh score, not its lucky -100
    # with no margin (the default), the same small difference would have displaced an entry
    loose = Updater(_board(db_url), size=1)
    for number, selected in ((5, -160.0), (6, -159.0)):
        run = PodDir(tmp_path / f"p{number:04d}")
        assert loose.offer(_pod(loose.board, run.root, number), _report(run, -100.0, selected), elapsed=1.0) == 1


def test_a_pod_displaces_an_entry_only_by_more_than_margin_standard_errors(db_url, tmp_path):
    """The noise of a difference is sqrt((std_new^2 + std_pushed^2) / episodes): here sqrt((3^2 + 4^2) / 25) = 1
    exactly, so with margin 1 a pod must beat the entry by more than 1.0."""
    updater = Updater(_board(db_url), size=1, margin=1.0)
    ranks = []
    for number, selected, std in ((1, -100.0, 4.0), (2, -99.0, 3.0), (3, -98.8, 3.0)):
        run = PodDir(tmp_path / f"p{number:04d}")
        pod = _pod(updater.board, run.root, number)
        ranks.append(updater.offer(pod, _report(run, -500.0, selected, std=std, episodes=25), elapsed=1.0))
    assert ranks == [1, None, 1]  # better by exactly the noise: not enough; by 1.2: displaces
    assert [e.pod_id for e in updater.board.entries()] == ["p0003"]


def test_the_noise_of_a_difference_counts_each_scores_own_episodes(db_url, tmp_path):
    """An entry scored on 25 episodes (say, by routine evaluations) against a pod scored on 100: the noise is
    sqrt(3^2 / 100 + 4^2 / 25) = 0.85, not sqrt((3^2 + 4^2) / 100) = 0.5 (the newcomer's count for both)."""
    updater = Updater(_board(db_url), size=1, margin=1.0)
    ranks = []
    for number, selected, std, episodes in ((1, -100.0, 4.0, 25), (2, -99.3, 3.0, 100), (3, -99.0, 3.0, 100)):
        run = PodDir(tmp_path / f"p{number:04d}")
        pod = _pod(updater.board, run.root, number)
        ranks.append(updater.offer(pod, _report(run, -500.0, selected, std=std, episodes=episodes), elapsed=1.0))
    assert ranks == [1, None, 1]  # better by 0.7: inside the noise; by 1.0: displaces
    assert [(e.pod_id, e.score_episodes) for e in updater.board.entries()] == [("p0003", 100)]


def test_without_a_selection_score_a_pod_is_ranked_by_its_best_evaluation(tmp_path):
    """... over the episode count of its latest routine evaluation (which sets the noise of a comparison)."""
    selected = _report(PodDir(tmp_path / "p0001"), -200.0, -150.0, std=9.0, episodes=40)
    assert score_of(selected) == (-150.0, 9.0, 40)
    curve = [{"step": step, "eval_episodes": n} for step, n in ((1_000, 5), (2_000, 10), (3_000, 20))]
    unselected = dataclasses.replace(selected, selection_mean=None, selection_std=None, curve=curve)
    assert score_of(unselected) == (-200.0, 9.0, 20)
    assert score_of(dataclasses.replace(unselected, curve=[])) == (-200.0, 9.0, 1)  # no evaluation recorded


def test_an_entry_scored_by_selection_is_checked_against_the_score_its_checkpoint_records(tmp_path):
    from podium.store import save_checkpoint
    from podium.tournament.leaderboard import Entry

    run = PodDir(tmp_path / "p0001")
    save_checkpoint(
        run.best, {"counters": {"best_mean": -100.0, "best_std": 5.0, "selection_mean": -150.0, "selection_std": 9.0}}
    )
    entry = Entry("p0001", None, "sac", "Pendulum-v1", {}, -150.0, 9.0, 1, 1, 1.0, str(run.best), 0.0)
    assert checkpoint_holds(entry)
    assert not checkpoint_holds(dataclasses.replace(entry, score_mean=-100.0, score_std=5.0))


def _ppo_tournament(tmp_path, steps: int, pod_steps: int, select_episodes: int, **fields):
    """A small inline tournament of PPO pods on Pendulum, one at a time."""
    return tournament(
        env="Pendulum-v1",
        algos={"ppo": 1},
        steps=steps,
        pod={"steps": pod_steps, "eval_every": 1024, "tensorboard": False, "eval_episodes": 8},
        selection={"episodes": select_episodes},
        pool={"max": 1},
        run_dir=tmp_path / "t",
        backend="inline",
        progress=False,
        **fields,
    )


def test_a_tournament_ranks_its_pods_by_the_fresh_score_of_their_best_snapshot(tmp_path):
    from podium.tournament.backends import read_report
    from podium.tournament.orchestrator import open_leaderboard

    report = _ppo_tournament(tmp_path, steps=8192, pod_steps=4096, select_episodes=40)
    assert len(report.entries) == 2
    board = open_leaderboard(report.run_dir)
    try:
        for entry in board.entries():
            pod_report = read_report(PodDir(board.pod(entry.pod_id).run_dir).root)
            assert pod_report.selection_episodes == 40
            assert entry.score_mean == pod_report.selection_mean != pod_report.score_mean
    finally:
        board.close()


def test_once_the_board_is_full_each_new_pod_gets_the_last_entry_as_its_selection_bar(tmp_path):
    from podium.tournament.orchestrator import open_leaderboard

    report = _ppo_tournament(
        tmp_path, steps=6144, pod_steps=2048, select_episodes=8, leaderboard_size=1, generator={"scheme": "leaderboard"}
    )
    board = open_leaderboard(report.run_dir)
    try:
        pods = sorted(board.pods(), key=lambda pod: pod.number)
        history = sorted(board.history(), key=lambda h: h["pod_id"])
    finally:
        board.close()
    assert len(pods) == 3
    assert pods[0].spec["select_bar"] is None  # an empty board: every score enters
    for pod in pods[1:]:  # one pod at a time: the bar is the one entry when the pod started, the last to enter
        entered = [h for h in history if h["pod_id"] < pod.id and h["outcome"] == "entered"]
        assert pod.spec["select_bar"] == entered[-1]["score_mean"]


def _sac_orchestrator(run_dir: Path):
    """An orchestrator of a SAC tournament on Pendulum with target -150 (inline backend, one CPU), its clock
    started: for feeding it pod outcomes by hand."""
    from podium.tournament import load_tournament_config
    from podium.tournament.backends import Resources
    from podium.tournament.backends.inline import InlineBackend
    from podium.tournament.orchestrator import Orchestrator

    config = load_tournament_config(None, env="Pendulum-v1", algos={"sac": 1}, target=-150.0, seconds=60)
    orch = Orchestrator.start(config, run_dir=run_dir, backend=InlineBackend(Resources(cpus=1)), progress=False)
    orch._t0, orch._elapsed0 = time.monotonic(), 0.0
    return orch


def test_the_time_to_target_is_taken_by_the_score_the_tournament_stops_on(tmp_path):
    """A pod whose training-time best fell short of the target but whose fresh selection score reached it
    stops the tournament (the leaderboard ranks by the selection score): its time to target is recorded too,
    and a training-time crossing whose selection score falls short records none. "Reached" is the pods' own
    rule: the mean minus ``confirm_margin`` standard errors on the first try, more on each later one."""
    from podium.tournament.backends import PodOutcome, Resources
    from podium.tournament.backends.inline import InlineBackend
    from podium.tournament.orchestrator import Orchestrator
    from podium.tournament.scheduler import decide
    from podium.tournament.states import StopReason

    orch = _sac_orchestrator(tmp_path / "t")
    try:
        lucky = PodDir(tmp_path / "p0001")
        _pod(orch.board, lucky.root, 1)
        orch._collect(PodOutcome("p0001", _report(lucky, -140.0, -155.0)))
        assert orch._time_to_target is None  # a lucky training-time score is not the target
        noisy = PodDir(tmp_path / "p0002")
        _pod(orch.board, noisy.root, 2)
        orch._collect(PodOutcome("p0002", _report(noisy, -160.0, -149.0, std=20.0)))
        # above the target by less than the pods' confirmation margin (2 standard errors of 2.0): not reached
        assert orch._time_to_target is None and decide(orch.state()).stop is None
        # the second try at the target asks for 2.53 standard errors (podium.pod.evaluator.margin_for): -148
        # would have passed a first try (-148 - 2 x 1.0 = the target), not this one
        near = PodDir(tmp_path / "p0003")
        _pod(orch.board, near.root, 3)
        orch._collect(PodOutcome("p0003", _report(near, -160.0, -148.0)))
        assert orch._time_to_target is None and orch.board.info()["target_tries"] == 2
        real = PodDir(tmp_path / "p0004")
        _pod(orch.board, real.root, 4)
        orch._collect(PodOutcome("p0004", _report(real, -160.0, -146.0)))  # third try: -146 - 2.80 x 1.0
        assert orch._time_to_target is not None
        assert orch.board.info()["time_to_target"] == orch._time_to_target
        assert decide(orch.state()).stop == StopReason.TARGET
        assert orch._report(StopReason.TARGET).reached_target
    finally:
        orch.board.close()
    # resumed with the same target, it stays reached; with a new one, it is reached (or not) anew
    for target, kept in ((-150.0, True), (-120.0, False)):
        again = Orchestrator.resume(tmp_path / "t", backend=InlineBackend(Resources(cpus=1)), target=target)
        try:
            info = again.board.info()
            assert (info["time_to_target"] is not None, info["target_tries"]) == ((True, 3) if kept else (False, 0))
        finally:
            again.board.close()


def test_a_result_that_reaches_the_target_lands_whole_or_not_at_all(tmp_path, monkeypatch):
    """The entry, the pod's "finished", its history row and the target's time are one transaction: an
    orchestrator killed between them used to leave a finished pod (never collected again) and no target."""
    from podium.tournament.backends import PodOutcome

    orch = _sac_orchestrator(tmp_path / "t")
    try:
        run = PodDir(tmp_path / "p0001")
        _pod(orch.board, run.root, 1)

        def killed(**values):
            raise KeyboardInterrupt  # the orchestrator dies as it writes the time to target

        with monkeypatch.context() as patch:
            patch.setattr(orch.board, "update_info", killed)
            with pytest.raises(KeyboardInterrupt):
                orch._collect(PodOutcome("p0001", _report(run, -140.0, -120.0)))
        assert orch.board.pod("p0001").status == "running"  # to be collected again, by the next orchestrator
        assert orch.board.entries() == [] and orch.board.history() == []
        assert orch.board.info()["time_to_target"] is None and orch._time_to_target is None
        orch._collect(PodOutcome("p0001", _report(run, -140.0, -120.0)))
        assert orch.board.pod("p0001").status == "finished" and len(orch.board.entries()) == 1
        assert orch.board.info()["time_to_target"] == orch._time_to_target is not None
    finally:
        orch.board.close()


def test_reading_the_board_waits_for_no_writer(tmp_path):
    """Reads took SQLite's write lock too, so a dashboard or 'podium leaderboard' queued behind the orchestrator
    (and it behind them) for up to a minute."""
    import threading

    url = f"sqlite:///{tmp_path / 'board.db'}"
    writer = _board(url)
    reader = Leaderboard(url, writer.name)
    read = []
    with writer.transaction():
        _pod(writer, tmp_path / "p0001", 1)
        thread = threading.Thread(target=lambda: read.append((reader.info()["name"], reader.pods())))
        thread.start()
        thread.join(10)  # a read under the old lock waited out SQLite's 60 s busy timeout
        assert read == [(writer.name, [])]  # it read at once, and saw nothing uncommitted
    assert [p.id for p in reader.pods()] == ["p0001"]
    writer.close(), reader.close()


def _entry(mean: float):
    from podium.tournament.leaderboard import Entry

    fields = {"parent_id": None, "algo": "sac", "env": "Pendulum-v1", "hparams": {}, "score_std": 10.0}
    return Entry(
        pod_id="p", score_mean=mean, steps=1, total_steps=1, wall_time=1.0, checkpoint="", created=0.0, **fields
    )


def test_the_selection_bar_is_the_last_entry_of_a_full_board_or_the_target_if_lower():
    entries = [_entry(-150.0), _entry(-170.0)]
    assert selection_bar(entries, size=3, target=None) is None  # room on the board: every score enters
    assert selection_bar(entries, size=2, target=None) == -170.0
    assert selection_bar(entries, size=2, target=-200.0) == -200.0  # a score at the target stops the tournament
    assert selection_bar(entries, size=2, target=-100.0) == -170.0


def test_a_pod_surely_below_its_selection_bar_plays_a_quarter_of_the_episodes(tmp_path):
    """Split into parts, the selection score is the one a single evaluation gives (gymnasium's copies are seeded
    per episode); with a bar no policy reaches it stops after the first part, with one every policy passes it
    plays every episode; a tensor env, and parts under 25 episodes, play every episode at once."""
    scores = {}
    base = PodSpec(
        env="CartPole-v1", algo="ppo", steps=1024, native_env=False, num_envs=4, eval_every=512,
        eval_episodes=4, tensorboard=False, seed=3, select_episodes=100,
    )  # fmt: skip
    for name, bar in [("none", None), ("low", -1e9), ("high", 1e9)]:
        report = Pod(base.model_copy(update={"select_bar": bar}), tmp_path / name).run()
        scores[name] = (report.selection_mean, report.selection_std, report.selection_episodes)
    assert scores["none"][2] == scores["low"][2] == 100
    assert scores["none"] == scores["low"]
    assert scores["high"][2] == 25
    tensor = base.model_copy(update={"native_env": True, "select_bar": 1e9})
    assert Pod(tensor, tmp_path / "tensor").run().selection_episodes == 100
    few = base.model_copy(update={"select_episodes": 40, "select_bar": 1e9})
    assert Pod(few, tmp_path / "few").run().selection_episodes == 40


def test_a_resumed_pod_takes_the_selection_bar_of_its_new_start(tmp_path, monkeypatch):
    """The bar is the board's and the target's as they stand when a pod (re)starts: a pod preempted under an
    old target must not keep that target's bar."""
    from podium.tournament.backends import PodJob, run_job

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=256, num_envs=4, tensorboard=False, select_bar=50.0)
    report = Pod(spec, tmp_path / "p").run()
    seen = []
    monkeypatch.setattr(Pod, "run", lambda self, plot=True: seen.append(self.spec.select_bar) or report)
    run_job(PodJob("p0001", spec.model_copy(update={"select_bar": None}), tmp_path / "p", resume=True))
    run_job(PodJob("p0001", spec.model_copy(update={"select_bar": 20.0}), tmp_path / "p", resume=True))
    assert seen == [None, 20.0]


def test_a_pod_stopped_during_its_selection_is_scored_when_it_resumes(tmp_path, monkeypatch):
    """A pod stopped (SIGTERM: a shrinking pool, a wind-down) while it played its selection episodes resumes with
    its budget spent: it used to return at once, and the leaderboard ranked it by its best training-time
    evaluation, the optimistic score selection exists to replace."""
    import signal

    from podium.pod import PodInterrupted
    from podium.store import load_checkpoint

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1024, num_envs=4, tensorboard=False, select_episodes=20)
    run_dir = tmp_path / "p"
    played = []
    real = Pod._selection_score

    def interrupted(self, agent):  # SIGTERM arrives while the selection episodes are played
        raise PodInterrupted(signal.SIGTERM, run_dir, self.steps)

    monkeypatch.setattr(Pod, "_selection_score", interrupted)
    with pytest.raises(PodInterrupted):
        Pod(spec, run_dir).run()
    best = load_checkpoint(PodDir(run_dir).best)
    assert "selection_mean" not in best["counters"]

    def counted(self, agent):
        played.append(1)
        return real(self, agent)

    monkeypatch.setattr(Pod, "_selection_score", counted)
    report = Pod.resume(run_dir).run()
    assert played == [1] and report.selection_episodes == 20 and report.selection_mean is not None
    again = Pod.resume(run_dir).run()  # scored once: the checkpoint keeps the score of the snapshot it holds
    assert played == [1] and again.selection_mean == report.selection_mean
