"""The rules judge: what the describer already knows (simulator state, or a reading of the frame), as a Judgement.

It is the fallback of every model backend (low confidence, dead server) and a backend of
its own. Progress = the description's continuous `rule_progress` when the describer sets it,
else the milestone fraction; hazards = the description's hazard names. With the state describer
both are the simulator's own; with `describe.source: pixels` they are the perception model's
predictions from the frame (`SceneDescription.source` says which, and so does the reason).
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from robo_prm.types import HazardReport, Judgement, SceneDescription, TaskText


def rules_progress(scene: SceneDescription) -> float:
    rule = scene.rule_progress
    if rule is not None:
        return min(max(float(rule), 0.0), 1.0) if rule == rule else 0.0  # NaN never leaves a judge
    reached, total = scene.milestones_reached, scene.milestones_total
    if total:
        return min(max((reached or 0) / total, 0.0), 1.0)
    return 0.0


_FROM = {"state": "from the simulator",
         "pixels": "as the perception model read it from the camera frame (no simulator state)"}


class RulesJudge:
    name = "rules"

    def judge(self, task: TaskText, scenes: Sequence[SceneDescription], explain: bool = False) -> list[Judgement]:
        out = []
        for scene in scenes:
            t0 = time.perf_counter()
            hazards = tuple(HazardReport(h, task.severity(h), 1.0) for h in scene.hazards)
            progress = rules_progress(scene)
            reason = None
            if explain:
                names = ", ".join(scene.hazards) or "none"
                reason = f"Rules: progress {progress:.2f} {_FROM.get(scene.source, 'from ' + scene.source)}; hazards: {names}."
            out.append(Judgement(progress=progress, confidence=1.0, hazards=hazards, reason=reason,
                                 backend=self.name, latency_ms=(time.perf_counter() - t0) * 1e3))
        return out

    def close(self) -> None:
        pass
