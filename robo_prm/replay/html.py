"""Episode viewer: one self-contained HTML file (frames, scrubber, progress curve, reasons, reward terms).

`write_viewer([ep, ...], "ep.html")` embeds every frame (JPEG data) and the per-frame facts as JSON, with the
viewer's script and style (package data under `viewer_static/`) inlined: it opens from disk with no server
and no network. The facts come from `video.frame_infos`, the same holds the MP4 overlay draws (the last
judgement and the last reason, with the frame they came from), so the page and the video never disagree.

Every text (scene descriptions and reasons are model output) reaches the page as JSON and is put in with
`textContent`; the JSON is made safe inside `<script>` by escaping `<`, `>` and `&`.
"""
from __future__ import annotations

import base64
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np

from robo_prm.replay.episode import Episode, EpisodeError, load_episode
from robo_prm.replay.video import FrameInfo, frame_infos

MILESTONE, HAZARD = "milestone/", "hazard/"


def _num(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None  # JSON has no NaN


def _frame_uri(frame: np.ndarray, quality: int) -> str:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("could not encode a frame as JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.tobytes()).decode("ascii")


def _frame_view(t: int, info: FrameInfo) -> dict[str, Any]:
    """What frame t shows, in JSON terms (the overlay's panel, plus the simulator's own flags)."""
    j, s = info.judgement, info.step
    preds = s.predicates if s is not None else {}
    return {
        "t": t,
        "step": s.step if s is not None else None,
        "judged_here": s is not None and s.judgement is not None,
        "judged_at": info.judged_at,
        "score": _num(j.score) if j else None,
        "progress": _num(j.progress) if j else None,
        "confidence": _num(j.confidence) if j else None,
        "backend": j.backend if j else "",
        "fallback": bool(j.fallback) if j else False,
        "unbanded": _num(j.unbanded) if j and j.unbanded is not None else None,
        "reason": info.reason,
        "reason_at": info.reason_at,
        "hazards": [{"name": h.name, "p": _num(h.probability), "severity": _num(h.severity)}
                    for h in sorted(j.hazards, key=lambda h: -h.probability)] if j else [],
        "sim_hazards": list(s.hazards_true) if s is not None else [],
        "milestones": {k[len(MILESTONE):]: bool(v) for k, v in preds.items() if k.startswith(MILESTONE)},
        "sim_checks": {k[len(HAZARD):]: bool(v) for k, v in preds.items() if k.startswith(HAZARD)},
        "success": info.success,
        "terms": {k: _num(v) for k, v in (s.reward_terms if s is not None else {}).items()},
        "env_reward": _num(s.env_reward) if s is not None else None,
        "description": s.description if s is not None else "",
        "action": [round(a, 3) for a in s.action] if s is not None else [],
    }


def viewer_data(ep: Episode, name: str = "", quality: int = 85) -> dict[str, Any]:
    """One episode as the viewer reads it."""
    m = ep.meta
    return {
        "name": name or m.run or m.task,
        "meta": {"task": m.task, "goal": m.goal, "hazards": m.hazards, "seed": m.seed, "run": m.run, "algo": m.algo,
                 "fps": m.fps, "success": m.success, "env_steps": m.env_steps, "num_steps": m.num_steps},
        "frames": [_frame_uri(f, quality) for f in ep.frames],
        "view": [_frame_view(t, info) for t, info in enumerate(frame_infos(ep))],
    }


def _static(name: str) -> str:
    return (resources.files("robo_prm.replay") / "viewer_static" / name).read_text(encoding="utf-8")


def _script_json(obj: Any) -> str:
    # inside <script>, "</script>" or "<!--" in a reason would end or bend the block: escape the characters
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def viewer_html(episodes: Sequence[tuple[str, Episode]], quality: int = 85) -> str:
    data = [viewer_data(ep, name, quality) for name, ep in episodes]
    return _static("viewer.html").replace("/*STYLE*/", _static("viewer.css")).replace(
        "/*SCRIPT*/", _static("viewer.js")).replace("/*DATA*/", _script_json(data))


def episode_dirs(path: str | Path) -> list[Path]:
    """An episode folder, or a folder of them (runs/<run>/episodes): the episodes in name order."""
    path = Path(path)
    if (path / "meta.json").exists():
        return [path]
    found = sorted(p for p in path.glob("*") if (p / "meta.json").is_file())
    if not found:
        raise EpisodeError(f"{path}: neither an episode folder (meta.json) nor a folder of them")
    return found


def write_viewer(paths: Sequence[str | Path], out: str | Path, quality: int = 85) -> Path:
    """The viewer of every episode under `paths` (episode folders or folders of them), in one HTML file."""
    dirs = [d for p in paths for d in episode_dirs(p)]
    one_parent = len({d.parent.resolve() for d in dirs}) == 1
    episodes = [(d.name if one_parent else f"{d.parent.name}/{d.name}", load_episode(d)) for d in dirs]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(viewer_html(episodes, quality), encoding="utf-8")
    return out
