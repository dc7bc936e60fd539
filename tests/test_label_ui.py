"""The labelling page refuses what a page on another origin could send it, and answers bad
parameters with 400 instead of a traceback."""
from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import pytest

from robo_prm.finetune.labels import Label, read_labels
from robo_prm.finetune.ui import LabelSession
from browser_helpers import serving


@pytest.fixture
def served(tmp_path):
    queue = [Label(task="push_tool_from_edge", scene=f"scene {i}", target=5.0,
                   task_file="push_tool_from_edge") for i in range(2)]
    with serving(LabelSession(queue, tmp_path / "human.jsonl")) as served:
        yield served


def _status(url: str, data: bytes | None = None, headers: dict | None = None) -> int:
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {})).status
    except urllib.error.HTTPError as exc:
        return exc.code


def _form(session, **extra) -> bytes:
    return urllib.parse.urlencode({"i": 0, "score": 7, "token": session.token, **extra}).encode()


def test_a_cross_origin_post_is_refused(served):
    session, base, out = served
    assert _status(base + "/label", _form(session), {"Origin": "http://evil.example"}) == 403
    assert _status(base + "/label", _form(session, token="guessed")) == 403
    assert _status(base + "/label", urllib.parse.urlencode({"i": 0, "score": 7}).encode()) == 403  # no token
    assert not out.exists()  # nothing stored
    assert _status(base + "/label", _form(session), {"Origin": base}) == 200  # same origin, token: stored
    assert [lab.target for lab in read_labels(out)] == [7.0]


def test_a_foreign_host_name_is_refused(served):
    """DNS rebinding: a page served as evil.example that resolves to 127.0.0.1 sends Host: evil.example."""
    session, base, _ = served
    port = base.rsplit(":", 1)[1]
    assert _status(base + "/", headers={"Host": f"evil.example:{port}"}) == 403
    assert _status(base + "/label", _form(session), {"Host": f"evil.example:{port}"}) == 403


@pytest.mark.parametrize("query", ["?i=abc", "?i=-5", "?i=99"])
def test_bad_parameters_get_400(served, query):
    _, base, _ = served
    assert _status(base + "/" + query) == 400
    assert _status(base + "/frame" + query) == 400


def test_a_bad_index_in_a_post_gets_400_and_stores_nothing(served):
    session, base, out = served
    assert _status(base + "/label", _form(session, i="5")) == 400
    assert _status(base + "/label", _form(session, score="x")) == 400
    assert not out.exists()


def _json(url: str):
    import json

    return json.loads(urllib.request.urlopen(url).read())


def test_answers_are_a_journal_later_answers_win_and_undo_cuts_only_this_sessions_lines(served, tmp_path):
    session, base, out = served
    for score in (7, 4):  # the same scene twice: two lines, the later one counts
        assert _status(base + "/label", _form(session, score=score)) == 200
    assert [lab.target for lab in read_labels(out)] == [7.0, 4.0]
    again = LabelSession(session.queue, out)  # a new session reads the journal: one answer, the later one
    assert again.done == 1 and again.answers[0].target == 4.0
    assert _json(base + "/api/items")["items"][0]["answer"] == {"score": 4.0, "hazards": []}
    undo = urllib.parse.urlencode({"token": session.token}).encode()
    assert _status(base + "/undo", undo) == 200  # back to the first answer
    assert [lab.target for lab in read_labels(out)] == [7.0] and session.answers[0].target == 7.0
    assert _status(base + "/undo", undo) == 200
    assert out.read_text() == "" and session.done == 0
    assert _status(base + "/undo", undo) == 409  # nothing left of this session's
    assert _status(base + "/undo", urllib.parse.urlencode({"token": "guessed"}).encode()) == 403


def test_undo_never_cuts_lines_someone_else_appended(served):
    session, base, out = served
    assert _status(base + "/label", _form(session)) == 200
    with out.open("a") as f:
        f.write(out.read_text())  # another writer appended after our answer
    assert _status(base + "/undo", urllib.parse.urlencode({"token": session.token}).encode()) == 409
    assert len(read_labels(out)) == 2


def test_the_judge_answers_only_after_the_person_has(tmp_path):
    from robo_prm.judge import JudgeConfig, make_judge

    queue = [Label(task="push_tool_from_edge", scene="The gripper is open, at the hammer.", target=5.0, rule_progress=0.3,
                   hazards=["tool_near_edge"], task_file="push_tool_from_edge")]
    session = LabelSession(queue, tmp_path / "h.jsonl", judge=make_judge(JudgeConfig(backend="rules")))
    with pytest.raises(PermissionError):
        session.judged(0)
    session.record(0, 6, ["tool_near_edge"])
    j = session.judged(0)
    assert j["backend"] == "rules" and j["score"] == pytest.approx(1 + 9 * 0.3) and j["reason"]
    with pytest.raises(ValueError, match="unknown hazard"):
        session.record(0, 6, ["<script>"])


def test_the_page_and_its_assets_are_served_locally(served):
    session, base, _ = served
    page = urllib.request.urlopen(base + "/").read().decode()
    assert session.token in page and "http" not in page.replace(base, "")  # no CDN: scripts and styles are ours
    for name in ("label.js", "label.css"):
        assert _status(base + "/static/" + name) == 200
    assert _status(base + "/static/../ui.py") == 404
    assert _status(base + "/frame?i=0") == 404  # a hand-made label without an episode has no frame


def test_a_frame_is_rendered_from_the_labelled_episode(tmp_path):
    """Labels keep no simulator state; the page re-runs the seeded episode and checks each state against its label."""
    from robo_prm.finetune.frames import EpisodeKey, render_labelled_steps
    from robo_prm.finetune.labels import label_states, make_variant, rollout_states

    variant = make_variant("push_tool_from_edge", "orig", "train")
    labels = label_states(variant, rollout_states(variant, "random", 11), "random", "push_tool_from_edge/orig/random/11", stride=10)
    frames = render_labelled_steps(EpisodeKey.of(labels[0]), labels, size=64)
    assert sorted(frames) == [lab.step for lab in labels] and all(f is not None and f.shape == (64, 64, 3) for f in frames.values())
    assert len({f.tobytes() for f in frames.values()}) > 1  # the frames differ along the episode
    wrong = [Label(**{**lab.__dict__, "scene": "something else", "rule_progress": 0.99}) for lab in labels[:1]]
    assert render_labelled_steps(EpisodeKey.of(wrong[0]), wrong, size=64) == {wrong[0].step: None}  # refused, not shown
    assert EpisodeKey.of(Label(task="t", scene="s", target=1, task_file="x", episode="made/by/hand")) is None
    # an episode whose task cannot be rebuilt here (a generated task file that is gone) has no frame, and no error
    gone = Label(task="gen_7", scene="s", target=1, task_file="push_tool_from_edge", episode="gen_7/orig/random/3", step=0)
    assert LabelSession([gone], tmp_path / "h.jsonl").frame_png(0) is None
