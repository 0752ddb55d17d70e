"""Prometheus rules from a tuning result: what ``monitor --emit-rules`` writes.

Recording rules give the live figures a pick was judged on — P50/P99 (and any other statistic an
SLO names) of TTFT, ITL, TPOT, E2EL and queue time from ``histogram_quantile`` over the rate of
bucket counts; request, token and preemption rates; KV-cache usage; running and waiting
requests — each aggregated by the labels an operator keeps (scrape target and served model).
Alerting rules hold those figures to the pick's envelope: its SLOs, the preemption rate and KV
usage it showed at the tuned rate, its batch limit, its capacity; plus restarts and "server
down". Metric names are the target release's (``metrics.prometheus.metric_names``).

Every threshold is a number the envelope holds. Where it holds none, the alert is left out and
the file's header says why: a guessed limit would page someone for nothing, or never.

Compute, then render: ``prometheus_rules`` builds a ``RuleSet`` (plain data; each alert also
says what it watches, which ``rule_tests`` turns into promtool unit tests), ``render_rules``
writes it as YAML, ``write_rules`` writes the file atomically.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sweetspot._errors import SweetspotError
from sweetspot._files import write_text
from sweetspot.guard.baseline import LATENCY_STATS, Envelope
from sweetspot.metrics.prometheus import MetricNames, metric_names

__all__ = [
    "Rule",
    "RuleOptions",
    "RuleSet",
    "Watch",
    "prometheus_rules",
    "render_rules",
    "seconds",
    "write_rules",
]

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_STAT = re.compile(r"(mean|median|p\d+(?:\.\d+)?)_(\w+)")
_WORDS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2el": "E2EL", "queue_time": "queue time"}


def seconds(duration: str) -> float:
    """A Prometheus duration (``90s``, ``1h30m``, ``500ms``) in seconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise SweetspotError(f"not a Prometheus duration: {duration!r} (e.g. 30s, 5m, 1h)")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


@dataclass(frozen=True, slots=True)
class RuleOptions:
    """Where the rules look and how patient they are."""

    selector: str = 'job="vllm"'  # PromQL label matchers picking the deployment's scrape targets
    target_labels: tuple[str, ...] = ("job", "instance")  # a scrape target's labels, kept
    model_label: str | None = "model_name"  # vLLM's served-model label, kept too (None: summed)
    rate_window: str = "5m"  # window of rate() and the quantiles: several scrape intervals
    for_: str = "5m"  # how long a threshold must stay crossed before its alert fires
    down_for: str = "1m"  # how long ``up == 0`` lasts before "server down" fires
    restart_window: str = "15m"  # how long "restarted" keeps firing after a restart
    interval: str | None = None  # the groups' evaluation interval (None: Prometheus' global)
    group_prefix: str = "sweetspot-vllm"

    def __post_init__(self) -> None:
        for name in ("rate_window", "for_", "down_for", "restart_window", "interval"):
            value = getattr(self, name)
            if value is not None:
                seconds(value)
        if re.search(r"[{}]", self.selector):
            raise SweetspotError(f"the selector is the matchers inside {{}}, not {self.selector!r}")

    @property
    def by(self) -> tuple[str, ...]:
        """The labels every recorded series keeps."""
        return self.target_labels + ((self.model_label,) if self.model_label else ())


@dataclass(frozen=True, slots=True)
class Watch:
    """What an alert watches, in the raw metric's unit: enough to feed it series that must make
    it fire and series that must keep it silent."""

    kind: str  # up | quantile | mean | rate | fraction | count | arrivals | restart
    metric: str | None = None  # the vLLM series (histogram family, counter or gauge)
    threshold: float | None = None  # seconds, per second, a 0-1 fraction or a count
    quantile: float | None = None  # for kind "quantile"


@dataclass(frozen=True, slots=True)
class Rule:
    """One recording rule (``record``) or alerting rule (``alert``)."""

    kind: str  # "record" or "alert"
    name: str  # the recorded series, or the alert's name
    expr: str
    for_: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    watch: Watch | None = None  # alerts only
    kept: tuple[str, ...] = ()  # alerts only: the labels its series carry (besides severity)


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules for one envelope, and the alerts left out with why."""

    source: str
    measured: bool
    release: str | None
    model: str | None
    options: RuleOptions
    recording: tuple[Rule, ...]
    alerts: tuple[Rule, ...]
    left_out: tuple[tuple[str, str], ...]  # (alert, why)


def prometheus_rules(envelope: Envelope, options: RuleOptions | None = None) -> RuleSet:
    """The recording and alerting rules that hold a live vLLM server to ``envelope``."""
    options = options or RuleOptions()
    names = metric_names(envelope.vllm_version)
    q = _Queries(options, names)
    left_out: list[tuple[str, str]] = []
    slo_alerts = _slo_alerts(envelope, q, left_out)
    alerts = [_down_alert(q), *slo_alerts, *_envelope_alerts(envelope, q, left_out),
              _restart_alert(q)]
    return RuleSet(
        source=envelope.source, measured=envelope.measured, release=envelope.vllm_version,
        model=envelope.model, options=options, recording=tuple(q.recorded.values()),
        alerts=tuple(alerts), left_out=tuple(left_out),
    )


class _Queries:
    """The recording rules, made once each as the alerts ask for them."""

    def __init__(self, options: RuleOptions, names: MetricNames) -> None:
        self.options, self.names = options, names
        self.by = ", ".join(options.by)
        self.level = "_".join(options.by) or "all"
        self.window = options.rate_window
        self.recorded: dict[str, Rule] = {}
        for stat in ("ttft", "itl", "tpot", "e2el", "queue_time"):
            for statistic in ("p50", "p99"):
                if self.histogram(stat):
                    self.latency(stat, statistic)
        self.rate("requests_finished", names.requests_finished)
        self.arrivals()
        self.rate("prompt_tokens", names.prompt_tokens)
        self.rate("generation_tokens", names.generation_tokens)
        self.rate("preemptions", names.preemptions)
        self.gauge("kv_cache_usage", names.kv_usage, "max")
        self.gauge("requests_running", names.running, "sum")
        self.gauge("requests_waiting", names.waiting, "sum")

    def sel(self, metric: str) -> str:
        return f"{metric}{{{self.options.selector}}}"

    def histogram(self, stat: str) -> str | None:
        return getattr(self.names, stat)

    def record(self, series: str, op: str, expr: str) -> str:
        name = f"{self.level}:vllm_{series}:{op}"
        self.recorded.setdefault(name, Rule("record", name, expr))
        return name

    def latency(self, stat: str, statistic: str) -> str:
        """The series recording ``statistic`` (mean, median, pNN) of histogram ``stat``."""
        metric, w = self.histogram(stat), self.window
        if statistic == "mean":
            expr = (f"sum by ({self.by}) (rate({self.sel(f'{metric}_sum')}[{w}]))"
                    f" / sum by ({self.by}) (rate({self.sel(f'{metric}_count')}[{w}]))")
            return self.record(f"{stat}_seconds", f"mean_rate{w}", expr)
        quantile = _quantile(statistic)
        op = "p50" if statistic == "median" else statistic.replace(".", "_")
        expr = (f"histogram_quantile({quantile!r}, sum by (le, {self.by}) "
                f"(rate({self.sel(f'{metric}_bucket')}[{w}])))")
        return self.record(f"{stat}_seconds", f"{op}_rate{w}", expr)

    def rate(self, series: str, counter: str) -> str:
        expr = f"sum by ({self.by}) (rate({self.sel(counter)}[{self.window}]))"
        return self.record(series, f"rate{self.window}", expr)

    def arrivals(self) -> str:
        """Requests arriving per second: those finishing plus the growth of those in the server
        (waiting and running). Finished requests alone stop at capacity when more arrive."""
        n, w, by = self.names, self.window, self.by
        expr = (f"sum by ({by}) (rate({self.sel(n.requests_finished)}[{w}]))"
                f" + sum by ({by}) (deriv({self.sel(n.waiting)}[{w}]))"
                f" + sum by ({by}) (deriv({self.sel(n.running)}[{w}]))")
        return self.record("requests_arrived", f"rate{w}", expr)

    def gauge(self, series: str, gauge: str, how: str) -> str:
        return self.record(series, how, f"{how} by ({self.by}) ({self.sel(gauge)})")


def _slo_alerts(envelope: Envelope, q: _Queries, left_out: list) -> list[Rule]:
    if not envelope.slos:
        left_out.append(("the SLO alerts", "the envelope has no SLO (tune with --slo)"))
    alerts = []
    for key, limit_ms in envelope.slos.items():
        match = _STAT.fullmatch(key)
        statistic, stat = match.groups() if match else ("", key)
        name = f"VLLM{stat.upper()}{statistic.title().replace('.', '_')}AboveSLO"
        if not match or stat not in LATENCY_STATS:
            left_out.append((name, f"SLO {key!r} is not a latency statistic sweetspot knows"))
            continue
        if q.histogram(stat) is None:
            left_out.append((name, f"vLLM {q.names.release} exports no {_WORDS[stat]} histogram "
                                   "(vllm:request_time_per_output_token_seconds came in 0.10.2)"))
            continue
        tuned = {"p99": envelope.p99_ms, "median": envelope.median_ms}.get(statistic, {})
        seen = (f"; {'measured' if envelope.measured else 'predicted'} at the tuned rate: "
                f"{_ms(tuned[stat])}") if stat in tuned else ""
        what = f"{'P' + statistic[1:] if statistic.startswith('p') else statistic} {_WORDS[stat]}"
        threshold = round(limit_ms / 1000, 9)
        alerts.append(_alert(
            q, name, f"{q.latency(stat, statistic)} > {threshold!r}", "critical",
            f"{what}{_where(q)} above its SLO of {_ms(limit_ms)}",
            f"{what} over {q.window} has stayed above {_ms(limit_ms)} for {q.options.for_}: "
            f"the SLO the configuration was tuned to ({_plain(envelope.source)}{seen}).",
            Watch("mean" if statistic == "mean" else "quantile", q.histogram(stat), threshold,
                  None if statistic == "mean" else _quantile(statistic))))
    return alerts


def _quantile(statistic: str) -> float:
    """``median`` or ``pNN`` as a 0-1 quantile."""
    return 0.5 if statistic == "median" else round(float(statistic[1:]) / 100, 9)


def _envelope_alerts(envelope: Envelope, q: _Queries, left_out: list) -> list[Rule]:
    """Preemptions, KV usage, the waiting queue and the request rate, each held to the figure
    the pick showed at its tuned load, or to its limit."""
    alerts = []
    for make in (_preemption_alert, _kv_alert, _queue_alert, _capacity_alert):
        rule = make(envelope, q)
        if isinstance(rule, Rule):
            alerts.append(rule)
        else:
            left_out.append(rule)
    return alerts


def _preemption_alert(envelope: Envelope, q: _Queries) -> Rule | tuple[str, str]:
    name, x = "VLLMPreemptionsAboveTuned", envelope.preemptions_per_s
    if x is None:
        return name, "the envelope has no preemption rate"
    return _alert(
        q, name, f"{q.rate('preemptions', q.names.preemptions)} > {x!r}", "warning",
        f"vLLM{_where(q)} preempts more than {x:g}/s, the rate at the tuned load"
        + (" (none)" if x == 0 else ""),
        f"Preemptions over {q.window} have stayed above {x:g}/s, the rate at the tuned load "
        f"({_plain(envelope.source)}), for {q.options.for_}: the KV cache is short for this "
        "traffic and preempted requests are computed again.",
        Watch("rate", q.names.preemptions, x))


def _kv_alert(envelope: Envelope, q: _Queries) -> Rule | tuple[str, str]:
    name, peak = "VLLMKVCacheAboveTuned", envelope.peak_kv_usage
    if peak is None:
        return name, "the envelope has no peak KV-cache usage"
    if peak >= 1:
        return name, ("the pick filled its KV cache at the tuned rate, so usage cannot exceed "
                      "it: VLLMPreemptionsAboveTuned watches what follows")
    return _alert(
        q, name, f"{q.gauge('kv_cache_usage', q.names.kv_usage, 'max')} > {peak!r}", "warning",
        f"KV cache{_where(q)} above {peak:.0%} full, its peak at the tuned load",
        f"KV-cache usage has stayed above {peak:.0%}, its peak at the tuned load "
        f"({_plain(envelope.source)}), for {q.options.for_}: the headroom that load left is "
        "being used up, and at 100 % vLLM preempts.", Watch("fraction", q.names.kv_usage, peak))


def _queue_alert(envelope: Envelope, q: _Queries) -> Rule | tuple[str, str]:
    name, seqs = "VLLMQueueBeyondBatch", envelope.max_num_seqs
    if seqs is None:
        return name, "the envelope has no max_num_seqs"
    return _alert(
        q, name, f"{q.gauge('requests_waiting', q.names.waiting, 'sum')} > {seqs}", "warning",
        f"More than {seqs} requests waiting{_where(q)}, one batch (max-num-seqs)",
        f"Over {seqs} requests (max-num-seqs, {_plain(envelope.source)}) have waited for "
        f"{q.options.for_}: arrivals outrun the server and time to first token grows with "
        "the queue.", Watch("count", q.names.waiting, float(seqs)))


def _capacity_alert(envelope: Envelope, q: _Queries) -> Rule | tuple[str, str]:
    name, cap = "VLLMRequestRateAboveCapacity", envelope.capacity_rps
    if cap is None:
        return name, "the envelope has no capacity"
    return _alert(
        q, name, f"{q.arrivals()} > {cap!r}", "warning",
        f"Requests arrive{_where(q)} faster than {cap:.3g}/s, the tuned capacity",
        f"Arrivals (requests finished plus the growth of those in the server) over {q.window} "
        f"have stayed above {cap:.3g} req/s, the steady-state capacity of the pick "
        f"({_plain(envelope.source)}), for {q.options.for_}: its queue grows without bound.",
        Watch("arrivals", None, cap))


def _down_alert(q: _Queries) -> Rule:
    down_for = q.options.down_for
    return Rule(
        "alert", "VLLMServerDown", f"up{{{q.options.selector}}} == 0", down_for,
        {"severity": "critical"},
        {"summary": f"vLLM server{_where(q)} is down",
         "description": f"Prometheus has not scraped its /metrics for {down_for} (up == 0): "
                        "the server stopped, crashed or cannot be reached."},
        Watch("up"), kept=(),
    )


def _restart_alert(q: _Queries) -> Rule:
    o, n, target = q.options, q.names, ", ".join(q.options.target_labels)
    expr = (f"max by ({target}) (changes({q.sel('process_start_time_seconds')}"
            f"[{o.restart_window}])) > 0 or max by ({target}) "
            f"(resets({q.sel(n.prompt_tokens)}[{o.restart_window}])) > 0")
    return Rule(
        "alert", "VLLMRestarted", expr, None, {"severity": "warning"},
        {"summary": f"vLLM server{_where(q)} restarted",
         "description": f"Its process start time changed or its counters reset within "
                        f"{o.restart_window}: a crash, an out-of-memory kill or a redeploy."},
        Watch("restart", n.prompt_tokens), kept=o.target_labels,
    )


def _alert(q: _Queries, name: str, expr: str, severity: str, summary: str, description: str,
           watch: Watch) -> Rule:
    return Rule("alert", name, expr, q.options.for_, {"severity": severity},
                {"summary": summary, "description": description}, watch, kept=q.options.by)


def _plain(text: str) -> str:
    """Text for an annotation, which Prometheus expands as a template: no ``{{``."""
    return " ".join(text.replace("{{", "{ {").replace("}}", "} }").split())


def _where(q: _Queries) -> str:
    return " on {{ $labels.instance }}" if "instance" in q.options.target_labels else ""


def _ms(ms: float) -> str:
    return f"{ms:g} ms"


def render_rules(rules: RuleSet) -> str:
    """The rule file: a header saying where the thresholds came from and what was left out,
    then Prometheus' ``groups:`` YAML."""
    o = rules.options
    kind = "measured on a real server" if rules.measured else "predicted by the simulator"
    header = [
        f"# Prometheus rules for vLLM from sweetspot: {_plain(rules.source)} ({kind}).",
        f"# vLLM release: {rules.release or 'current'} (its /metrics names); "
        f"model: {_plain(rules.model or 'any')}.",
        f"# Series selected by {{{o.selector}}}; recorded series keep {', '.join(o.by)}.",
        "# Check with `promtool check rules FILE`; load by naming FILE in prometheus.yml's "
        "rule_files.",
    ]
    if rules.left_out:
        header.append("# Left out, and why (a guessed threshold would page for nothing, or never):")
        header += [f"#   {name}: {_plain(why)}" for name, why in rules.left_out]
    groups = [_group(f"{o.group_prefix}-recording", rules.recording, o),
              _group(f"{o.group_prefix}-alerts", rules.alerts, o)]
    body = yaml.safe_dump({"groups": groups}, sort_keys=False, width=200, allow_unicode=True)
    return "\n".join(header) + "\n" + body


def _group(name: str, rules: tuple[Rule, ...], options: RuleOptions) -> dict:
    group: dict = {"name": name}
    if options.interval:
        group["interval"] = options.interval
    group["rules"] = [_rule_dict(r) for r in rules]
    return group


def _rule_dict(rule: Rule) -> dict:
    out: dict = {rule.kind: rule.name, "expr": rule.expr}
    if rule.for_:
        out["for"] = rule.for_
    if rule.labels:
        out["labels"] = dict(rule.labels)
    if rule.annotations:
        out["annotations"] = dict(rule.annotations)
    return out


def write_rules(path: Path | str, envelope: Envelope,
                options: RuleOptions | None = None) -> RuleSet:
    """Write the rules for ``envelope`` to ``path`` (whole or not at all); return them."""
    rules = prometheus_rules(envelope, options)
    write_text(path, render_rules(rules))
    return rules
