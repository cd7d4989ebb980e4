"""tr_dqn's warm start, n-step targets and validation (decision 0126), and the Lublin model
that supplies its extra training and judging sequences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placement.agents import load_agent
from placement.agents.common import EpsilonSchedule, ReplayBuffer
from placement.agents.tr_dqn import TRDQN, TRDQNSettings
from placement.agents.tr_dqn_warm import ImitationSettings, NStepWriter, shortest_first
from placement.env import QueueEnv, QueueEnvSettings
from placement.workloads.lublin import LublinModel, generate_lublin
from tests.placement.agent_fixtures import tiny_jobs


def _agent(**kw) -> TRDQN:
    values = {"imitation": ImitationSettings(), "n_step": 1, "double": False, **kw}
    settings = TRDQNSettings(
        seed=3, warmup=32, batch=32, replay=2000, env=QueueEnvSettings(window=4), **values
    )
    return TRDQN(settings)


@pytest.mark.training
def test_warm_start_lowers_the_imitation_loss_and_copies_the_rule():
    agent = _agent(
        imitation=ImitationSettings(episodes=1, steps=100, margin=0.05, demo_batch=8),
        lr=3e-3,
        explore=EpsilonSchedule(0.0, 0.0, 1.0),
    )
    env = QueueEnv([tiny_jobs(60, seed=2)], processors=16, settings=agent.settings.env)
    agent.train(env, 1)
    warm = agent.warm_start
    assert warm["margin_after"] < 0.5 * warm["margin_before"], warm
    assert warm["agreement_after"] > max(0.9, warm["agreement_before"]), warm


def test_shortest_first_is_sjf_with_shortest_backfill():
    """The demonstrator, read off the observations, schedules exactly like SJF whose EASY
    backfill takes the shortest eligible job first."""
    jobs = tiny_jobs(90, seed=8)
    env = QueueEnv([jobs], processors=16, settings=QueueEnvSettings(window=4))
    obs, _ = env.reset(seed=0)
    sim = env._sim
    while obs is not None:
        action = shortest_first(obs)
        if obs.level == 1:
            queue = np.asarray(sim.queue)
            sjf = queue[np.lexsort((sim.submit[queue], sim.est[queue]))][0]
            assert obs.jobs[action] == sjf
        else:
            assert sim.est[obs.jobs[action]] == sim.est[obs.jobs].min()
        obs, *_ = env.step(action)


def test_n_step_writer_sums_discounted_rewards_and_flushes_at_the_end():
    fields = {"x": ((), np.float32), "reward": ((), np.float32)}
    fields |= {"discount": ((), np.float32), "done": ((), np.float32), "nx": ((), np.float32)}
    buffer = ReplayBuffer(10, fields)
    writer = NStepWriter(buffer, 2, 0.5)
    for step, reward in enumerate([1.0, 2.0, 4.0]):
        writer.add({"x": step}, reward, {"nx": step + 1}, done=step == 2)
    d = buffer.data
    assert len(buffer) == 3
    np.testing.assert_allclose(d["reward"][:3], [1 + 0.5 * 2, 2 + 0.5 * 4, 4])
    np.testing.assert_allclose(d["discount"][:3], [0.25, 0.25, 0.5])
    np.testing.assert_allclose(d["done"][:3], [0, 1, 1])
    np.testing.assert_allclose(d["nx"][:3], [2, 3, 3])


@pytest.mark.training
def test_validation_keeps_the_best_weights_and_settings_round_trip(tmp_path):
    agent = _agent(
        imitation=ImitationSettings(episodes=1, steps=20),
        n_step=3,
        double=True,
        validate_every=1,
    )
    env = QueueEnv([tiny_jobs(50, seed=4)], processors=16, settings=agent.settings.env)
    held = QueueEnv([tiny_jobs(50, seed=9)], processors=16, settings=agent.settings.env)
    agent.train(env, 2, validation=held)
    scores = [r["validation_bsld"] for r in agent.curve.records]
    assert agent.kept_episode in (-1, 0, 1)
    kept = agent.evaluate(held)
    assert kept <= min(scores) + 1e-9
    if agent.kept_episode >= 0:
        assert kept == pytest.approx(scores[agent.kept_episode])
    agent.save(tmp_path / "tr.pt")
    loaded = load_agent(tmp_path / "tr.pt")
    assert loaded.settings == agent.settings
    # the curve a --plot draws: every validation score, and the episode kept
    from placement.agents.training import validation_curve
    from placement.plots import plot_training

    curve = validation_curve(loaded)
    assert curve is not None
    label, points, kept_episode = curve
    assert "slowdown" in label and kept_episode == agent.kept_episode
    assert [p[0] for p in points] == [0, 1] and [p[1] for p in points] == pytest.approx(scores)
    png = plot_training(loaded.curve.records, tmp_path / "c.png", title="t", validation=curve)
    assert png.stat().st_size > 0


def test_lublin_model_is_seeded_and_has_the_models_shape():
    jobs = generate_lublin(4000, processors=256, seed=5)
    again = generate_lublin(4000, processors=256, seed=5)
    np.testing.assert_array_equal(jobs.submit_s, again.submit_s)
    np.testing.assert_array_equal(jobs.run_s, again.run_s)
    assert not np.array_equal(jobs.size, generate_lublin(4000, processors=256, seed=6).size)
    assert np.all(np.diff(jobs.submit_s) >= 0)
    assert jobs.size.min() >= 1 and jobs.size.max() <= 256
    assert 0.21 < np.mean(jobs.size == 1) < 0.28  # serial share 0.244
    assert jobs.run_s.min() >= 1 and jobs.run_s.max() <= math.exp(12)
    np.testing.assert_array_equal(jobs.estimate_s, jobs.run_s)
    slower = generate_lublin(4000, processors=256, seed=5, model=LublinModel(arrival_scale=2))
    assert np.mean(np.diff(slower.submit_s)) == pytest.approx(
        2 * np.mean(np.diff(jobs.submit_s)), rel=0.01
    )
