"""Headless Debian Chromium for the browser tests (never a downloaded browser), and the
module-wide ``driver`` fixture they share."""

import os
import shutil

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--window-size=1400,1000")


def require_chromium() -> None:
    """Skip the calling module without Chromium; in CI its absence is a failure."""
    if shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER):
        return
    if os.environ.get("CI"):
        pytest.fail("CI must run the browser tests: install Debian chromium and chromium-driver",
                    pytrace=False)
    pytest.skip("needs Debian chromium and chromium-driver", allow_module_level=True)


def chromium(user_data_dir, *, console_log: bool = False):
    """A Selenium driver for headless Chromium with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + (f"--user-data-dir={user_data_dir}",):
        options.add_argument(flag)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """One Chromium for a module's tests, keeping the console log (a test may check it for
    SEVERE errors); quit after the module."""
    d = chromium(tmp_path_factory.mktemp("chromium"), console_log=True)
    yield d
    d.quit()
