"""MJCF scenes of the tidy tasks (installed as the data package `robo_prm.assets`): shared
includes under `common/` and one scene file per scene family."""
