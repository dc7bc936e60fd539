"""Scene geometry and MJCF composition for the tidy-table family.

The numbers here mirror `assets/common/*.xml`; predicates and the describer read them
from here so that the XML stays the single picture of the scene and this the single table
of its measurements.
"""
from __future__ import annotations

import functools
import hashlib
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

TABLE_TOP_Z = 0.40
# x from the robot side (back, 1.05) to the camera side (front, 1.55); y from the camera's left (0.40) to its right (1.10)
TABLE_X = (1.05, 1.55)
TABLE_Y = (0.40, 1.10)
EDGES = {  # edge name → (axis, coordinate, sign of "outwards")
    "front": (0, TABLE_X[1], +1),
    "back": (0, TABLE_X[0], -1),
    "left": (1, TABLE_Y[0], -1),
    "right": (1, TABLE_Y[1], +1),
}


@dataclass(frozen=True)
class Place:
    """A named rectangle on the table top (bins, tray, zones)."""

    name: str
    center: tuple[float, float]
    half: tuple[float, float]
    wall: float = 0.0  # wall height; 0 for a painted zone

    def contains_xy(self, xy: np.ndarray, margin: float = 0.0) -> bool:
        return bool(
            abs(xy[0] - self.center[0]) <= self.half[0] - margin
            and abs(xy[1] - self.center[1]) <= self.half[1] - margin
        )


PLACES = {
    "left_bin": Place("left_bin", (1.22, 0.52), (0.075, 0.075), wall=0.04),
    "tray": Place("tray", (1.22, 0.98), (0.075, 0.075), wall=0.015),
    "middle": Place("middle", (1.32, 0.75), (0.10, 0.13)),
}
CONTAINERS = ("left_bin", "tray")

OBJECTS = ("tool0", "tool1", "cup0")  # free bodies in assets/common/objects.xml
OBJECT_REST_Z = {"tool0": 0.02, "tool1": 0.019, "cup0": 0.04}  # origin height above a surface when lying at rest
OBJECT_KIND = {"tool0": "tool", "tool1": "tool", "cup0": "fragile"}
# Where unused objects wait: on the floor, out of the camera's view.
PARKED_XY = {"tool0": (0.3, 1.6), "tool1": (0.5, 1.6), "cup0": (0.7, 1.6)}

# Start zones a task file may name for an object (x range, y range of the object's origin).
START_ZONES = {
    "anywhere": ((1.18, 1.46), (0.64, 0.86)),
    "middle": ((1.26, 1.38), (0.66, 0.84)),
    "front_edge": ((1.505, 1.52), (0.62, 0.88)),  # origin 3-4.5 cm from the front edge
    "left_edge": ((1.25, 1.40), (0.43, 0.445)),
    "right_edge": ((1.25, 1.40), (1.055, 1.07)),
    "back_half": ((1.14, 1.25), (0.68, 0.86)),
}

SCENE_FAMILIES = ("tidy_table",)


def _fetch_assets_dir() -> Path:
    import gymnasium_robotics

    return Path(gymnasium_robotics.__file__).parent / "envs" / "assets" / "fetch"


def assets_dir() -> Path:
    return Path(str(resources.files("robo_prm.assets")))


@functools.lru_cache(maxsize=None)
def scene_xml_path(family: str = "tidy_table") -> str:
    """Fill the family's XML template with absolute include paths and write it once per process.

    MuJoCo resolves includes relative to the main file; the Fetch arm lives inside the installed
    gymnasium-robotics package, so the paths are only known at run time.
    """
    if family not in SCENE_FAMILIES:
        raise ValueError(f"unknown scene family '{family}' (known: {', '.join(SCENE_FAMILIES)})")
    template = (assets_dir() / f"{family}.xml").read_text()
    xml = template.replace("{FETCH}", str(_fetch_assets_dir())).replace("{COMMON}", str(assets_dir() / "common"))
    digest = hashlib.sha1(xml.encode()).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / "robo_prm_scenes" / f"{family}_{digest}.xml"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{np.random.randint(1 << 30)}.tmp")
        tmp.write_text(xml)
        tmp.replace(out)
    return str(out)
