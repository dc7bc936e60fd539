"""benchmarks/motion_cue.py: pairs of described frames → speeds, and the logistic fit, on hand-made outputs."""
import numpy as np


def _rows_and_outputs():
    # episode 0: tool0 moves 2 cm in 0.16 s (0.125 m/s), then stands; episode 1 starts fresh (no pair across episodes)
    rows = [
        {"episode": 0, "seconds": 0.0, "moving": {"tool0": False}, "positions": {"tool0": np.array([0.0, 0.0, 0.4])}},
        {"episode": 0, "seconds": 0.16, "moving": {"tool0": True}, "positions": {"tool0": np.array([0.02, 0.0, 0.4])}},
        {"episode": 0, "seconds": 0.32, "moving": {"tool0": False}, "positions": {"tool0": np.array([0.02, 0.0, 0.4])}},
        {"episode": 1, "seconds": 0.0, "moving": {"tool0": False}, "positions": {"tool0": np.array([0.5, 0.0, 0.4])}},
    ]
    positions = np.zeros((4, 4, 3))
    positions[:, 1] = [[0.0, 0.0, 0.4], [0.04, 0.0, 0.4], [0.04, 0.0, 0.4], [0.5, 0.0, 0.4]]  # the head sees 4 cm
    logits = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [1.0, 0.0]])
    return rows, {"positions": positions, "slot/tool0.moving": logits}


def test_pairs_measure_speed_between_described_frames_of_one_episode(load_benchmark):
    b = load_benchmark("motion_cue")
    rows, out = _rows_and_outputs()
    x, y, episode = b.pairs(rows, out)
    assert len(y) == 2 and list(y) == [1, 0] and list(episode) == [0, 0]  # no pair across the episode boundary
    np.testing.assert_allclose(x[0], [2.0, 0.25, 0.125])  # head logit, estimated 4 cm / 0.16 s, true 2 cm / 0.16 s
    np.testing.assert_allclose(x[1], [-3.0, 0.0, 0.0])


def test_logistic_separates_what_one_feature_separates(load_benchmark):
    b = load_benchmark("motion_cue")
    x = np.array([[0.0], [0.1], [0.2], [0.5], [0.6], [0.9]])
    y = np.array([0, 0, 0, 1, 1, 1])
    w = b.logistic(x, y)
    assert ((np.c_[x, np.ones(6)] @ w > 0) == y).all() and w[0] > 0
