"""The side panel of the replay video: score, reason, hazards and reward terms of one frame."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robo_prm.replay import draw


@dataclass
class Pen:
    """Where and how big the side panel writes: its image, left margin, width, text scale, layout."""

    img: np.ndarray
    x: int
    w: int
    s: float
    compact: bool


def panel_header(pen: Pen, title: str, t: int, last: int, info) -> int:
    """Title, step, score with its bar, and where the judgement came from."""
    img, x, w, s, compact = pen.img, pen.x, pen.w, pen.s, pen.compact
    y = 8
    if not compact:
        y = draw.put(img, draw.wrap(title, w, s * 0.8, 1)[0], x, y, s * 0.8, draw.GREY)
    step_text = f"step {t}/{last}" + ("  (reset)" if t == 0 else "")
    j = info.judgement
    if j is None:
        score_text, color = "score -/10", draw.GREY
    else:
        score_text, color = f"score {j.score:.1f}/10", draw.progress_color(j.progress)
    if compact:
        y = draw.put(img, step_text, x, y, s, draw.WHITE)
        draw.put(img, score_text, x + w // 2, 8, s * 1.1, color, 1)
    else:
        y = draw.put(img, step_text, x, y, s * 1.2, draw.WHITE, 1)
        y = draw.put(img, score_text, x, y, s * 1.6, color, 2)
    draw.bar(img, x, y, w, 8 if compact else 12, j.progress if j else float("nan"), color)
    y += 14 if compact else 20
    if j is not None and not compact:
        note = f"conf {j.confidence:.2f}  {j.backend}" + ("  (rules fallback)" if j.fallback else "")
        if j.unbanded is not None and abs(j.unbanded - j.progress) > 1e-6:  # the milestones' stage moved it
            note += f"  (LLM {1 + 9 * j.unbanded:.1f}, held to its stage)"
        if info.judged_at is not None and info.judged_at != t:
            note += f"  (from step {info.judged_at})"
        y = draw.put(img, note, x, y, s * 0.8, draw.GREY)
    return y

def panel_reason(pen: Pen, y: int, info, t: int) -> int:
    """The reason, held from the last step that had one, greyed when held."""
    held = info.reason is not None and info.reason_at != t
    label = "reason" + (f" (step {info.reason_at})" if held else "")
    y = draw.put(pen.img, label, pen.x, y, pen.s * 0.8, draw.DIM)
    for line in draw.wrap(info.reason or "-", pen.w, pen.s, 3 if pen.compact else 6):
        y = draw.put(pen.img, line, pen.x, y, pen.s, draw.GREY if held or not info.reason else draw.WHITE)
    return y

def panel_hazards(pen: Pen, y: int, info) -> int:
    """The hazards the judge reports for this frame's judgement, most likely first."""
    img, x, w, s = pen.img, pen.x, pen.w, pen.s
    j = info.judgement
    hazards = sorted(j.hazards, key=lambda h: -h.probability) if j is not None else []
    if pen.compact:
        names = ", ".join(f"{h.name} {h.probability:.0%}" for h in hazards if h.probability >= 0.5)
        line = draw.wrap(f"hazards: {names}" if names else "hazards: none", w, s, 1)[0]
        return draw.put(img, line, x, y, s, draw.RED if names else draw.DIM)
    y = draw.put(img, "hazards (judge)", x, y, s * 0.8, draw.DIM)
    if not hazards:
        y = draw.put(img, "none", x, y, s, draw.DIM)
    for h in hazards[:4]:
        c = draw.RED if h.probability >= 0.5 else (150, 80, 70)
        y = draw.put(img, draw.wrap(f"{h.name}  p={h.probability:.2f}", w, s, 1)[0], x, y, s, c, 1 + (h.probability >= 0.5))
    if info.step is not None and info.step.hazards_true:
        sim = draw.wrap("sim: " + ", ".join(info.step.hazards_true), w, s * 0.8, 1)[0]
        y = draw.put(img, sim, x, y, s * 0.8, draw.ORANGE)
    return y

def panel_captions(pen: Pen, y: int, info, pixel_caption: str) -> int:
    """The scene text the judge read (state) over what the perception model reads off this frame (pixels), the
    latter orange where it says something the state caption does not."""
    from robo_prm.replay.captions import differing_sentences

    state = info.step.description if info.step is not None else ""
    y = draw.put(pen.img, "scene (state, what the judge read)", pen.x, y, pen.s * 0.8, draw.DIM)
    for line in draw.wrap(state or "-", pen.w, pen.s * 0.8, 4):
        y = draw.put(pen.img, line, pen.x, y, pen.s * 0.8, draw.GREY)
    wrong = differing_sentences(state, pixel_caption) if state else 0
    label = "scene (pixels)" + (f": {wrong} sentence{'s' * (wrong != 1)} differ" if wrong else "")
    y = draw.put(pen.img, label, pen.x, y + 2, pen.s * 0.8, draw.ORANGE if wrong else draw.DIM)
    for line in draw.wrap(pixel_caption or "-", pen.w, pen.s * 0.8, 4):
        y = draw.put(pen.img, line, pen.x, y, pen.s * 0.8, draw.ORANGE if wrong else draw.GREY)
    return y


def panel_terms(pen: Pen, y: int, info) -> int:
    """Reward terms in small text, the total last."""
    img, x, s = pen.img, pen.x, pen.s
    step = info.step
    terms = step.reward_terms if step is not None else {}
    if pen.compact:
        if "total" in terms:
            draw.put(img, f"reward {terms['total']:+.3f}", x, y, s, draw.GREY)
        return y
    y = draw.put(img, "reward terms", x, y, s * 0.8, draw.DIM)
    ts = s * 0.8
    for name in [k[5:] for k in terms if k.startswith("term/")]:
        wt = terms.get(f"weight/{name}")
        line = f"{name:<8} {terms[f'term/{name}']:+.3f}" + (f"  x{wt:.2f}" if wt is not None else "")
        y = draw.put(img, line, x, y, ts, draw.GREY)
    for k in [k for k in terms if not k.startswith(("term/", "weight/")) and k != "total"]:
        y = draw.put(img, f"{k:<8} {terms[k]:+.3f}", x, y, ts, draw.GREY)
    if step is not None:
        y = draw.put(img, f"{'env rew':<8} {step.env_reward:+.3f}", x, y, ts, draw.GREY)
    if "total" in terms:
        y = draw.put(img, f"{'total':<8} {terms['total']:+.3f}", x, y, ts, draw.WHITE)
    return y
