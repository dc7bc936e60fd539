"""The describe stage: simulator state or a rendered frame → SceneDescription (text the judge reads + features).

Runtime describers only: `StateCaptioner` (simulator state → facts.py slots → render.py text) and
the `DescribeWrapper` that puts any `Describer`'s SceneDescription into info["description"].
The pixel captioner and everything that trains perception models live in robo_prm.perception.
"""
from robo_prm.describe.facts import SceneFacts, scene_facts
from robo_prm.describe.render import render
from robo_prm.describe.state_captioner import StateCaptioner, describe_state, distance_words
from robo_prm.describe.wrapper import DescribeWrapper, Describer

__all__ = ["DescribeWrapper", "Describer", "SceneFacts", "StateCaptioner", "describe_state", "distance_words",
           "render", "scene_facts"]
