"""The describe stage: state or frame → SceneDescription (text the judge reads + features)."""
from robo_prm.describe.state_captioner import StateCaptioner, describe_state, distance_words

__all__ = ["StateCaptioner", "describe_state", "distance_words"]
