"""Where a number came from: the one provenance record of every benchmark result and trained-model manifest.

`provenance(command)` → {"command", "git_commit", "date", "machine": {"cpu_model", "cores"}, "load",
"python", "torch"}: the exact command, the commit of this source tree ("+dirty" when tracked files
differ from it; None outside a git checkout), the UTC date, the CPU, the 1-minute load average when
it was taken, and the Python and torch versions (torch read from its package metadata, not imported;
None when not installed).
"""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from functools import lru_cache
from importlib import metadata
from pathlib import Path

KEYS = ("command", "git_commit", "date", "machine", "load", "python", "torch")


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed: `robo-prm …` for the entry point, else `python <script relative to cwd> …`."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    prog = Path(argv[0])
    head = "robo-prm" if prog.name == "robo-prm" else "python " + shlex.quote(os.path.relpath(prog) if prog.is_absolute() else str(prog))
    return " ".join([head] + [shlex.quote(a) for a in argv[1:]])


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git_commit(folder: str | Path | None = None) -> str | None:
    """The HEAD commit of the checkout holding `folder` (default: this source tree), '+dirty' when tracked
    files differ from it; None when it is not in a git checkout or git is missing."""
    where = str(folder or Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", where, "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 1 else "")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def load_average() -> float:
    """The 1-minute load average now (benchmarks also record it when they finish)."""
    return round(os.getloadavg()[0], 2)


def provenance(command: str | None = None) -> dict:
    """The provenance record (keys: KEYS); `command` defaults to this process's command line."""
    return {
        "command": command_line() if command is None else command,
        "git_commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count()},
        "load": load_average(),
        "python": platform.python_version(),
        "torch": _version("torch"),
    }
