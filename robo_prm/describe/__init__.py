"""The describe stage: state or frame → SceneDescription (text the judge reads + features).

state_captioner (simulator state) and captioner (rendered frame) fill the same slots (facts.py)
and render through one renderer (render.py); clip.py gives the frame's CLIP embedding and the
frame ↔ text similarity; pixels.py is the pixels-only describer of `describe.source: pixels`.
Modules that need torch are imported on use, so the state path stays light.
"""
from robo_prm.describe.facts import SceneFacts, scene_facts
from robo_prm.describe.render import render
from robo_prm.describe.state_captioner import StateCaptioner, describe_state, distance_words

__all__ = ["SceneFacts", "StateCaptioner", "describe_state", "distance_words", "render", "scene_facts"]
