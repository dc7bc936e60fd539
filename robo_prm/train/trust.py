"""Which files of a run folder may be unpickled, and which are intact.

SB3 writes pickles: a model.zip keeps some fields cloudpickled (its `:serialized:` entries) and the
replay buffer is one pickle. Unpickling runs whatever code the file names, so opening a run folder from
elsewhere must not unpickle anything. Every checkpoint folder this machine writes gets a MANIFEST.json:
the sha256 of each file, signed with HMAC-SHA256 under a key kept outside run folders
(~/.config/robo_prm/run_key, or under $XDG_CONFIG_HOME or $ROBO_PRM_CONFIG_DIR; created 0600 on first use).
A pickle is loaded only when that signature holds and the file's hash matches, or when the user passes
--trust_run. The hashes alone (signed or not) tell an intact file from a truncated or changed one.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from robo_prm.config_io import ConfigError

MANIFEST = "MANIFEST.json"
TRUST_FLAG = "--trust_run"


class UntrustedRunError(ConfigError):
    """A pickle in a run folder that this machine did not sign. One line: the file and the flag."""


KEY_DIR_ENV = "ROBO_PRM_CONFIG_DIR"  # where the key lives instead (tests, several users on one account)


def key_path() -> Path:
    folder = os.environ.get(KEY_DIR_ENV)
    if not folder:
        folder = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"), "robo_prm")
    return Path(folder) / "run_key"


def run_key() -> bytes:
    """This machine's signing key, created (0600, in a 0700 folder) on first use."""
    path = key_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".run_key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # appears whole; another process that made one first wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = path.read_text().strip()
    if not key:
        raise ConfigError(f"{path}: the run key is empty; delete it to make a new one (runs signed with it will need {TRUST_FLAG})")
    return key.encode()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _signature(files: dict[str, str]) -> str:
    return hmac.new(run_key(), json.dumps(files, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def write_manifest(folder: Path, files: dict[str, str], sign: bool = True) -> None:
    """{file name: sha256} into folder/MANIFEST.json (written whole, then renamed), signed unless `sign` is off."""
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"files": files, "hmac": _signature(files) if sign else None}, indent=1, sort_keys=True))
    os.replace(tmp, folder / MANIFEST)


def sign_folder(folder: Path, names: list[str]) -> None:
    write_manifest(folder, {n: sha256(folder / n) for n in names if (folder / n).exists()})


def read_manifest(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return None
    return data


def damage(folder: Path, names: tuple[str, ...]) -> str | None:
    """Why the files `names` of `folder` are not intact (one phrase), or None when each has its listed hash."""
    manifest = read_manifest(folder)
    if manifest is None:
        return f"no readable {MANIFEST}"
    for name in names:
        path = folder / name
        if name not in manifest["files"] or not path.is_file():
            return f"{name} missing"
        if sha256(path) != manifest["files"][name]:
            return f"{name} damaged (its hash differs from {MANIFEST})"
    return None


def manifest_signed(manifest: dict | None) -> bool:
    """True when this machine's key signed the manifest's list of hashes."""
    if manifest is None or not isinstance(manifest.get("hmac"), str):
        return False
    return hmac.compare_digest(manifest["hmac"], _signature(manifest["files"]))


def signed(folder: Path, name: str) -> bool:
    """True when this machine signed folder's manifest and `name` still has the signed hash."""
    manifest = read_manifest(folder)
    return manifest_signed(manifest) and name in manifest["files"] and damage(folder, (name,)) is None


def require_trust(folder: Path, name: str, trust: bool) -> None:
    """Allow unpickling folder/name only when this machine signed it or the user trusts the run."""
    if trust or signed(folder, name):
        return
    raise UntrustedRunError(
        f"{folder / name}: not signed by this machine's run key ({key_path()}); it is a pickle and loading it "
        f"could run code: pass {TRUST_FLAG} if you trust this run folder")
