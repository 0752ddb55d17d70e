"""The guard tests' fixtures: Debian's prometheus binaries (tests/prometheus_install.py)."""

from tests.prometheus_install import prometheus_binary, promtool

__all__ = ["prometheus_binary", "promtool"]
