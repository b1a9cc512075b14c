"""Tournament configs (bad input is refused before any pod starts) and the generator's decisions."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from podium.algos.ppo import PPOConfig
from podium.algos.presets import PRESETS
from podium.algos.sac import SACConfig
from podium.config import ConfigError
from podium.tournament import TournamentConfig, load_tournament_config
from podium.tournament.generator import Generator, algo_shares, effective_hparams
from podium.tournament.leaderboard import Entry, PodRecord
from podium.tournament.orchestrator import Orchestrator, preflight
from podium.tournament.states import PodStatus

BASE = {"env": "Pendulum-v1", "seconds": 10, "pod": {"seconds": 2}}
CALMAR = {"score": "calmar"}
VALIDATION = {"period": ["2015-01-02", "2015-12-31"], "random_start": False, "score": "sharpe"}


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"algos": {"ppo": 1, "sacc": 1}}, "sac"),
        ({"algos": {"ppo": 0, "sac": 0}}, "no positive weight"),
        ({"algos": {"ppo": -1}}, "finite number >= 0"),
        ({"algos": {}}, "no algorithms"),
        ({"pool": {"min": 4, "max": 2}}, r"pool.min \(4\) is larger than pool.max \(2\)"),
        ({"pod": {"seconds": 2, "algo": "sac"}}, "pod.algo is set by the tournament itself; set algos"),
        # it overrode selection.episodes while the stop rule kept reading selection.episodes
        ({"pod": {"seconds": 2, "select_episodes": 0}}, "pod.select_episodes .* set selection.episodes"),
        ({"seed": -1}, "seed"),  # the generator refused it at the first pod, after the run had been created
        ({"pod": {"eval_every": 100}}, "pod.seconds or pod.steps"),
        ({"seconds": None}, "target, seconds or steps"),
        ({"hparams": {"td3": {"tau": 0.1}}, "algos": {"sac": 1}}, "hparams.td3: td3 is not among the algorithms"),
        (  # weight 0: its settings are never used (the message said td3 was not in algos, where the user had it)
            {"hparams": {"td3": {"tau": 0.1}}, "algos": {"sac": 1, "td3": 0}},
            r"td3 is not among the algorithms with a weight > 0 in algos \['sac'\]; give it a weight or remove",
        ),
        ({"leaderbord_size": 3}, "leaderbord_size: unknown field"),
        ({"generator": {"ranges": {"td3": {"tau": [0.5, 0.1]}}}}, r"ranges.td3.tau: need finite low < high"),
        ({"algos": {"sac": 1}, "generator": {"ranges": {"td3": {"tau": [0.1, 0.5]}}}}, "ranges.td3: td3 is not among"),
        (
            {"algos": {"sac": 1}, "generator": {"mutate": {"sac": ["batch_size"]}}},
            r"mutate.sac: 'batch_size' is not a mutable sac hyperparameter \(mutable: actor_lr, critic_lr",
        ),
        ({"algos": {"ppo": 1}, "generator": {"ranges": {"ppo": {"num_steps": [8, 64]}}}}, "'num_steps' is not a mut"),
        ({"generator": {"perturb": [0.8, -1.2]}}, "factors must be finite and > 0"),
        # booleans were read as 1.0 and 0.0
        ({"generator": {"perturb": [0.8, True]}}, r"generator.perturb: item 1 is true, a boolean among numbers"),
        (
            {"algos": {"td3": 1}, "generator": {"ranges": {"td3": {"tau": [False, 0.1]}}}},
            r"generator.ranges: td3.tau: item 0 is false, a boolean among numbers \(\[false, 0.1\]\)",
        ),
        ({"generator": {"mutate": {"sac": ["lr"]}}, "algos": {"sac": 1}}, "'lr' is not a mutable sac hyperparameter"),
        ({"generator": {"ranges": {"sac": {"lr": [0.1, 1]}}}, "algos": {"sac": 1}}, r"ranges.sac: 'lr' is not a mut"),
        ({"generator": {"ranges": {"sac": {"autotune_alpha": [0, 1]}}}, "algos": {"sac": 1}}, "autotune_alpha"),
        ({"generator": {"scheme": "pbt"}}, "leaderboard.*truncation"),
        # a field of the other scheme did nothing (an old config that set explore meant the leaderboard scheme)
        (
            {"generator": {"explore": 0.0, "parent": "best"}},
            "explore, parent only apply to scheme: leaderboard, and this generator's scheme is truncation, the "
            "default: set scheme: leaderboard to use them",
        ),
        ({"generator": {"scheme": "leaderboard", "ready_seconds": 5}}, "ready_seconds only applies to scheme: trunc"),
        (
            {"algos": {"td3": 1}, "generator": {"choices": {"td3": {"noise": ["ou", "gaussian"]}}}},
            r"choices.td3: 'noise' is not a setting td3 lets a tournament choose \(choices: noise_type\)",
        ),
        (
            {"algos": {"td3": 1}, "generator": {"choices": {"td3": {"noise_type": ["ou", "pink"]}}}},
            r"choices.td3.noise_type: 'pink' is not an option \(options: gaussian, ou\)",
        ),
        ({"algos": {"sac": 1}, "generator": {"choices": {"sac": {"use_sde": [True]}}}}, "at least two different"),
        ({"algos": {"sac": 1}, "generator": {"choices": {"td3": {"noise_type": ["ou", "gaussian"]}}}}, "not among the"),
    ],
)
def test_bad_configs_are_refused_with_the_field_named(fields, match):
    with pytest.raises(ConfigError, match=match):
        load_tournament_config(None, **{**BASE, **fields})


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"target": 200}, r"target 200 can never be reached on Pendulum-v1.*did you mean -200"),
        ({"env": "Pendulm-v1"}, "Pendulum-v1"),
        ({"algos": {"dqn": 1}}, "dqn cannot train on Pendulum-v1"),
        ({"hparams": {"sac": {"batch_sise": 3}}, "algos": {"sac": 1}}, "batch_sise: unknown field"),
        (  # read as a hidden layer of 1 unit
            {"hparams": {"sac": {"hidden_sizes": [64, True]}}, "algos": {"sac": 1}},
            r"pod spec for sac: hparams.hidden_sizes: item 1 is true, a boolean among numbers",
        ),
        ({"generator": {"ranges": {"sac": {"tau": [0.1, 2.0]}}}, "algos": {"sac": 1}}, r"sac.tau: 2 is not a valid"),
        (  # selecting on 2015 while training on 2009-2015: in-sample selection
            {"env": "StockTrading-v0", "algos": {"ppo": 1}, "pod": {"seconds": 2, "eval_env_kwargs": VALIDATION}},
            r"train period 2009-01-02\.\.2015-12-31 overlaps the validation period 2015-01-02\.\.2015-12-31",
        ),
        (
            {
                "env": "StockTrading-v0",
                "env_kwargs": {"period": ["2009-01-02", "2014-12-31"]},
                "algos": {"ppo": 1},
                "pod": {"seconds": 2, "eval_env_kwargs": VALIDATION},
                "backtest": {"start": "2015-06-01", "end": "2016-06-30"},
            },
            r"validation period .* overlaps the test period 2015-06-01",
        ),
        (  # selecting on 2015 a policy trained on 2016-17: it has seen the future
            {
                "env": "StockTrading-v0",
                "env_kwargs": {"period": ["2016-01-04", "2017-11-10"]},
                "algos": {"ppo": 1},
                "pod": {"seconds": 2, "eval_env_kwargs": VALIDATION},
            },
            r"the validation period 2015-01-02\.\.2015-12-31 comes before the train period 2016-01-04",
        ),
        ({"pod": {"seconds": 2, "device": "gpu"}}, r"pod.device: 'gpu' is not a device; use cpu, cuda"),
        (
            {"env": "StockTrading-v0", "algos": {"ppo": 1}, "pod": {"seconds": 2, "eval_env_kwargs": CALMAR}},
            r"pod.eval_env_kwargs .*score 'calmar' is not one of return, sharpe",
        ),
    ],
)
def test_preflight_catches_what_needs_the_env(fields, match, tmp_path):
    config = load_tournament_config(None, **{**BASE, **fields})
    with pytest.raises(ConfigError, match=match):
        preflight(config)
    with pytest.raises(ConfigError, match=match):  # and Orchestrator.start checks it before creating anything
        Orchestrator.start(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_gpu_pod_on_a_backend_without_gpus_is_refused_before_anything_starts(tmp_path):
    from podium.tournament.backends import Resources
    from podium.tournament.backends.inline import InlineBackend

    config = load_tournament_config(None, **{**BASE, "pod": {"seconds": 2, "device": "cuda:0"}})
    backend = InlineBackend(resources=Resources(cpus=2, gpus=0))
    with pytest.raises(ConfigError, match=r"pod.device: 'cuda:0', but the inline backend reports no GPU"):
        Orchestrator.start(config, run_dir=tmp_path / "run", backend=backend)
    assert not (tmp_path / "run").exists()


def test_algorithm_names_may_be_capitalised_wherever_they_key_a_field():
    """``algos: {TD3: 1}`` was accepted but ``hparams: {TD3: ...}`` was then refused as "TD3 is not in algos
    ['td3']", and ``generator.mutate`` keys likewise."""
    config = TournamentConfig(
        env="Pendulum-v1", seconds=10, pod={"seconds": 2}, algos={"TD3": 1}, hparams={"TD3": {"tau": 0.01}},
        generator={"mutate": {"TD3": ["tau"]}},
    )  # fmt: skip
    assert config.hparams == {"td3": {"tau": 0.01}} and config.generator.mutate == {"td3": ["tau"]}
    assert config.pod_spec("td3", 0).hparams["tau"] == 0.01


def test_yaml_errors_name_the_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("env: Pendulum-v1\npool: {min: 3, max: 1}\nseconds: 5\npod: {seconds: 1}\n")
    with pytest.raises(ConfigError, match=r"t\.yaml: pool: .*pool.min \(3\)"):
        load_tournament_config(path)


def _entry(pod_id: str, algo: str, mean: float, rank: int, hparams: dict) -> Entry:
    return Entry(
        pod_id, None, algo, "Pendulum-v1", hparams, mean, 1.0, 100, 100, 1.0, f"/c/{pod_id}.pt", time.time(), rank
    )


def test_the_pool_follows_the_algorithm_ratio():
    gen = Generator(TournamentConfig(**{**BASE, "algos": {"ppo": 2, "sac": 1, "td3": 1}}))
    running: list[str] = []
    for _ in range(8):
        running.append(gen.choose_algo(running, running))
    assert Counter(running) == {"ppo": 4, "sac": 2, "td3": 2}
    # a pool of 4 where sac left: sac is the one furthest below its share
    assert gen.choose_algo(["ppo", "ppo", "td3"], ["ppo", "ppo", "td3", "sac"]) == "sac"


def test_the_next_algorithm_is_the_one_furthest_below_its_share_once_the_pod_is_added():
    gen = Generator(TournamentConfig(**{**BASE, "algos": {"ppo": 3, "sac": 1}}))
    running: list[str] = []
    for _ in range(6):
        running.append(gen.choose_algo(running, running))
    assert running == ["ppo", "ppo", "sac", "ppo", "ppo", "ppo"]  # shares of a pool of 1, 2, 3, ...: 3/4 and 1/4
    # a tie in the running pool (a pool of 2 holding one ppo: each is half a pod short) goes to the algorithm
    # furthest below its share of every pod started so far: sac, which has not run yet
    assert gen.choose_algo(["ppo"], ["ppo", "ppo"]) == "sac"


def test_children_inherit_the_algorithm_and_mutate_inside_the_valid_range():
    config = TournamentConfig(
        **{
            **BASE,
            "algos": {"sac": 1},
            "generator": {"scheme": "leaderboard", "explore": 0.0, "mutation_prob": 1.0, "mutation_scale": 4.0},
        }
    )
    base = effective_hparams(config.pod_spec("sac", 0))
    # the parent's step size leaves room for the whole of [1/4, 4] inside the declared range (whatever the preset)
    parent = _entry("p0001", "sac", -150.0, 1, {**base, "tau": 0.09, "actor_lr": 1e-3})
    gen = Generator(config)
    taus, lrs = [], []
    for number in range(2, 60):
        plan = gen.next(number, [parent], [], ["sac"])
        assert plan.parent == parent and plan.spec.algo == "sac"
        assert plan.spec.init_checkpoint == "/c/p0001.pt" and plan.spec.preset is False
        assert plan.spec.num_envs == config.pod_spec("sac", 0).num_envs
        taus.append(plan.spec.hparams["tau"])
        lrs.append(plan.spec.hparams["actor_lr"])
        assert set(plan.mutated) == set(SACConfig.mutable)  # mutation_prob 1: all it declares
    assert min(taus) < 0.09 and max(taus) == SACConfig.mutable["tau"][1]  # clamped to the declared range
    assert min(lrs) >= 1e-3 / 4 and max(lrs) <= 1e-3 * 4 and len(set(lrs)) > 10
    assert min(lrs) < 1e-3 / 3 and max(lrs) > 1e-3 * 3  # the whole of [1/4, 4]


def test_explore_starts_fresh_pods_and_decisions_repeat_for_the_same_seed():
    config = TournamentConfig(**{**BASE, "algos": {"td3": 1}, "generator": {"scheme": "leaderboard", "explore": 0.5}})
    base = effective_hparams(config.pod_spec("td3", 0))
    entries = [_entry("p0001", "td3", -150.0, 1, base), _entry("p0002", "td3", -170.0, 2, base)]
    plans = [Generator(config).next(n, entries, [], []) for n in range(3, 203)]
    fresh = sum(p.parent is None for p in plans)
    assert 60 < fresh < 140
    assert all(p.spec.init_checkpoint is None and p.mutated == {} for p in plans if p.parent is None)
    parents = Counter(p.parent.pod_id for p in plans if p.parent is not None)
    assert parents["p0001"] > parents["p0002"] > 0  # rank-weighted choice
    again = [Generator(config).next(n, entries, [], []) for n in range(3, 203)]
    assert [p.spec for p in again] == [p.spec for p in plans]
    assert len({p.spec.seed for p in plans}) == len(plans)


def test_no_entry_of_the_chosen_algorithm_means_a_fresh_pod():
    config = TournamentConfig(
        **{**BASE, "algos": {"ppo": 1, "sac": 1}, "generator": {"scheme": "leaderboard", "explore": 0.0}}
    )
    sac_entry = _entry("p0001", "sac", -150.0, 1, effective_hparams(config.pod_spec("sac", 0)))
    plan = Generator(config).next(2, [sac_entry], ["sac"], ["sac"])
    assert plan.spec.algo == "ppo" and plan.parent is None


def test_a_parent_is_picked_by_rank_uniformly_or_the_best():
    """``generator.parent``: ``rank`` weighs the entries 1, 1/2, 1/3 (6/11, 3/11, 2/11 of the picks here)."""
    entries = [_entry(f"p000{i}", "sac", -100.0 * i, i, {}) for i in (1, 2, 3)]
    shares = {}
    for how in ("rank", "uniform", "best"):
        config = TournamentConfig(
            **{**BASE, "algos": {"sac": 1}, "generator": {"scheme": "leaderboard", "explore": 0.0, "parent": how}}
        )
        picks = Counter(Generator(config).next(n, entries, [], ["sac"]).parent.pod_id for n in range(2, 1202))
        shares[how] = [picks[e.pod_id] / 1200 for e in entries]
    assert shares["best"] == [1.0, 0.0, 0.0]
    assert shares["uniform"] == pytest.approx([1 / 3] * 3, abs=0.04)
    assert shares["rank"] == pytest.approx([6 / 11, 3 / 11, 2 / 11], abs=0.04)


def test_effective_hparams_are_the_defaults_then_the_preset_then_the_pods_own_as_stored():
    config = TournamentConfig(**{**BASE, "algos": {"ppo": 1}, "hparams": {"ppo": {"gamma": 0.9}}})
    hparams = effective_hparams(config.pod_spec("ppo", 0))
    preset = PRESETS[("ppo", "Pendulum-v1")].hparams
    assert (hparams["rollout_size"], hparams["learning_rate"], hparams["gamma"]) == (
        preset["rollout_size"],
        preset["learning_rate"],
        0.9,  # the tournament's own wins over the preset's
    )
    assert preset["learning_rate"] != PPOConfig().learning_rate  # so the preset did fill it in
    assert hparams == json.loads(json.dumps(hparams))  # JSON types: what the database stores and gives back
    without = effective_hparams(config.pod_spec("ppo", 0, preset=False))
    assert (without["rollout_size"], without["learning_rate"], without["gamma"]) == (
        PPOConfig().rollout_size,
        PPOConfig().learning_rate,
        0.9,
    )


def test_ranges_spread_fresh_pods_and_bound_mutations_and_resampling():
    ranges = {"exploration_noise": [0.05, 0.8], "ou_theta": [0.05, 0.5]}
    generator = {
        "scheme": "leaderboard",
        "explore": 1.0,
        "ranges": {"td3": ranges},
        "mutation_prob": 1.0,
        "mutation_scale": 4.0,
    }
    config = TournamentConfig(**{**BASE, "algos": {"td3": 1}, "generator": generator})
    base = effective_hparams(config.pod_spec("td3", 0))
    first = Generator(config).next(1, [], [], [])
    assert first.sampled == {} and first.spec.hparams == {}  # the first td3 pod: podium's defaults
    fresh = [Generator(config).next(n, [], [], ["td3"]) for n in range(2, 202)]
    assert all(p.mutated == {} and p.spec.hparams.keys() == {"exploration_noise", "ou_theta"} for p in fresh)
    with_base = TournamentConfig(
        **{**BASE, "algos": {"td3": 1}, "generator": generator, "hparams": {"td3": {"tau": 0.01}}}
    )
    assert Generator(with_base).next(2, [], [], ["td3"]).spec.hparams["tau"] == 0.01  # the config's own stay
    noise = [p.spec.hparams["exploration_noise"] for p in fresh]
    theta = [p.spec.hparams["ou_theta"] for p in fresh]
    assert all(0.05 <= x <= 0.8 for x in noise) and min(noise) < 0.1 and max(noise) > 0.5
    assert sum(x < 0.2 for x in noise) > 60  # log-uniform: half the draws below sqrt(0.05 * 0.8) = 0.2
    assert all(0.05 <= t <= 0.5 for t in theta) and len(set(theta)) > 50
    assert all(p.parent is None and p.sampled.keys() == {"exploration_noise", "ou_theta"} for p in fresh)

    config = TournamentConfig(
        **{**BASE, "algos": {"td3": 1}, "generator": {**generator, "explore": 0.0, "resample_prob": 0.5}}
    )
    parent = _entry("p0001", "td3", -150.0, 1, {**base, "exploration_noise": 0.7})
    children = [Generator(config).next(n, [parent], [], ["td3"]) for n in range(2, 202)]
    noise = [c.spec.hparams["exploration_noise"] for c in children]
    assert all(0.05 <= x <= 0.8 for x in noise)  # 0.7 * 4 would leave the range: clamped
    assert sum(x == 0.8 for x in noise) > 10
    assert sum(x < 0.7 / 4 for x in noise) > 10  # only a redraw from the whole range gets this far
    assert all("exploration_noise" in c.mutated or c.spec.hparams["exploration_noise"] == 0.7 for c in children)
    assert all("actor_lr" in c.mutated for c in children)  # the default mutable fields still mutate


def test_a_range_from_zero_is_drawn_uniformly():
    """Log-uniform draws need ``low > 0``; a range from 0 (or below) is drawn uniformly."""
    generator = {"scheme": "leaderboard", "explore": 1.0, "ranges": {"td3": {"exploration_noise": [0.0, 0.5]}}}
    config = TournamentConfig(**{**BASE, "algos": {"td3": 1}, "generator": generator})
    noise = [Generator(config).next(n, [], [], ["td3"]).spec.hparams["exploration_noise"] for n in range(2, 402)]
    assert all(0.0 <= x <= 0.5 for x in noise)
    assert sum(noise) / len(noise) == pytest.approx(0.25, abs=0.03)
    assert sum(x < 0.25 for x in noise) == pytest.approx(200, abs=30)


def test_choices_spread_fresh_pods_and_children_switch_only_what_keeps_the_networks():
    """``generator.choices``: a fresh pod after the first draws each searched setting uniformly; a child
    switches TD3's noise type with probability mutation_prob * resample_prob, but never gSDE's ``use_sde``
    (it changes the networks the child inherits from its parent's checkpoint)."""
    choices = {"td3": {"noise_type": ["gaussian", "ou"]}, "sac": {"use_sde": [False, True]}}
    generator = {"scheme": "leaderboard", "explore": 1.0, "choices": choices}
    config = TournamentConfig(**{**BASE, "algos": {"td3": 1, "sac": 1}, "generator": generator})
    gen = Generator(config)
    assert gen.next(1, [], [], []).spec.hparams == {}  # the first pod of an algorithm keeps the preset
    fresh = [gen.next(n, [], ["td3"] if n % 2 else [], ["td3", "sac"]) for n in range(2, 402)]  # td3, sac, ...
    for algo, name in (("td3", "noise_type"), ("sac", "use_sde")):
        drawn = Counter(p.spec.hparams[name] for p in fresh if p.spec.algo == algo)
        assert drawn.keys() == set(choices[algo][name]) and min(drawn.values()) > 0.35 * sum(drawn.values())
        assert all(p.sampled[name] == p.spec.hparams[name] for p in fresh if p.spec.algo == algo)

    generator = {
        "scheme": "leaderboard",
        "explore": 0.0,
        "choices": choices,
        "mutation_prob": 0.5,
        "resample_prob": 0.5,
    }
    config = TournamentConfig(**{**BASE, "algos": {"td3": 1, "sac": 1}, "generator": generator})
    td3 = _entry("p0001", "td3", -150.0, 1, effective_hparams(config.pod_spec("td3", 0)) | {"noise_type": "ou"})
    sac = _entry("p0002", "sac", -160.0, 2, effective_hparams(config.pod_spec("sac", 0)) | {"use_sde": True})
    children = [Generator(config).next(n, [td3, sac], ["td3"] if n % 2 else [], ["td3", "sac"]) for n in range(800)]
    td3_children = [c for c in children if c.spec.algo == "td3"]
    switched = [c for c in td3_children if c.spec.hparams["noise_type"] == "gaussian"]
    assert all(c.mutated["noise_type"] == ("ou", "gaussian") for c in switched)
    assert len(switched) == pytest.approx(0.25 * len(td3_children), rel=0.25)
    sac_children = [c for c in children if c.spec.algo == "sac"]
    assert sac_children and all(c.spec.hparams["use_sde"] is True for c in sac_children)
    assert all("use_sde" not in c.mutated for c in sac_children)


def test_tournament_pods_keep_inline_evaluations_to_a_fifth_of_a_round_unless_told():
    config = TournamentConfig(env="Pendulum-v1", seconds=60)
    assert config.pod_spec("sac", 0).eval_share == 0.2  # one-core pods evaluate inline, between rounds' training
    told = TournamentConfig(env="Pendulum-v1", seconds=60, pod={"seconds": 20.0, "eval_share": 0.5})
    assert told.pod_spec("sac", 0).eval_share == 0.5


def _scored(pod_id: str, algo: str, mean: float, std: float = 50.0) -> Entry:
    """An entry scored on 100 fresh episodes (standard error std / 10)."""
    return Entry(pod_id, None, algo, "Pendulum-v1", {}, mean, std, 100, 100, 1.0, f"/c/{pod_id}.pt", 0.0, 0, 100)


def _finished(number: int, algo: str, status: PodStatus = PodStatus.FINISHED) -> PodRecord:
    pod_id = f"p{number:04d}"
    return PodRecord(
        id=pod_id, number=number, parent_id=None, algo=algo, env="Pendulum-v1", hparams={}, seed=number, spec={},
        status=status, run_dir=f"/runs/t/pods/{pod_id}", init_checkpoint=None, handle=None, attempts=1,
        created=0.0, started=0.0, ended=1.0, error=None, score_mean=0.0, score_std=1.0, steps=1, total_steps=1,
        wall_time=1.0, checkpoint=None, pruned=False, lineage=pod_id,
    )  # fmt: skip


def test_an_algorithm_that_trails_beyond_the_noise_gives_up_most_of_its_share():
    third = {"sac": 1 / 3, "td3": 1 / 3, "ppo": 1 / 3}
    entries = [_scored("p0001", "sac", 150.0), _scored("p0002", "td3", 140.0), _scored("p0003", "ppo", -50.0)]
    everyone = {"sac", "td3", "ppo"}
    shares = algo_shares(third, entries, everyone, losing_share=0.25, margin=2.0)
    # td3 trails by 10, within 2 standard errors of the gap (2 * hypot(5, 5) = 14.1); ppo by 200
    assert shares == pytest.approx({"sac": 4 / 9, "td3": 4 / 9, "ppo": 1 / 9})
    assert algo_shares(third, entries, {"sac", "td3"}, 0.25, 2.0) == third  # ppo has not finished a pod yet
    assert algo_shares(third, entries, everyone, 1.0, 2.0) == third  # losing_share 1: the mix as configured
    assert algo_shares(third, entries[:2], everyone, 0.25, 2.0)["ppo"] == pytest.approx(1 / 9)  # no entry: losing
    single = [Entry(**{**e.to_dict(), "score_std": 0.0, "score_episodes": 1}) for e in entries]  # e.g. trading
    assert algo_shares(third, single, everyone, 0.25, 2.0) == third  # one episode each: no measure of the noise
    wide = [_scored("p0001", "sac", 150.0, std=1500.0), entries[1], _scored("p0003", "ppo", -50.0, std=1500.0)]
    assert algo_shares(third, wide, everyone, 0.25, 2.0) == pytest.approx(third)  # gaps within the noise


def test_a_losing_algorithm_still_gets_a_pod_now_and_then():
    config = TournamentConfig(**{**BASE, "generator": {"scheme": "leaderboard"}})  # ppo, sac and td3 at one third each
    entries = [_scored("p0001", "sac", 150.0), _scored("p0002", "td3", 140.0), _scored("p0003", "ppo", -50.0)]
    pods = [_finished(1, "sac"), _finished(2, "td3"), _finished(3, "ppo")]
    started = ["sac", "td3", "ppo"]
    for number in range(4, 184):  # a pool of two: one pod runs while the next is planned
        started.append(Generator(config).next(number, entries, started[-1:], started, pods).spec.algo)
    counts = Counter(started[3:])  # shares 4/9, 4/9, 1/9 of 180 pods: 80, 80, 20
    assert 8 <= counts["ppo"] <= 35 and counts["sac"] >= 55 and counts["td3"] >= 55, counts
    fixed = TournamentConfig(**{**BASE, "generator": {"scheme": "leaderboard", "losing_share": 1.0}})
    assert Generator(fixed).next(4, entries, [], ["sac", "td3"], pods).spec.algo == "ppo"  # the configured mix


def test_an_algorithm_whose_pods_fail_can_lose_its_share():
    config = TournamentConfig(**BASE)
    entries = [_scored("p0001", "sac", 150.0), _scored("p0002", "td3", 140.0)]
    pods = [_finished(1, "sac"), _finished(2, "td3"), _finished(3, "ppo", PodStatus.FAILED)]
    picks = Counter(Generator(config).next(n, entries, [], ["sac", "td3", "ppo"], pods).spec.algo for n in range(4, 94))
    assert picks["ppo"] <= 20 and picks["sac"] + picks["td3"] >= 70, picks
