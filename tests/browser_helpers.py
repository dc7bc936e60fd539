"""A headless Chromium for the page tests (Debian's chromium + chromium-driver, driven by Selenium).

Nothing is downloaded: the browser and its driver are the system's (`.ci/run` installs them); without them
the tests skip with the reason. Screenshots go to the test's tmp folder, and to $ROBO_PRM_SCREENSHOTS
too when it is set (`ROBO_PRM_SCREENSHOTS=docs/img pytest tests/test_ui_browser.py` refreshes README's).
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
import shutil
from pathlib import Path

import pytest

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")


def browser_or_skip():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium + chromedriver here (apt-get install chromium chromium-driver; .ci/run does)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    try:
        return webdriver.Chrome(service=Service(DRIVER), options=opts)
    except Exception as exc:  # a broken browser install should say so, not error every test
        pytest.skip(f"chromium did not start: {type(exc).__name__}: {str(exc).splitlines()[0]}")


def screenshot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    if os.environ.get("ROBO_PRM_SCREENSHOTS"):
        dest = Path(os.environ["ROBO_PRM_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / name)
    return path


@contextmanager
def serving(session):
    """A labelling session served on a free loopback port for one test: (session, base URL, its JSONL path)."""
    from robo_prm.finetune.ui import make_server

    server = make_server(session, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield session, f"http://127.0.0.1:{server.server_address[1]}", session.out
    finally:
        server.shutdown()
        server.server_close()
