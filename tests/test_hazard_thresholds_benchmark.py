"""benchmarks/hazard_thresholds.py and robo_prm/perception/thresholds.py: the threshold searches on hand-made
hazard probabilities."""
import numpy as np


def _heads():
    # head 0: positives at 0.9 / 0.4 (half below 0.5), negatives at 0.1 / 0.38; head 1 not checked on the last frames
    p = np.array([[0.9, 0.8], [0.4, 0.7], [0.9, 0.2], [0.4, 0.1], [0.1, 0.6], [0.38, 0.6]])
    truth = np.array([[1, 1], [1, 1], [1, 0], [1, 0], [0, -1], [0, -1]])
    return p, truth


def test_pooled_counts_skip_frames_where_a_hazard_is_not_checked():
    from robo_prm.perception import thresholds as b

    p, truth = _heads()
    assert b.pooled_counts(p, truth, [0.5, 0.5]) == (4, 4, 6)  # head 1's 0.6 on unchecked frames is no false alarm
    assert b.pooled_pr(p, truth, [0.3, 0.5]) == {"precision": 6 / 7, "recall": 1.0}  # 0.38 flagged


def test_per_head_recall_lowers_each_threshold_only_as_far_as_its_recall_needs(load_benchmark):
    b = load_benchmark("hazard_thresholds")
    p, truth = _heads()
    assert b.per_head_for_recall(p, truth, 0.95, min_positives=2) == [0.35, 0.6]
    assert b.per_head_for_recall(p, truth, 0.95, min_positives=10) == [0.5, 0.5]  # too few positives: 0.5 kept


def test_best_at_precision_keeps_the_floor():
    from robo_prm.perception import thresholds as b

    p, truth = _heads()
    # head 0's two positives at 0.4 come with its negative at 0.38 (no grid point between): precision 6 / 7
    assert b.fit_for_precision(p, truth, floor=0.8) == [0.35, 0.5]
    assert b.pooled_pr(p, truth, [0.35, 0.5]) == {"precision": 6 / 7, "recall": 1.0}
    assert b.fit_for_precision(p, truth, floor=0.9) == [0.5, 0.5]  # the floor forbids it: recall stays 4 / 6
