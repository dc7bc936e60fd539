"""robo_prm.metrics and robo_prm.provenance on hand-computed values, edge cases included."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from robo_prm.metrics import accuracy, confusion, ece, mae, precision_recall_f1, prf, set_confusion, spearman, voc
from robo_prm.provenance import KEYS, command_line, git_commit, provenance


# ---- VOC / Spearman --------------------------------------------------------------------------
def test_voc_on_hand_ranked_sequences():
    assert voc([0.1, 0.2, 0.3, 0.9]) == pytest.approx(1.0)
    assert voc([3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # ranks 1 3 2 4 against 1 2 3 4: Σd² = 2, ρ = 1 − 6·2 / (4·(16 − 1)) = 0.8
    assert voc([0.0, 2.0, 1.0, 3.0]) == pytest.approx(0.8)
    # ties take mean ranks (1.5 1.5 3.5 3.5): ρ = Pearson of the ranks = 4 / (√5 · 2) = 2/√5
    assert voc([0.0, 0.0, 1.0, 1.0]) == pytest.approx(2 / math.sqrt(5))


def test_voc_of_nothing_to_order_is_zero():
    assert voc([]) == 0.0
    assert voc([0.4]) == 0.0
    assert voc([0.1, 0.9]) == 0.0  # fewer than 3 steps
    assert voc([0.5, 0.5, 0.5, 0.5]) == 0.0  # a constant judge orders nothing (scipy would say NaN)


def test_spearman_is_symmetric_and_checks_lengths():
    x, y = [1.0, 5.0, 2.0, 8.0, 3.0], [2.0, 9.0, 1.0, 7.0, 4.0]
    # ranks x: 1 4 2 5 3; y: 2 5 1 4 3 → d = −1 −1 1 1 0, Σd² = 4, ρ = 1 − 24/120 = 0.8
    assert spearman(x, y) == spearman(y, x) == pytest.approx(0.8)
    assert spearman(x, [1.0] * 5) == 0.0
    with pytest.raises(ValueError, match="5 values against 4"):
        spearman(x, y[:4])


# ---- precision / recall / F1 -------------------------------------------------------------------
def test_precision_recall_f1_by_hand():
    r = precision_recall_f1(tp=2, fp=1, fn=3)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(2 / 5)
    assert r["f1"] == pytest.approx(0.5)  # 2·(2/3)(2/5) / (2/3 + 2/5) = (8/15) / (16/15)
    assert precision_recall_f1(4, 0, 0) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_precision_recall_f1_without_positives():
    assert precision_recall_f1(0, 0, 0) == {"precision": None, "recall": None, "f1": None}  # empty
    assert precision_recall_f1(0, 2, 0) == {"precision": 0.0, "recall": None, "f1": None}  # no true positives exist
    assert precision_recall_f1(0, 0, 2) == {"precision": None, "recall": 0.0, "f1": None}  # nothing predicted
    assert precision_recall_f1(0, 1, 1) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_confusion_of_arrays_and_of_name_sets():
    pred = np.array([True, True, False, False, True])
    true = np.array([True, False, True, False, True])
    assert confusion(pred, true) == (2, 1, 1)
    assert prf(pred, true) == {"precision": pytest.approx(2 / 3), "recall": pytest.approx(2 / 3), "f1": pytest.approx(2 / 3),
                               "positives": 3, "n": 5}
    assert prf(np.zeros(0, bool), np.zeros(0, bool)) == {"precision": None, "recall": None, "f1": None, "positives": 0, "n": 0}
    pairs = [({"edge", "tipped"}, {"edge"}), ((), {"fell"}), (["edge"], ()), ((), ())]
    assert set_confusion(pairs) == (1, 2, 1)  # tp: edge; fp: tipped, edge (3rd); fn: fell
    assert set_confusion([]) == (0, 0, 0)


# ---- calibration, errors, accuracy -----------------------------------------------------------------
def test_ece_by_hand():
    # bins of width 0.1 on pred: 0.05 → bin 0 (|0.05 − 0| = 0.05), 0.15 → bin 1 (|0.15 − 0.35| = 0.2),
    # 0.95, 0.95 → bin 9 (|0.95 − 0.9| = 0.05); ECE = ¼·0.05 + ¼·0.2 + ½·0.05 = 0.0875
    assert ece([0.05, 0.15, 0.95, 0.95], [0.0, 0.35, 1.0, 0.8]) == pytest.approx(0.0875)
    assert ece([0.2, 0.7, 1.0], [0.2, 0.7, 1.0]) == pytest.approx(0.0)  # 1.0 falls in the last bin
    assert ece([1.5, -0.5], [1.0, 0.0]) == pytest.approx(0.0)  # predictions are clipped to [0, 1]
    assert ece([0.3, 0.3], [0.0, 1.0]) == pytest.approx(0.2)  # errors of opposite sign cancel inside a bin
    assert math.isnan(ece([], []))


def test_auroc_by_hand():
    from robo_prm.metrics import auroc

    assert auroc([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]) == 1.0
    assert auroc([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]) == 0.0
    # positives 0.6, 0.4 against negatives 0.5, 0.4: 0.6 beats both (2), 0.4 loses to 0.5 (0), ties 0.4 (0.5): 2.5 of 4
    assert auroc([0.6, 0.4, 0.5, 0.4], [1, 1, 0, 0]) == 0.625
    assert auroc([0.5, 0.5], [1, 1]) is None and auroc([], []) is None


def test_mae_and_accuracy():
    assert mae([0.0, 0.5, 1.0], [0.25, 0.5, 0.5]) == pytest.approx(0.25)
    assert mae([], []) is None
    assert accuracy(np.array([1, 2, 0, 3]), np.array([1, -1, 2, 3])) == (pytest.approx(2 / 3), 3)
    assert accuracy(np.array([0, 1]), np.array([-1, -1])) == (None, 0)


# ---- provenance ------------------------------------------------------------------------------------
def test_provenance_has_exactly_its_keys():
    p = provenance("python benchmarks/x.py --n 3")
    assert tuple(p) == KEYS
    assert p["command"] == "python benchmarks/x.py --n 3"
    assert set(p["machine"]) == {"cpu_model", "cores"} and p["machine"]["cores"] == os.cpu_count()
    assert isinstance(p["load"], float) and p["load"] >= 0
    assert p["python"] == ".".join(map(str, sys.version_info[:3]))
    assert p["date"].endswith(" UTC") and p["date"][:2] == "20"


def test_command_line_reads_like_what_was_typed(tmp_path):
    assert command_line(["/usr/local/bin/robo-prm", "train", "--task", "my task.yaml"]) == "robo-prm train --task 'my task.yaml'"
    assert command_line([os.path.join(os.getcwd(), "benchmarks", "env_speed.py"), "--seconds", "1"]) == \
        "python benchmarks/env_speed.py --seconds 1"
    assert command_line([]) == ""


def test_git_commit_of_a_checkout_and_outside_one(tmp_path):
    assert git_commit(tmp_path) is None
    run = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    run("add", "f.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "f.txt").write_text("b\n")
    assert git_commit(tmp_path) == head + "+dirty"


def test_caption_facts_key_each_clause_by_its_subject():
    from robo_prm.metrics import caption_facts, fact_f1

    text = ("The gripper is open, 20 cm from the hammer. The hammer is held 20 cm above the table, at the very left edge. "
            "It is moving fast. Milestones reached: 1 of 5.")
    assert caption_facts(text) == {"The gripper | is open", "The gripper | 20 cm from the hammer",
                                   "The hammer | is held 20 cm above the table", "The hammer | at the very left edge",
                                   "The hammer | is moving fast", "Milestones reached: 1 of 5 | "}
    wrong = text.replace("at the very left edge", "10 cm from the left edge").replace("It is moving fast. ", "")
    f = fact_f1([(wrong, text), (text, text)])
    assert f["precision"] == pytest.approx(11 / 11 - 1 / 11) and f["recall"] == pytest.approx(10 / 12)
