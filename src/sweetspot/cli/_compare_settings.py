"""`sweetspot compare`'s options turned into what runs: the two sides and the plan.

Three inputs, told apart here: two saved results (two JSON files), two running endpoints
(``--url-a``/``--url-b``), or two ``vllm serve`` commands on a backend. The commands are read as
``tune`` reads its ``--baseline`` (``cli._tune_settings``: checked as ``lint`` checks them, the
model, GPU, quantisation, workload and release loaded, the real backend's server options), and
both sides share one evaluator, so they run on one backend with one workload and seed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

from sweetspot._errors import SweetspotError
from sweetspot._secrets import redact_command, redact_url
from sweetspot.guard.compare import SPEED_SPREAD, ComparePlan, Side

__all__ = ["command_sides", "endpoint_sides", "input_mode", "plan_of"]


def input_mode(o: SimpleNamespace) -> str:
    """files, endpoint or commands: which input the options give (one clear error else)."""
    urls = (o.url_a, o.url_b)
    if any(urls):
        if not all(urls):
            raise SweetspotError("--url-a and --url-b go together: the two servers to compare")
        if o.a is not None or o.b is not None:
            raise SweetspotError("with --url-a and --url-b, leave A and B out (the servers "
                                 "run what they run)")
        if o.backend != "sim":
            raise SweetspotError("--backend applies to A and B commands; --url-a/--url-b "
                                 "measure running servers")
        return "endpoint"
    if o.a is None or o.b is None:
        raise SweetspotError("compare needs two inputs: A and B (two \"vllm serve ...\" "
                             "commands or two result files), or --url-a and --url-b")
    files = [Path(x).suffix.lower() == ".json" or Path(x).is_file() for x in (o.a, o.b)]
    if all(files):
        return "files"
    if any(files):
        raise SweetspotError("A and B must both be result files or both be vllm serve "
                             "commands")
    if o.backend not in ("sim", "vllm"):
        raise SweetspotError(f"--backend must be sim or vllm, not {o.backend!r} (two running "
                             "servers: --url-a and --url-b)")
    return "commands"


def plan_of(o: SimpleNamespace) -> ComparePlan:
    """The metrics guarded and their tolerances, and how many pairs to run."""
    from sweetspot.guard.metrics import guarded_metrics, parse_tolerances
    from sweetspot.metrics.slo import parse_slos
    from sweetspot.tune.evaluate import STATS

    slos = parse_slos(o.slo, stats=STATS)
    tolerances = parse_tolerances(o.tolerance)
    if o.min_repeats > o.max_repeats:
        raise SweetspotError(f"--min-repeats {o.min_repeats} is more than --max-repeats "
                             f"{o.max_repeats}")
    return ComparePlan(guarded_metrics(slos, tolerances), tolerances,
                       min_repeats=o.min_repeats, max_repeats=o.max_repeats,
                       goodput_ms=slos.goodput_ms, seed=o.seed)


def _command_model(text: str) -> str | None:
    from sweetspot.engine.cmdline import parse_serve_command
    from sweetspot.engine.flags import flag_table

    return parse_serve_command(text, flag_table()).model


def _auto_rate(side: Side, others: list[Side]) -> str:
    """``--rate auto``: offer every side the tune share of A's steady-state capacity (A's
    first evaluation, kept for its first pair); a note saying so, or why not."""
    from sweetspot.tune.study import AUTO_RATE_SHARE

    steady, trial = side.evaluator.capacity(side.config, rate_from=lambda s: round(
        AUTO_RATE_SHARE * s.request_throughput, 4) if s.request_throughput > 0 else None)
    if steady is None or side.evaluator.rate is None:
        return f"--rate auto: A did not run ({trial.status}: {trial.cause})"
    for other in others:
        other.evaluator.rate = side.evaluator.rate
    return (f"offered {side.evaluator.rate:.3g} req/s: {AUTO_RATE_SHARE:.0%} of A's capacity "
            f"({steady.request_throughput:.3g} req/s)")


def _side(name: str, text: str, settings, evaluator) -> Side:
    """One command, checked as ``lint`` checks it (as tune checks --baseline). A command vLLM
    would refuse is not bad input but a side that fails — ``oom`` where it cannot start on the
    GPU, ``invalid`` otherwise — with lint's sentence as its cause: a broken B is a
    regression."""
    from sweetspot.engine.lint import lint_command
    from sweetspot.spec.hardware import load_hardware
    from sweetspot.spec.knobs import ServingConfig
    from sweetspot.spec.quant import load_quantization
    from sweetspot.spec.version import parse_vllm_version

    report = lint_command(text, parse_vllm_version(settings.vllm_version),
                          load_hardware(settings.gpu))
    if report.errors:
        first = report.errors[0]
        refusal = ("oom" if first.code == "memory" else "invalid", first.message)
        return Side(name, redact_command(text), evaluator, ServingConfig(), refusal)
    config = report.config or ServingConfig()
    flag = load_quantization(settings.quant).vllm_flag if settings.quant else None
    if config.quantization is None and flag:  # as tune's baseline: vLLM quantises when told
        config = config.replace(quantization=flag)
    return Side(name, redact_command(text), evaluator, config)


def command_sides(o: SimpleNamespace) -> tuple[Side, Side, list[str]]:
    """Two ``vllm serve`` commands on ``--backend``: one evaluator (tune's), two configs."""
    from sweetspot.backends.loadgen import request_headers
    from sweetspot.cli._tune_settings import _new_settings
    from sweetspot.tune.study import study_evaluator

    models = {m for m in (_command_model(o.a), _command_model(o.b)) if m}
    if o.model is None and len(models) > 1:
        raise SweetspotError(f"A and B serve different models ({', '.join(sorted(models))}); "
                             "compare runs one model (--model)")
    # tune's settings with an empty baseline: the specs, workload, rate and server options
    # both sides share (an empty one, not None: None would be tune's demo)
    settings = _new_settings(SimpleNamespace(**dict(
        vars(o), model=o.model or (models.pop() if models else None), baseline="", url=None,
        study_name="compare", strategy="auto", objective="throughput", trials=None,
        time_budget=None, confirm=None, memory_gib=None)), {})
    vllm = dict(settings.vllm)
    spread = SPEED_SPREAD if o.speed_spread is None else o.speed_spread
    if o.backend == "sim":
        vllm["speed_spread"] = spread
    elif o.speed_spread is not None:
        raise SweetspotError("--speed-spread is the simulator's (real servers vary on their "
                             "own)")
    settings = dataclasses.replace(settings, vllm=vllm,
                                   headers=request_headers(o.api_key, o.header or []))
    evaluator = study_evaluator(settings)
    a, b = (_side(name, text, settings, evaluator) for name, text in (("A", o.a), ("B", o.b)))
    notes = []
    if o.backend == "sim" and spread > 0:
        notes.append(f"simulated: each server's speed drawn with a {spread:.0%} spread "
                     "(--speed-spread), as fresh real servers differ")
    if settings.rate == "auto" and a.refusal is None:
        notes.append(_auto_rate(a, []))
    return a, b, notes


def endpoint_sides(o: SimpleNamespace) -> tuple[Side, Side, list[str]]:
    """Two running servers, one evaluator each, drawing the same requests."""
    from sweetspot.backends.base import Target, backend_for
    from sweetspot.backends.loadgen import request_headers
    from sweetspot.cli._common import _realtime_client
    from sweetspot.cli._tune_settings import _parse_rate
    from sweetspot.metrics.slo import parse_slos
    from sweetspot.spec.knobs import ServingConfig
    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.tokens import tokenizer_counter
    from sweetspot.tune.evaluate import STATS, Evaluator

    for flag, given in (("--model", o.model), ("--gpu", o.gpu), ("--quant", o.quant),
                        ("--calibration", o.calibration), ("--acceptance", o.acceptance),
                        ("--speed-spread", o.speed_spread)):
        if given is not None:
            raise SweetspotError(f"{flag} describes A and B commands; --url-a/--url-b "
                                 "measure the servers as they run")
    headers = request_headers(o.api_key, o.header or [])
    counter = tokenizer_counter(o.tokenizer) if o.tokenizer else None
    workload = load_workload(o.workload or "chat", counter)
    rate = _parse_rate(o.rate if o.rate is not None or o.workload is not None else "auto")
    realtime = _realtime_client(o.client_priority)
    slos = parse_slos(o.slo, stats=STATS).limits_ms
    sides = []
    for name, url in (("A", o.url_a), ("B", o.url_b)):
        backend = backend_for("endpoint", Target(None, "", ServingConfig(),
                                                  options={"url": url}, headers=headers))
        evaluator = Evaluator(backend, workload, o.num_requests or 64, slos,
                              vocab_size=o.vocab_size or 32_000,
                              seed=o.seed, realtime_client=realtime, headers=headers,
                              rate=rate if isinstance(rate, float) else None)
        sides.append(Side(name, redact_url(url), evaluator, ServingConfig()))
    notes = [f"capacity: a burst of {o.num_requests or 64} requests (--num-requests) on each "
             "endpoint; latencies at the offered rate"]
    if rate == "auto":
        notes.append(_auto_rate(sides[0], sides[1:]))
    return sides[0], sides[1], notes
