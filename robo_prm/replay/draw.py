"""Small OpenCV drawing helpers shared by the video overlay and the summary plot.

Images here are RGB uint8 (as the env renders them); colours are RGB tuples. OpenCV does not care about
channel order when drawing, so only the final write to a BGR consumer (cv2.imwrite, VideoWriter) flips.
"""
from __future__ import annotations

import cv2
import numpy as np

FONT = cv2.FONT_HERSHEY_SIMPLEX

WHITE = (240, 240, 240)
GREY = (150, 150, 150)
DIM = (100, 100, 100)
RED = (235, 70, 60)
ORANGE = (240, 160, 50)
GREEN = (70, 200, 90)
BLUE = (80, 160, 240)
PANEL_BG = (28, 30, 34)
# distinct line colours for plotted series, in order
PALETTE = [(80, 160, 240), (240, 160, 50), (70, 200, 90), (235, 70, 60), (180, 120, 230), (60, 200, 200), (220, 220, 90)]


def text_size(text: str, scale: float, thickness: int = 1) -> tuple[int, int]:
    (w, h), _ = cv2.getTextSize(text, FONT, scale, thickness)
    return w, h


def put(img: np.ndarray, text: str, x: int, y: int, scale: float = 0.5, color=WHITE, thickness: int = 1) -> int:
    """Draw text with its top-left near (x, y); return the y just below the line (line height × 1.5)."""
    _, h = text_size("Ag", scale, thickness)
    cv2.putText(img, text, (x, y + h), FONT, scale, color, thickness, cv2.LINE_AA)
    return y + int(h * 1.7) + 2


def wrap(text: str, width_px: int, scale: float, max_lines: int | None = None) -> list[str]:
    """Greedy word wrap by measured pixel width; over-long words are cut, overflow ends in '...'."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        while text_size(word, scale)[0] > width_px and len(word) > 1:  # a URL or predicate longer than a line
            cut = len(word)
            while cut > 1 and text_size(word[:cut], scale)[0] > width_px:
                cut -= 1
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:cut])
            word = word[cut:]
        candidate = f"{line} {word}".strip()
        if text_size(candidate, scale)[0] <= width_px:
            line = candidate
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
        last = lines[-1]
        while last and text_size(last + "...", scale)[0] > width_px:
            last = last[:-1]
        lines[-1] = last + "..."
    return lines


def bar(img: np.ndarray, x: int, y: int, w: int, h: int, frac: float, color) -> None:
    """A horizontal fill bar for a value in [0, 1]."""
    frac = float(np.clip(frac, 0.0, 1.0)) if np.isfinite(frac) else 0.0
    cv2.rectangle(img, (x, y), (x + w, y + h), DIM, -1)
    if frac > 0:
        cv2.rectangle(img, (x, y), (x + int(round(w * frac)), y + h), color, -1)
    cv2.rectangle(img, (x, y), (x + w, y + h), GREY, 1)


def progress_color(p: float) -> tuple[int, int, int]:
    """Red → amber → green as progress goes 0 → 1, so the bar reads at a glance."""
    p = float(np.clip(p, 0.0, 1.0)) if np.isfinite(p) else 0.0
    if p < 0.5:
        a = p / 0.5
        return tuple(int(round(c0 + (c1 - c0) * a)) for c0, c1 in zip(RED, ORANGE))  # type: ignore[return-value]
    a = (p - 0.5) / 0.5
    return tuple(int(round(c0 + (c1 - c0) * a)) for c0, c1 in zip(ORANGE, GREEN))  # type: ignore[return-value]


def forward_fill(values: np.ndarray) -> np.ndarray:
    """Hold the last finite value over NaNs (the judge scores only every k-th step); leading NaNs stay."""
    out = np.asarray(values, dtype=float).copy()
    last = np.nan
    for i, v in enumerate(out):
        if np.isfinite(v):
            last = v
        else:
            out[i] = last
    return out


def polyline(img: np.ndarray, xs: np.ndarray, ys: np.ndarray, color, thickness: int = 2) -> None:
    """Draw a line through the finite points, breaking at NaNs."""
    pts: list[tuple[int, int]] = []
    for x, y in zip(xs, ys):
        if np.isfinite(y):
            pts.append((int(round(x)), int(round(y))))
            continue
        if len(pts) > 1:
            cv2.polylines(img, [np.array(pts, np.int32)], False, color, thickness, cv2.LINE_AA)
        pts = []
    if len(pts) > 1:
        cv2.polylines(img, [np.array(pts, np.int32)], False, color, thickness, cv2.LINE_AA)
    elif len(pts) == 1:
        cv2.circle(img, pts[0], thickness + 1, color, -1, cv2.LINE_AA)
