"""The train stage: SB3 SAC/PPO on the blended reward, with recording, evaluation and checkpoints."""
from robo_prm.train.run import load_policy, resume, train

__all__ = ["train", "resume", "load_policy"]
