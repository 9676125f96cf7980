"""Test support: Debian's headless Chromium driven by Selenium through Debian's chromedriver.

No browser is downloaded: the browser is ``/usr/bin/chromium`` and the driver
``/usr/bin/chromedriver`` (``make test`` installs both as root, as it does
libnet-stomp-perl); without them the browser tests say why they skip.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: What the tests' browser runs with: headless, nothing reaching out on its own.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def browser_missing() -> str | None:
    """Why no browser test can run here, or None."""
    if not Path(CHROMIUM).exists() or shutil.which(CHROMEDRIVER) is None:
        return (
            "Chromium or its driver is missing (as root: apt-get install chromium chromium-driver; make test does it)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


def start_chromium(profile_dir: Path) -> Any:
    """A headless Chromium with a fresh profile in ``profile_dir``, its console log kept."""
    missing = browser_missing()
    if missing is not None:
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


def wait_for(driver: Any, script: str, what: str, timeout: float = 30.0) -> Any:
    """Poll ``script`` (JavaScript returning a value) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the page did not show {what} within {timeout:.0f} s; "
                f"its console said: {json.dumps(console_messages(driver))}"
            )
        time.sleep(0.05)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``predicate`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.05)


def console_messages(driver: Any) -> list[dict[str, Any]]:
    """What the page wrote to its console since the last call (level and message)."""
    return [{"level": e.get("level"), "message": e.get("message")} for e in driver.get_log("browser")]
