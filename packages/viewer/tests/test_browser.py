"""The viewer in a real browser: Debian's headless Chromium driven through Selenium and
chromedriver (packages ``chromium`` and ``chromium-driver``; ``.ci/run`` installs them).
A reader's path through the pages, a hostile session, and a session that grows while its
page is open. Screenshots of each step are written to ``$SESSIONLEDGER_ARTIFACTS/viewer``
(by default the test's temporary directory)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from viewer_helpers import HOSTILE, fill, store_url, viewer, viewer_env

from sessionledger import Ledger
from sessionledger.testing.builders import closed_turn

CHROMIUM = os.environ.get("SESSIONLEDGER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SESSIONLEDGER_CHROMEDRIVER", "/usr/bin/chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        reason = (
            f"no browser to drive: {', '.join(missing)} missing (Debian: chromium, chromium-driver)"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI installs them: a missing browser is a failure there
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    root = os.environ.get("SESSIONLEDGER_ARTIFACTS")
    folder = (Path(root) / "viewer" if root else tmp_path / "shots") / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_for(driver: Any, condition: Any, seconds: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(condition)


def no_alert(driver: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert  # noqa: B018 (the property raises when there is none)
    except NoAlertPresentException:
        return True
    return False


async def test_a_reader_goes_from_the_list_to_a_shadowed_range_provenance_and_time_travel(
    tmp_path: Path, browser: Any, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    url = store_url("sqlite", tmp_path)
    made = await fill(url)
    main = made["main"]
    summary = next(e for e in main.events if e.source_event_seqs and e.surface_op != "append")
    message = [e for e in main.events if e.type == "assistant/message"][-1]
    with viewer(viewer_env(tmp_path), url) as running:
        browser.get(running.base + "/")
        browser.save_screenshot(str(shots / "1-sessions.png"))
        assert browser.title == "sessions · sessionledger"
        browser.find_element(By.LINK_TEXT, "main").click()
        wait_for(browser, lambda d: d.title == "main · sessionledger")
        browser.save_screenshot(str(shots / "2-session.png"))
        replaced = browser.find_element(By.ID, f"replace-{summary.seq}")
        assert f"replaced nodes {summary.surface_op.start}" in replaced.text  # type: ignore[union-attr]
        # A shadowed node: drawn as shadowed in the log, and its page says by what.
        first = (summary.source_event_seqs or ())[0]
        row = browser.find_element(By.ID, f"e{first}")
        assert "shadowed" in row.get_attribute("class")
        assert row.value_of_css_property("text-decoration-line") == "line-through"
        replaced.find_element(By.CLASS_NAME, "shadowed-seq").click()
        wait_for(browser, lambda d: f"seq {first}" in d.title)
        text = browser.find_element(By.TAG_NAME, "main").text
        assert f"by {summary.seq}: the model no longer sees it" in text
        browser.save_screenshot(str(shots / "3-shadowed-event.png"))
        browser.back()
        # Provenance: from the surface's last answer to the chunks it was assembled from.
        surface = browser.find_element(By.CLASS_NAME, "surface")
        item = next(
            li
            for li in surface.find_elements(By.CLASS_NAME, "node-item")
            if li.text.startswith(f"{message.seq} assistant/message")
        )
        item.find_element(By.CLASS_NAME, "source").click()
        chunk = (message.source_event_seqs or ())[0]
        wait_for(browser, lambda d: f"seq {chunk}" in d.title)
        cited = browser.find_elements(By.CLASS_NAME, "cited-by")
        assert [link.text for link in cited] == [str(message.seq)]
        browser.save_screenshot(str(shots / "4-provenance.png"))
        # Time travel: the messages before the replace, then after it, through the form.
        browser.get(f"{running.base}/sessions/main/messages?at={summary.seq - 1}")
        assert "read the report" in browser.find_element(By.TAG_NAME, "main").text
        field = browser.find_element(By.NAME, "at")
        field.clear()
        field.send_keys(str(summary.seq))
        browser.find_element(By.CSS_SELECTOR, "form.find button").click()
        wait_for(browser, lambda d: d.title == f"main messages at {summary.seq} · sessionledger")
        text = browser.find_element(By.TAG_NAME, "main").text
        assert "summary: a report was read" in text
        assert "read the report" not in text
        browser.save_screenshot(str(shots / "5-time-travel.png"))


async def test_a_hostile_session_renders_as_text(tmp_path: Path, browser: Any, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    url = store_url("sqlite", tmp_path)
    await fill(url)
    with viewer(viewer_env(tmp_path), url) as running:
        for path in (
            "/",
            "/sessions/hostile",
            "/sessions/hostile/events/1",
            "/sessions/hostile/messages",
        ):
            browser.get(running.base + path)
            assert no_alert(browser), path
            body = browser.find_element(By.TAG_NAME, "body").text
            assert "<script>alert(" in body, path  # shown as text (JSON-quoted as stored)
            assert browser.find_elements(By.CSS_SELECTOR, "img") == [], path
            hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
            assert not [href for href in hrefs if href.lower().startswith("javascript:")], path
            assert all(href.startswith(running.base) for href in hrefs), path
        browser.save_screenshot(str(shots / "hostile.png"))
        assert HOSTILE.split("<img")[0].strip() in browser.page_source.replace("&lt;", "<").replace(
            "&gt;", ">"
        ).replace("&amp;", "&")


async def test_a_session_growing_while_open_shows_its_new_events_without_a_reload(
    tmp_path: Path, browser: Any, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    url = store_url("sqlite", tmp_path)
    await fill(url)
    with viewer(viewer_env(tmp_path), url, "main") as running:
        browser.get(running.url)
        wait_for(browser, lambda d: "following new events" in d.find_element(By.ID, "live").text)
        browser.execute_script("window.sessionledgerMark = 'same page'")
        async with Ledger.open(url) as ledger:
            session = await ledger.resume("main")
            appended = closed_turn(session, 6, prompt="one more question", answer="a late answer")
            await ledger.flush(session)
        last = appended[-1].seq
        wait_for(browser, lambda d: d.find_elements(By.ID, f"e{last}"))
        assert browser.execute_script("return window.sessionledgerMark") == "same page"
        row = browser.find_element(By.ID, f"e{appended[1].seq}")
        assert "one more question" in row.text
        assert browser.find_element(By.ID, "length").text == str(session.seq)
        browser.save_screenshot(str(shots / "grown.png"))


async def test_an_exported_page_opens_offline_and_runs_nothing(
    tmp_path: Path, browser: Any, shots: Path
) -> None:
    import subprocess

    from selenium.webdriver.common.by import By

    url = store_url("sqlite", tmp_path)
    await fill(url)
    for session_id in ("main", "hostile"):
        page = tmp_path / f"{session_id}.html"
        done = subprocess.run(
            [sys.executable, "-m", "sessionledger", "--store", url, "export", session_id,
             "--format", "html", "-o", str(page)],
            env=viewer_env(tmp_path), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        browser.get(page.as_uri())
        assert browser.title == f"{session_id} · sessionledger export"
        assert no_alert(browser)
        assert browser.find_elements(By.CSS_SELECTOR, "img") == []
        browser.save_screenshot(str(shots / f"{session_id}.png"))
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "<script>alert(" in text
    browser.get((tmp_path / "main.html").as_uri())
    rows = browser.find_elements(By.CSS_SELECTOR, "table.events tr.shadowed")
    assert rows
    assert rows[0].value_of_css_property("text-decoration-line") == "line-through"
