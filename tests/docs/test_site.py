"""The documentation site builds strictly, and a real browser can read it: the start page, the navigation, search."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_snippets import DOCS, REPO

# Written by the browser test for a person to look at; test-reports/ is where every run leaves what it made.
SCREENSHOTS = REPO / "test-reports" / "docs"
# Pages another part of the project generates from the code; the navigation must name them, and the build needs them.
GENERATED_REFERENCE = ["reference/config.md", "reference/cli.md", "reference/topics.md"]


def nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def mkdocs_config() -> dict[str, Any]:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_the_site_has_every_page_of_the_navigation(built_site: Path) -> None:
    pages = nav_pages(mkdocs_config()["nav"])
    assert set(GENERATED_REFERENCE) <= set(pages)
    for page in pages:
        built = "index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html"
        assert (built_site / built).is_file(), page
    # Every page of docs/ is in the navigation (the strict build enforces it too).
    assert {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} == set(pages)


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "getting-started" / "demo.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    """The built site served over HTTP on a free loopback port, as a browser needs it (search runs in a worker)."""
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(5)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven through its own chromedriver (make test installs both)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver")
    assert Path(chromium).is_file() and driver, "the browser test needs chromium and chromium-driver (make test)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    session.set_page_load_timeout(60)
    yield session
    session.quit()


def test_a_browser_opens_the_start_page_follows_the_navigation_and_searches(browser: Any, site_url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 30)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    browser.get(site_url)
    assert browser.title.startswith("edge_runtime")
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "edge_runtime"
    browser.save_screenshot(str(SCREENSHOTS / "start-page.png"))

    # The first step of "Getting started", from the navigation.
    in_nav = "nav.md-nav--primary a[href$='getting-started/demo/']"
    demo = wait.until(expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, in_nav)))
    demo.click()
    wait.until(expected_conditions.url_contains("getting-started/demo/"))
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "The demo"
    assert "make demo" in browser.find_element(By.CSS_SELECTOR, "article").text

    # Search, as a reader types into the search box.
    field = wait.until(expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
    field.click()
    field.send_keys("rtsp")
    wait.until(
        expected_conditions.presence_of_element_located(
            (By.CSS_SELECTOR, ".md-search-result__item a[href*='recipes/rtsp-camera/']")
        )
    )
    browser.save_screenshot(str(SCREENSHOTS / "search-rtsp.png"))
    found = browser.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
    assert "matching" in found.lower(), found
