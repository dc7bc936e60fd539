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
    # in front of the bin and the tray (x 1.14-1.30): an object here must not start inside a container's wall
    "left_edge": ((1.40, 1.47), (0.43, 0.445)),
    "right_edge": ((1.40, 1.47), (1.055, 1.07)),
    "back_half": ((1.14, 1.25), (0.68, 0.86)),
}

START_YAW = 0.15  # start yaw is drawn in ±START_YAW
CONTAINER_START = 0.02  # an object starting in a container: its centre ± this
CONTAINER_OUTER = 0.005  # wall thickness: a container's outer half-size is its inner one + this

# Collision footprint of each object, body frame: boxes (centre x, centre y, half x, half y)
# covering its geoms in assets/common/objects.xml (a capsule by its bounding box).
OBJECT_FOOTPRINT = {
    "tool0": ((0.0, 0.0, 0.06, 0.011), (-0.065, 0.0, 0.014, 0.035)),
    "tool1": ((-0.005, 0.0, 0.049, 0.019), (0.055, 0.0, 0.03, 0.004)),
    "cup0": ((0.0, 0.0, 0.024, 0.024),),
}

# The table and its edges: words a task may rename (`objects: {table: bench, front_edge: lip}`);
# predicates name an edge by its direction (front), its sim name (front_edge) or the task's word.
EDGE_SIMS = {"front_edge": "front", "back_edge": "back", "left_edge": "left", "right_edge": "right"}
TABLE_PARTS = ("table", *EDGE_SIMS)

SCENE_FAMILIES = ("tidy_table",)


def zone_rect(zone: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """The rectangle (x range, y range) an object's origin is drawn from in a start zone or container."""
    if zone in CONTAINERS:
        (cx, cy), r = PLACES[zone].center, CONTAINER_START
        return (cx - r, cx + r), (cy - r, cy + r)
    return START_ZONES[zone]


def rects_overlap(a, b) -> bool:
    """Two (x range, y range) rectangles share more than a boundary."""
    return a[0][0] < b[0][1] and b[0][0] < a[0][1] and a[1][0] < b[1][1] and b[1][0] < a[1][1]


def footprint_overlap(obj: str, zone: str, container: str) -> float:
    """How far (m) `obj`, with its origin anywhere in `zone` at any start yaw, can reach into `container`'s
    outer box (0: never touches it): separating axes of (rotated geom box ⊕ zone rectangle) and the box."""
    (zx0, zx1), (zy0, zy1) = zone_rect(zone)
    c = np.asarray(PLACES[container].center)
    box_half = np.asarray(PLACES[container].half) + CONTAINER_OUTER
    zc, zone_half = np.array([(zx0 + zx1) / 2, (zy0 + zy1) / 2]), np.array([(zx1 - zx0) / 2, (zy1 - zy0) / 2])
    deepest = 0.0
    for yaw in np.linspace(-START_YAW, START_YAW, 7):
        rot = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
        for gx, gy, hx, hy in OBJECT_FOOTPRINT[obj]:
            centre = zc + rot @ (gx, gy)
            depth = np.inf
            for axis in (np.array([1.0, 0.0]), np.array([0.0, 1.0]), rot[:, 0], rot[:, 1]):
                r_geom = abs(axis @ rot[:, 0]) * hx + abs(axis @ rot[:, 1]) * hy
                r_sweep = r_geom + abs(axis[0]) * zone_half[0] + abs(axis[1]) * zone_half[1]
                r_box = abs(axis[0]) * box_half[0] + abs(axis[1]) * box_half[1]
                depth = min(depth, r_sweep + r_box - abs(axis @ (centre - c)))
            deepest = max(deepest, depth)
    return float(deepest)


def footprint_spill(obj: str, container: str) -> float:
    """How far (m) `obj`, started in `container` (centre ± CONTAINER_START, any start yaw), can reach past
    the container's inner walls (0: it always fits)."""
    worst = 0.0
    for yaw in np.linspace(-START_YAW, START_YAW, 7):
        rot = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
        for gx, gy, hx, hy in OBJECT_FOOTPRINT[obj]:
            centre = rot @ (gx, gy)
            reach = np.abs(centre) + np.abs(rot) @ (hx, hy) + CONTAINER_START
            worst = max(worst, float(np.max(reach - np.asarray(PLACES[container].half))))
    return worst


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
