"""The reward stage: blend env reward, LLM progress, exploration and safety into one number."""
from robo_prm.reward.blend import BlendedReward
from robo_prm.reward.config import RewardConfig, Stage
from robo_prm.reward.schedule import blend_weights
from robo_prm.reward.wrappers import LLMRewardVecEnv, LLMRewardWrapper

__all__ = ["BlendedReward", "RewardConfig", "Stage", "blend_weights", "LLMRewardVecEnv", "LLMRewardWrapper"]
