"""One-page episode summary PNG: progress, reward terms and hazard events over time.

Drawn with OpenCV rather than matplotlib so replay needs no plotting dependency. The x axis is the same
"step t/N" numbering as the video: t = 0 is the reset frame, t ≥ 1 is after step t-1.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from robo_prm.replay import draw
from robo_prm.replay.episode import Episode

WIDTH = 1000
LEFT, RIGHT = 150, 24  # room for y labels / hazard names on the left


@dataclass(frozen=True)
class _Axes:
    x0: int
    y0: int
    x1: int
    y1: int
    xmax: float
    ylo: float
    yhi: float

    def x(self, t):
        return self.x0 + (self.x1 - self.x0) * np.asarray(t, float) / max(self.xmax, 1)

    def y(self, v):
        return self.y1 - (self.y1 - self.y0) * (np.asarray(v, float) - self.ylo) / (self.yhi - self.ylo)


def _axes(img: np.ndarray, top: int, height: int, title: str, xmax: int, ylo: float, yhi: float, yticks: bool = True) -> _Axes:
    if yhi - ylo < 1e-9:  # a flat series still needs a visible band
        ylo, yhi = ylo - 0.5, yhi + 0.5
    ax = _Axes(LEFT, top + 22, WIDTH - RIGHT, top + height - 22, xmax, ylo, yhi)
    draw.put(img, title, 12, top, 0.55, draw.WHITE)
    cv2.rectangle(img, (ax.x0, ax.y0), (ax.x1, ax.y1), (70, 70, 70), 1)
    if yticks:
        for v in (ylo, (ylo + yhi) / 2, yhi):
            y = int(ax.y(v))
            cv2.line(img, (ax.x0, y), (ax.x1, y), (45, 45, 45), 1)
            label = f"{v:.2f}"
            draw.put(img, label, ax.x0 - 8 - draw.text_size(label, 0.4)[0], y - 6, 0.4, draw.GREY)
    step = max(1, int(10 ** np.floor(np.log10(max(xmax, 1)))))
    if xmax / step < 4:
        step = max(1, step // 2)
    for t in range(0, xmax + 1, step):
        x = int(ax.x(t))
        cv2.line(img, (x, ax.y1), (x, ax.y1 + 4), draw.GREY, 1)
        draw.put(img, str(t), x - 6, ax.y1 + 5, 0.38, draw.GREY)
    return ax


def _legend(img: np.ndarray, ax: _Axes, items: list[tuple[str, tuple[int, int, int]]]) -> None:
    x = ax.x1
    for name, color in reversed(items):
        w = draw.text_size(name, 0.42)[0]
        x -= w + 26
        cv2.line(img, (x, ax.y0 - 12), (x + 14, ax.y0 - 12), color, 2)
        draw.put(img, name, x + 18, ax.y0 - 20, 0.42, color)


def render_summary_png(episode: Episode, out_path: str | Path) -> Path:
    """Write the summary PNG and return its path."""
    ep = episode
    n = ep.num_frames - 1
    ts = np.arange(ep.num_frames)
    hazard_names: list[str] = []
    for s in ep.steps:
        for name in [h.name for h in (s.judgement.hazards if s.judgement else ())] + s.hazards_true:
            if name not in hazard_names:
                hazard_names.append(name)
    hz_h = 60 + 26 * max(len(hazard_names), 1)
    height = 60 + 240 + 260 + hz_h
    img = np.full((height, WIDTH, 3), draw.PANEL_BG, np.uint8)

    m = ep.meta
    verdict = "SUCCESS" if m.success else "no success"
    draw.put(img, f"{m.task}  {m.algo}  seed {m.seed}  run {m.run}", 12, 8, 0.55, draw.WHITE)
    draw.put(img, f"{n} steps, env steps {m.env_steps}, {verdict}", 12, 32, 0.45, draw.GREEN if m.success else draw.GREY)
    success_t = next((i + 1 for i, s in enumerate(ep.steps) if s.success), None)

    # progress: judged points, held between judgements; confidence dimmed behind it
    ax = _axes(img, 60, 240, "progress (judge)", n, 0.0, 1.0)
    prog = ep.progress()
    conf = np.full(ep.num_frames, np.nan)
    for i, s in enumerate(ep.steps):
        if s.judgement is not None:
            conf[i + 1] = s.judgement.confidence
    draw.polyline(img, ax.x(ts), ax.y(draw.forward_fill(conf)), draw.DIM, 1)
    draw.polyline(img, ax.x(ts), ax.y(draw.forward_fill(prog)), draw.BLUE, 2)
    for t in ts[np.isfinite(prog)]:
        cv2.circle(img, (int(ax.x(t)), int(ax.y(prog[t]))), 3, draw.BLUE, -1, cv2.LINE_AA)
    if success_t is not None:
        x = int(ax.x(success_t))
        cv2.line(img, (x, ax.y0), (x, ax.y1), draw.GREEN, 1)
    _legend(img, ax, [("progress", draw.BLUE), ("confidence", draw.DIM)] + ([("success", draw.GREEN)] if success_t else []))

    # reward terms: every term/* plus total, on a shared axis
    keys = [k for s in ep.steps for k in s.reward_terms if k.startswith("term/") or k == "total"]
    keys = list(dict.fromkeys(keys))
    series = {k: np.array([np.nan] + [s.reward_terms.get(k, np.nan) for s in ep.steps]) for k in keys}
    finite = np.concatenate([v[np.isfinite(v)] for v in series.values()] or [np.zeros(1)])
    finite = finite if finite.size else np.zeros(1)
    lo, hi = float(finite.min()), float(finite.max())
    pad = 0.08 * (hi - lo)
    ax = _axes(img, 300, 260, "reward terms", n, lo - pad, hi + pad)
    if ax.ylo < 0 < ax.yhi:
        cv2.line(img, (ax.x0, int(ax.y(0))), (ax.x1, int(ax.y(0))), draw.DIM, 1)
    items = []
    for i, (k, v) in enumerate(series.items()):
        color = draw.WHITE if k == "total" else draw.PALETTE[i % len(draw.PALETTE)]
        draw.polyline(img, ax.x(ts), ax.y(v), color, 2 if k == "total" else 1)
        items.append((k.removeprefix("term/"), color))
    _legend(img, ax, items)

    # hazards: one row per name; red square = judge (brighter = more probable), orange bar = simulator truth
    ax = _axes(img, 560, hz_h, "hazard events", n, 0.0, float(max(len(hazard_names), 1)), yticks=False)
    half = max(2, int((ax.x(1) - ax.x(0)) / 2) - 1)
    for row, name in enumerate(hazard_names):
        yc = int(ax.y(row + 0.5))
        label = draw.wrap(name, LEFT - 16, 0.4, 1)[0]
        draw.put(img, label, 8, yc - 8, 0.4, draw.GREY)
        for i, s in enumerate(ep.steps):
            x = int(ax.x(i + 1))
            p = max((h.probability for h in (s.judgement.hazards if s.judgement else ()) if h.name == name), default=0.0)
            if p > 0:
                c = tuple(int(bg + (fg - bg) * p) for bg, fg in zip(draw.PANEL_BG, draw.RED))
                cv2.rectangle(img, (x - half, yc - 9), (x + half, yc + 1), c, -1)
            if name in s.hazards_true:
                cv2.rectangle(img, (x - half, yc + 4), (x + half, yc + 8), draw.ORANGE, -1)
    if not hazard_names:
        draw.put(img, "no hazards reported or detected", ax.x0 + 10, int(ax.y(0.5)) - 8, 0.45, draw.DIM)
    _legend(img, ax, [("judge (p)", draw.RED), ("simulator", draw.ORANGE)])

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out_path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR)):
        raise RuntimeError(f"{out_path}: could not write PNG")
    return out_path
