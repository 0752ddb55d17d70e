"""A Prometheus server for tests and demos: the ``prometheus`` binary (Debian's package ships it
with ``promtool``) scraping given targets and evaluating given rule files, from a data folder of
its own on a free port.

Lifecycle: ``run_prometheus`` writes ``prometheus.yml`` (scrape and evaluation intervals, the
rule files, one job), starts the server in its own process group, waits for ``/-/ready`` and
yields a ``PrometheusHandle`` (its HTTP API: rules, alerts, queries). On exit — normal, an
exception, Ctrl-C — the group gets SIGTERM, then SIGKILL after ``stop_timeout_s``, and the
process is reaped: nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sweetspot._errors import SweetspotError
from sweetspot.backends.vllm.server import free_port

__all__ = ["PrometheusHandle", "prometheus_config", "run_prometheus"]


@dataclass(frozen=True, slots=True)
class PrometheusHandle:
    """A running Prometheus server and its HTTP API."""

    base_url: str  # "http://127.0.0.1:PORT"
    pid: int  # the server's pid, also its process group's id
    config_path: Path
    log_path: Path

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``: the response's ``data``; an error status is a
        ``SweetspotError`` with Prometheus' own message."""
        url = f"{self.base_url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise SweetspotError(f"Prometheus {path}: {body.get('error', body)}")
        return body["data"]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule, each with its group's name under ``group``."""
        return [{**rule, "group": group["name"]}
                for group in self.api("rules")["groups"] for rule in group["rules"]]

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending or firing)."""
        return list(self.api("alerts")["alerts"])

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        return list(self.api("query", query=expr)["result"])


def prometheus_config(targets: Sequence[str], rule_files: Sequence[Path | str] = (), *,
                      job: str = "vllm", scrape_interval: str = "1s",
                      evaluation_interval: str = "1s") -> str:
    """``prometheus.yml``: one job scraping ``targets`` (``host:port``), the rule files."""
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": evaluation_interval},
        "rule_files": [str(Path(f).absolute()) for f in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
    }
    return yaml.safe_dump(config, sort_keys=False)


@contextlib.contextmanager
def run_prometheus(
    targets: Sequence[str],
    folder: Path | str,
    *,
    rule_files: Sequence[Path | str] = (),
    job: str = "vllm",
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    binary: str = "prometheus",
    port: int | None = None,
    startup_timeout_s: float = 60.0,
    stop_timeout_s: float = 10.0,
) -> Iterator[PrometheusHandle]:
    """Run Prometheus with its config, data and log under ``folder`` until the block ends."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config_path, log_path = folder / "prometheus.yml", folder / "prometheus.log"
    config_path.write_text(prometheus_config(
        targets, rule_files, job=job, scrape_interval=scrape_interval,
        evaluation_interval=evaluation_interval))
    port = free_port() if port is None else port
    argv = [binary, f"--config.file={config_path}", f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                       start_new_session=True)
        except FileNotFoundError:
            raise SweetspotError(f"no {binary!r} (Debian: apt-get install -y prometheus)") from None
    handle = PrometheusHandle(f"http://127.0.0.1:{port}", process.pid, config_path, log_path)
    try:
        _wait_ready(process, handle, startup_timeout_s)
        yield handle
    finally:
        _stop(process, stop_timeout_s)


def _wait_ready(process: subprocess.Popen, handle: PrometheusHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SweetspotError(f"Prometheus exited with {process.returncode} at start: "
                                 f"{_tail(handle.log_path)}")
        try:
            with urllib.request.urlopen(f"{handle.base_url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SweetspotError(f"Prometheus not ready after {timeout_s:g} s: {_tail(handle.log_path)}")


def _stop(process: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM to the group, SIGKILL after ``timeout_s``; reap the process."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
