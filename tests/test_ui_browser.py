"""The labelling page and the episode viewer in a real browser (headless Chromium via Selenium).

Labelling: three push_tool_from_edge scenes answered by keyboard land in the JSONL, the frame of each scene
is rendered (re-running its seeded episode), the judge's answer shows once a scene is answered, `u` undoes,
and a page on another origin cannot store a label even when it knows the token.
Viewer: the HTML file opens from disk, the scrubber and a click on the curve move to a step, the reason shown
is that step's (held as the video holds it), and model text is shown as text, never run as markup.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from browser_helpers import browser_or_skip, screenshot, serving

from robo_prm.finetune.labels import label_states, make_variant, read_labels, rollout_states
from robo_prm.finetune.ui import LabelSession
from robo_prm.judge import JudgeConfig, make_judge
from robo_prm.replay import EpisodeMeta, EpisodeWriter, StepRecord
from robo_prm.replay.html import write_viewer
from robo_prm.types import HazardReport, Judgement

SEED = 7


@pytest.fixture(scope="module")
def driver():
    d = browser_or_skip()
    yield d
    d.quit()


def wait_for(cond, timeout: float = 10.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def queue():
    """A real label queue: one scripted push_tool_from_edge episode, every 6th state, as `label auto` writes it."""
    variant = make_variant("push_tool_from_edge", "orig", "train")
    states = rollout_states(variant, "scripted", SEED)
    return label_states(variant, states, "scripted", f"push_tool_from_edge/orig/scripted/{SEED}", stride=6)


@pytest.fixture
def served(tmp_path, queue):
    with serving(LabelSession(queue, tmp_path / "human.jsonl", judge=make_judge(JudgeConfig(backend="rules")))) as served:
        yield served


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_three_scenes_labelled_by_keyboard(driver, served, tmp_path, queue):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    session, base, out = served
    driver.get(base + "/")
    wait_for(lambda: driver.find_element("id", "scene").text == queue[0].scene, what="the first scene")
    # the frame is really there (rendered from the seeded episode), and the filmstrip shows its episode
    wait_for(lambda: driver.execute_script("const f = document.getElementById('frame'); return f.complete && f.naturalWidth > 0"),
             what="the frame")
    assert len(driver.find_elements("css selector", "#strip .thumb")) == len(queue)
    assert driver.find_element("id", "goal").text == queue[0].judge_text().goal

    def keys(*k):
        ActionChains(driver).send_keys(*k).perform()

    keys("h", "7")  # hazard h (the first one) on, score 7, on to the next scene
    wait_for(lambda: driver.find_element("id", "scene").text == queue[1].scene, what="scene 2")
    keys("3")
    wait_for(lambda: driver.find_element("id", "scene").text == queue[2].scene, what="scene 3")
    keys("0")  # 0 is 10
    wait_for(lambda: len(_lines(out)) == 3, what="three lines in the JSONL")
    got = _lines(out)
    first_hazard = queue[0].judge_text().hazards[0].name
    assert [(g["target"], g["hazards"], g["step"], g["source"]) for g in got] == [
        (7.0, [first_hazard], queue[0].step, "human"), (3.0, [], queue[1].step, "human"), (10.0, [], queue[2].step, "human")]
    assert [g["scene"] for g in got] == [lab.scene for lab in queue[:3]]

    # back to the third scene: the answer and the judge's (rules) answer are shown side by side
    keys(Keys.ARROW_LEFT)
    wait_for(lambda: driver.find_element("id", "scene").text == queue[2].scene, what="back on scene 3")
    assert driver.find_element("id", "your-score").text == "10"
    wait_for(lambda: "rules" in driver.find_element("id", "judge-score").text, what="the judge's score")
    assert driver.find_element("id", "judge-reason").text not in ("", "…")
    screenshot(driver, tmp_path, "label_page.png")

    keys("u")  # undo takes the last answer back out of the file
    wait_for(lambda: len(_lines(out)) == 2, what="undo")
    wait_for(lambda: driver.find_element("id", "compare").get_attribute("hidden") is not None, what="scene 3 unanswered")
    assert [lab.target for lab in read_labels(out)] == [7.0, 3.0]


class _Evil(BaseHTTPRequestHandler):
    """Another origin (a page on another port) that knows the token and posts a label with fetch."""

    target = token = ""

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = (f"<script>fetch('{self.target}/label', {{method: 'POST', mode: 'no-cors', "
                f"headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, "
                f"body: 'i=0&score=9&token={self.token}'}}).then(() => document.title = 'sent', "
                f"() => document.title = 'sent');</script>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_cross_origin_post_from_a_page_is_refused(driver, served):
    session, base, out = served
    _Evil.target, _Evil.token = base, session.token
    evil = ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        driver.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        wait_for(lambda: driver.title == "sent", what="the other page's POST")
        time.sleep(0.3)
        assert not out.exists()  # the request reached the server (no-cors sends it) and was refused by its Origin
        # the same POST from the page's own origin is stored (the check is the origin, not the form)
        driver.get(base + "/")
        wait_for(lambda: driver.find_element("id", "scene").text, what="the page")
        driver.execute_script(f"fetch('/label', {{method: 'POST', body: new URLSearchParams('i=0&score=9&token={session.token}')}})"
                              ".then(() => document.title = 'own')")
        wait_for(lambda: out.exists() and len(_lines(out)) == 1, what="the same-origin label")
    finally:
        evil.shutdown()
        evil.server_close()


# ---- the episode viewer -------------------------------------------------------------------
XSS = '<img src=x onerror="document.title=\'pwned\'"></script><b>bold</b>'


@pytest.fixture
def viewer_file(tmp_path):
    rng = np.random.default_rng(0)
    ep_dir = tmp_path / "episodes" / "ep_0000"
    with EpisodeWriter(ep_dir, EpisodeMeta(task="push_tool_from_edge", goal="push the hammer away from the edge",
                                           algo="sac", seed=3, fps=10)) as w:
        w.add_frame(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8))
        for i in range(10):
            reason = XSS if i == 8 else (f"reason of step {i}" if i % 3 == 0 else None)
            j = Judgement(progress=i / 9, confidence=0.9, reason=reason, backend="stub",
                          hazards=(HazardReport("tool_near_edge", 0.8, 0.9),) if i in (2, 3) else ())
            w.add_step(StepRecord(step=i, judgement=j if i % 2 == 0 or i == 8 else None,
                                  reward_terms={"term/llm": 0.1 * i, "weight/llm": 0.5, "total": 0.05 * i},
                                  predicates={"milestone/at_hammer": i >= 4, "hazard/tool_near_edge": i in (2, 3, 4)},
                                  hazards_true=["tool_near_edge"] if i in (2, 3, 4) else [], success=i == 9))
            w.add_frame(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8))
    return write_viewer([tmp_path / "episodes"], tmp_path / "viewer.html")


def test_the_viewer_scrubs_to_a_step_and_shows_its_reason(driver, viewer_file, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver.get(viewer_file.as_uri())
    wait_for(lambda: driver.find_element("id", "stepLabel").text.startswith("step 0/10"), what="the viewer")
    scrub = driver.find_element("id", "scrub")
    driver.execute_script("arguments[0].value = 7; arguments[0].dispatchEvent(new Event('input'))", scrub)
    # frame 7 shows step 6's result, judged with a reason
    assert driver.find_element("id", "stepLabel").text == "step 7/10"
    assert driver.find_element("id", "reason").text == "reason of step 6"
    assert driver.find_element("id", "reasonHead").text == "REASON"  # h4s are upper-cased by the style
    ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()  # step 7 was not judged: step 6's reason is held
    assert driver.find_element("id", "stepLabel").text == "step 8/10"
    assert driver.find_element("id", "reason").text == "reason of step 6"
    assert "(HELD FROM STEP 7)" in driver.find_element("id", "reasonHead").text
    assert "✔ at_hammer" in driver.find_element("id", "milestones").text
    # click the curve at the last step: the reason there is model text and is shown as text
    curve = driver.find_element("id", "curve")
    w = curve.size["width"]
    ActionChains(driver).move_to_element_with_offset(curve, int(w * (592 / 600)) - w // 2, 0).click().perform()
    assert driver.find_element("id", "stepLabel").text == "step 10/10"
    ActionChains(driver).send_keys(Keys.ARROW_LEFT).perform()  # frame 9 = step 8, the one with the markup reason
    assert driver.find_element("id", "reason").text == XSS
    assert driver.find_elements("css selector", "#reason img, #reason b") == [] and driver.title != "pwned"
    screenshot(driver, tmp_path, "viewer.png")
