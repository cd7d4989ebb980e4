"""The environments' reset/step contract, masks, and fidelity to the simulators."""

from __future__ import annotations

import numpy as np
import pytest

from placement.env import (
    InvalidActionError,
    NodeEnvSettings,
    NodePlacementEnv,
    QueueEnv,
    QueueEnvSettings,
)
from placement.env.node_env import NODE_SPEC
from placement.env.queue_env import free_blocks, training_sequences
from placement.queue.priorities import Sjf
from placement.queue.rlscheduler import simulate
from placement.workloads.generate import generate_nodes, generate_pods
from tests.placement.agent_fixtures import tiny_jobs


@pytest.fixture(scope="module")
def node_env() -> NodePlacementEnv:
    return NodePlacementEnv(generate_nodes(24, seed=1), generate_pods(150, seed=2))


def _first_feasible(obs) -> int:
    return int(obs.nodes[0])


def test_node_env_reset_and_step_follow_the_gymnasium_contract(node_env):
    obs, info = node_env.reset(seed=5)
    assert obs.rows.shape == (len(obs.nodes), NODE_SPEC.row)
    assert obs.context.shape == (NODE_SPEC.context,)
    assert obs.mask.sum() == len(obs.nodes) >= 2
    assert info["arrived"] >= 1
    steps, done = 0, False
    while not done:
        obs, reward, done, truncated, info = node_env.step(_first_feasible(obs))
        assert isinstance(reward, float) and not truncated
        steps += 1
    assert obs is None and info["arrived"] == info["arrivals"]
    with pytest.raises(RuntimeError):
        node_env.step(0)


def test_node_env_same_seed_same_episode(node_env):
    first, _ = node_env.reset(seed=9)
    second, _ = node_env.reset(seed=9)
    assert first.pod == second.pod
    np.testing.assert_array_equal(first.rows, second.rows)


def test_node_env_refuses_an_infeasible_node(node_env):
    obs, _ = node_env.reset(seed=3)
    infeasible = np.flatnonzero(~obs.mask)
    if infeasible.size:
        with pytest.raises(InvalidActionError):
            node_env.step(int(infeasible[0]))
    with pytest.raises(InvalidActionError):
        node_env.step(len(obs.mask))


def test_node_env_timed_arrivals_release_pods():
    env = NodePlacementEnv(
        generate_nodes(6, seed=1), generate_pods(120, seed=2), NodeEnvSettings(arrivals="timed")
    )
    obs, info = env.reset(seed=0)
    done = obs is None
    while not done:
        obs, _, done, _, info = env.step(int(obs.nodes[-1]))
    assert info["arrived"] == 120


@pytest.mark.parametrize("backfill", [False, True])
def test_queue_env_with_a_one_job_window_is_the_reference_sjf(backfill):
    jobs = tiny_jobs(150, seed=4)
    env = QueueEnv([jobs], processors=16, settings=QueueEnvSettings(window=1, backfill=backfill))
    obs, _ = env.reset(seed=0)
    total, info = 0.0, {}
    while obs is not None:
        assert obs.mask.any()
        obs, reward, _, _, info = env.step(0)  # slot 0 = shortest; candidate 0 = earliest submit
        total += reward
    reference = simulate(jobs, processors=16, policy=Sjf(), backfill=backfill)
    np.testing.assert_array_equal(info["start_s"], reference.start_s)
    wait = reference.start_s - jobs.submit_s
    assert total == pytest.approx(-np.sum(wait / np.maximum(jobs.estimate_s, 10.0)) / 1000)


def test_queue_env_masks_empty_window_slots():
    env = QueueEnv([tiny_jobs(40, seed=1)], processors=16, settings=QueueEnvSettings(window=8))
    obs, _ = env.reset(seed=0)
    assert obs.level == 1 and obs.mask.sum() == 1  # one job has arrived
    with pytest.raises(InvalidActionError):
        env.step(3)


def test_training_windows_never_overlap_the_excluded_sequences():
    assert free_blocks(100, exclude_starts=(10, 50), length=20) == [
        range(0, 10),
        range(30, 50),
        range(70, 100),
    ]
    jobs = tiny_jobs(400, seed=0)
    excluded = set(range(100, 164)) | set(range(250, 314))
    windows = training_sequences(
        jobs, exclude_starts=(100, 250), exclude_length=64, length=80, count=30, seed=1
    )
    for window in windows:
        positions = set((window.job_id - 1).tolist())
        assert not positions & excluded and len(window) <= 80
