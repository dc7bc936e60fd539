"""robo_prm: robot-manipulation RL with language-model progress rewards.

Importing the package registers the tidy-table tasks with gymnasium (`robo_prm/<Task>-v0`).
"""
import os as _os

# Headless rendering on a CPU-only machine: EGL through Mesa. Respect a user's own choice.
_os.environ.setdefault("MUJOCO_GL", "egl")
_os.environ.setdefault("PYOPENGL_PLATFORM", _os.environ["MUJOCO_GL"])

# gymnasium-robotics prints a notice about its Adroit hand envs on import; we use only Fetch.
try:
    from farama_notifications import notifications as _notices

    _notices.pop("gymnasium_robotics", None)
except ImportError:
    pass

__version__ = "0.1.0"

from robo_prm.envs import REGISTERED_IDS, env_id, make_env  # noqa: E402

__all__ = ["REGISTERED_IDS", "env_id", "make_env", "__version__"]
