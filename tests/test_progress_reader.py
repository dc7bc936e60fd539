"""The progress reader: trained on labels, saved and loaded, and the judge's second opinion where the LLM is
unsure (judge.fallback reader / reader_blend) — instead of rules that know only success."""
from __future__ import annotations

import json

import numpy as np
import pytest

from robo_prm.finetune.progress_reader import ProgressTrainConfig, episode_voc, rows, train_progress_reader
from robo_prm.finetune.labels import read_labels
from robo_prm.judge import ConfidentJudge, JudgeConfig, Scored, make_progress_reader
from robo_prm.judge.progress_reader import ProgressReader, task_words
from robo_prm.types import SceneDescription, TaskText

TASK = {"background": "A hammer lies on a table.", "goal": "Bring the gripper to the hammer.",
        "dimensions": ["how close the gripper is"], "hazards": []}
EPISODE = [  # scene → progress target (1–10) along one scripted episode
    ("The gripper is open, far from the hammer. The hammer lies in the middle of the table.", 1.0),
    ("The gripper is open, 20 cm from the hammer. The hammer lies in the middle of the table.", 4.0),
    ("The gripper is open, 10 cm from the hammer. The hammer lies in the middle of the table.", 7.0),
    ("The gripper is open, at the hammer. The hammer lies in the middle of the table.", 10.0),
]


def _labels(path):
    lines = []
    for split in ("train", "heldout"):
        for step, (scene, target) in enumerate(EPISODE):
            lines.append({"task": "t", "scene": scene + " Milestones reached: 0 of 1.", "target": target, "hazards": [],
                          "task_text": TASK, "split": split, "source": "scripted", "episode": "t/orig/scripted/1",
                          "step": step})
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return path


def test_rows_read_goal_and_dimensions_and_drop_the_milestone_line(tmp_path):
    tasks, scenes, y = rows(read_labels(_labels(tmp_path / "l.jsonl"), split="train"))
    assert tasks[0] == "Bring the gripper to the hammer. how close the gripper is"
    assert all("Milestones" not in s for s in scenes) and y.tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    labels = read_labels(tmp_path / "l.jsonl", split="heldout")
    assert episode_voc(labels, y) == {"scripted": {"voc": 1.0, "episodes": 1}}
    assert episode_voc(labels, y[::-1])["scripted"]["voc"] == -1.0


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """A reader trained in-process on one episode (real MiniLM token states, a tiny encoder)."""
    tmp = tmp_path_factory.mktemp("progress")
    cfg = ProgressTrainConfig(labels=str(_labels(tmp / "l.jsonl")), out=str(tmp / "reader"), epochs=80, batch_size=4,
                              lr=3e-3, dim=32, layers=1)
    info = train_progress_reader(cfg, echo=lambda *_: None)
    assert info["history"][-1]["heldout_voc"]["scripted"]["voc"] == 1.0  # it learned the episode's order
    return ProgressReader.load(tmp / "reader")


def _task():
    return TaskText("t", TASK["background"], TASK["goal"], tuple(TASK["dimensions"]))


def test_a_trained_reader_orders_the_episode_and_memoises(reader):
    p = reader.progress(_task(), [s for s, _ in EPISODE])
    assert (np.diff(p) > 0).all() and 0.0 <= p.min() and p.max() <= 1.0
    assert task_words(_task()) == "Bring the gripper to the hammer. how close the gripper is"
    spent = reader.seconds
    assert np.allclose(reader.progress(_task(), [EPISODE[0][0]]), p[:1]) and reader.seconds >= spent


class _Unsure:
    name = "unsure"

    def score(self, task, scenes, hazards, explain):  # a flat answer: confidence ~0.3
        return [Scored(np.full(10, 0.1), 1.0, {}) for _ in scenes]

    def close(self):
        pass


def _scenes():
    return [SceneDescription(text=s, facts=(), milestones_reached=0, milestones_total=1, rule_progress=0.0)
            for s, _ in EPISODE]


def test_an_unsure_llm_gets_the_readers_score_not_the_rules(reader):
    judge = ConfidentJudge(_Unsure(), JudgeConfig(fallback="reader"), second_opinion=reader)
    js = judge.judge(_task(), _scenes())
    want = reader.progress(_task(), [s for s, _ in EPISODE])
    assert [j.progress for j in js] == pytest.approx(want.tolist())
    assert not any(j.fallback for j in js) and all(j.backend == "unsure+progress_reader" for j in js)
    st = judge.stats()
    assert st["second_opinions"] == 4 and st["fallbacks"] == 0 and st["second_opinion_rate"] == 1.0
    blend = ConfidentJudge(_Unsure(), JudgeConfig(fallback="reader_blend"), second_opinion=reader).judge(_task(), _scenes())
    conf = js[0].confidence
    w = conf / 0.7
    assert blend[0].progress == pytest.approx(w * 0.5 + (1 - w) * want[0])  # the flat answer's progress is 0.5


def test_a_failing_reader_logs_once_and_the_rules_answer(caplog):
    class Broken:
        seconds = 0.0

        def progress(self, task, scenes):
            raise RuntimeError("no MiniLM")

    judge = ConfidentJudge(_Unsure(), JudgeConfig(fallback="reader"), second_opinion=Broken())
    with caplog.at_level("WARNING"):
        js = judge.judge(_task(), _scenes()) + judge.judge(_task(), _scenes())
    assert all(j.fallback and j.backend != "unsure+progress_reader" for j in js)
    assert judge.stats()["progress_reader_failures"] == 8
    assert sum("progress reader failed" in r.message for r in caplog.records) == 1


def test_a_missing_reader_folder_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="judge.progress_reader: .*none/reader.json: no progress reader there"):
        make_progress_reader(JudgeConfig(fallback="reader", progress_reader=str(tmp_path / "none")))
    assert make_progress_reader(JudgeConfig(fallback="milestones_only", progress_reader="anything")) is None
