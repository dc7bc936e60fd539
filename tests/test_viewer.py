"""The HTML episode viewer: the same per-frame facts as the MP4 overlay, one file with nothing fetched,
model text that cannot break out of its script block, and `robo-prm replay --html` on a folder of episodes."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from robo_prm.cli import main
from robo_prm.replay import EpisodeError, EpisodeMeta, EpisodeWriter, StepRecord, load_episode
from robo_prm.replay.html import episode_dirs, viewer_data, viewer_html, write_viewer
from robo_prm.replay.video import frame_infos
from robo_prm.types import HazardReport, Judgement

BAD = 'hammer </script><script>alert(1)</script> <!-- & "quotes"'


def make_episode(path, n: int = 9, seed: int = 0):
    rng = np.random.default_rng(seed)
    with EpisodeWriter(path, EpisodeMeta(task="push_tool_from_edge", goal="push it", algo="sac", seed=seed, fps=10)) as w:
        w.add_frame(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
        for i in range(n):
            j = Judgement(progress=i / (n - 1), confidence=0.8, backend="stub", reason=BAD if i == 4 else (f"r{i}" if i % 3 == 0 else None),
                          hazards=(HazardReport("tool_near_edge", 0.5, 0.7),) if i == 2 else ())
            w.add_step(StepRecord(step=i, judgement=j if i % 2 == 0 else None, description=f"scene {i}",
                                  reward_terms={"term/llm": 0.1, "weight/llm": 0.4, "total": 0.04},
                                  predicates={"milestone/reached": i > 5, "hazard/tool_near_edge": i == 2, "dist": 0.3},
                                  hazards_true=["tool_near_edge"] if i == 2 else [], success=i == n - 1))
            w.add_frame(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
    return path


def embedded(html: str) -> list[dict]:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_the_page_shows_what_the_video_overlay_shows(tmp_path):
    ep = load_episode(make_episode(tmp_path / "ep_0000"))
    view = viewer_data(ep)["view"]
    infos = frame_infos(ep)  # the overlay's holds: one source for both
    assert len(view) == ep.num_frames == len(infos)
    for v, info in zip(view, infos):
        assert v["reason"] == info.reason and v["reason_at"] == info.reason_at and v["judged_at"] == info.judged_at
        assert v["score"] == (pytest.approx(info.judgement.score) if info.judgement else None)
        assert v["success"] == info.success
    assert view[3]["sim_hazards"] == ["tool_near_edge"] and view[3]["hazards"][0]["name"] == "tool_near_edge"
    assert view[7]["milestones"] == {"reached": True} and view[3]["sim_checks"] == {"tool_near_edge": True}
    assert view[0]["step"] is None and view[1]["terms"]["total"] == pytest.approx(0.04)


def test_model_text_stays_data_and_nothing_is_fetched(tmp_path):
    ep = load_episode(make_episode(tmp_path / "ep_0000"))
    page = viewer_html([("ep", ep)])
    assert "</script><script>alert" not in page and "<!--" not in page.split('id="data">', 1)[1]
    data = embedded(page)
    assert data[0]["view"][5]["reason"] == BAD  # round trip: the escapes are JSON's, the text is intact
    assert len(data[0]["frames"]) == ep.num_frames and data[0]["frames"][0].startswith("data:image/jpeg;base64,")
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no CDN, no network
    assert "default-src 'none'" in page  # and the page's CSP forbids fetching anything


def test_a_folder_of_episodes_is_one_page(tmp_path):
    for k in range(2):
        make_episode(tmp_path / "episodes" / f"ep_000{k}", n=5 + k, seed=k)
    (tmp_path / "episodes" / "notes").mkdir()  # not an episode: ignored
    assert [p.name for p in episode_dirs(tmp_path / "episodes")] == ["ep_0000", "ep_0001"]
    data = embedded((write_viewer([tmp_path / "episodes"], tmp_path / "v.html")).read_text())
    assert [(d["name"], len(d["view"])) for d in data] == [("ep_0000", 6), ("ep_0001", 7)]
    with pytest.raises(EpisodeError, match="neither an episode folder"):
        episode_dirs(tmp_path / "episodes" / "notes")


def test_replay_html_from_the_command_line(tmp_path, capsys):
    ep = make_episode(tmp_path / "ep_0000")
    assert main(["replay", str(ep), "--html", str(tmp_path / "ep.html")]) == 0
    assert len(embedded((tmp_path / "ep.html").read_text())[0]["view"]) == 10
    assert main(["replay", str(ep)]) == 2
    assert "--html" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "nowhere"), "--html", str(tmp_path / "x.html")]) == 2
