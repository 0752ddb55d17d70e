"""The HTML report in a real browser: Debian's headless Chromium driven by Playwright.

The page must load, every figure must decode (an <img> whose data URI is broken has
naturalWidth 0), and the page must log no error. The set-up installs Debian's ``chromium`` with
apt-get when /usr/bin/chromium is missing (CI runs as root) and fails, never skips, when it
cannot: CI has to prove the page renders. Playwright's own browser download is never used.
Every Chromium process the test starts is gone when it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SMALL = ("--model", "qwen2.5-0.5b", "--quant", "bf16", "--gpu", "a100-80gb", "--workload",
         "short", "--num-requests", "24", "--confirm", "0", "--vllm-version", "0.33.0")
# Few knobs, few values: the sweeps, speculative decoding, picks and Pareto figures in ~9 trials.
SMALL_SPACE = ("--space", "max_num_seqs=64,256", "--space", "gpu_memory_utilization=",
               "--space", "enable_prefix_caching=", "--space", "max_num_batched_tokens=")


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed with apt-get (after an update if the lists are stale)."""
    if CHROMIUM.exists():
        return CHROMIUM
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "chromium"]
    done = _run(install, env)
    if done.returncode != 0:  # no package lists yet, or stale ones
        _run(["apt-get", "update"], env)
        done = _run(install, env)
    if not CHROMIUM.exists():
        pytest.fail(f"the browser test needs Debian's chromium at {CHROMIUM} and `apt-get "
                    f"install -y chromium` failed (exit {done.returncode}; it needs root and "
                    f"network):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return CHROMIUM


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """report.html of a small simulated study and of a rate search (the goodput figure)."""
    root = tmp_path_factory.mktemp("browser")
    storage = f"sqlite:///{root / 'studies.db'}"
    out = {}
    for name, args in (("tune", ("--trials", "9", *SMALL_SPACE)),
                       ("rate", ("--strategy", "rate", "--slo", "p99_ttft=150ms"))):
        done = run_cli("tune", *SMALL, *args, "--study-name", name, "--storage", storage,
                       "--report-dir", str(root / name))
        assert done.returncode == 0, done.stderr + done.stdout
        out[name] = root / name / "report.html"
    return out


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator:
    """A headless Chromium; afterwards, no process of it may be left."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser test needs Playwright: pip install -e '.[test]'")
    ours: set[int] = set()
    tag = ("SWEETSPOT_BROWSER_TEST", uuid.uuid4().hex)  # marks the processes this test starts
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS,
                                             env={**os.environ, tag[0]: tag[1]})
        try:
            ours = _chromium_processes(tag)
            assert ours, "no Chromium process found under this test"
            yield browser
        finally:
            ours |= _chromium_processes(tag)  # with the renderers the pages started
            browser.close()
    left = _wait_gone(ours, timeout_s=10)
    for pid in left:  # never leak one, even when the assertion below fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Chromium processes left after the test: {sorted(left)}"


@pytest.mark.parametrize("study", ["tune", "rate"])
def test_report_loads_with_every_figure_and_no_error(browser, reports, study):
    errors: list[str] = []
    page = browser.new_page()
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))

    response = page.goto(reports[study].as_uri(), wait_until="load")
    assert response is not None and response.ok
    assert page.title().startswith("sweetspot report:")
    images = page.eval_on_selector_all(
        "img", "els => els.map(e => [e.alt, e.complete, e.naturalWidth, e.naturalHeight])")
    figures = sorted(p.stem for p in reports[study].parent.glob("*.png"))
    assert sorted(alt for alt, *_ in images) == figures and figures
    for alt, complete, width, height in images:
        assert complete and width > 0 and height > 0, f"figure {alt} did not render"
    assert page.locator("h2", has_text="Picks").count() == 1
    assert not errors, errors
    page.close()


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def _chromium_processes(tag: tuple[str, str]) -> set[int]:
    """Chromium processes this test started.

    The browser's zygotes and renderers run below this process (Playwright's driver, then the
    browser), but its crash handlers daemonise to pid 1: those are found by the environment
    variable ``tag`` they inherit from the browser. Binaries live in /usr/lib/chromium/ (the
    /usr/bin/chromium that Playwright starts is Debian's wrapper script).
    """
    marker = "=".join(tag).encode()
    parents, tagged = {}, set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or "/chromium/" not in _exe(int(entry.name)):
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            environ = Path(entry.path, "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        if marker in environ:
            tagged.add(pid)
    below = set(tagged)
    while True:  # the browser's tree: every chromium process whose parent is one of ours
        more = {pid for pid, ppid in parents.items() if ppid in below} - below
        if not more:
            return below
        below |= more


def _exe(pid: int) -> str:
    try:
        return os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        alive = {pid for pid in pids if _alive(pid)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's bookkeeping remains
