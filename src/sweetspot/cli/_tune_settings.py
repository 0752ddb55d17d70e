"""`sweetspot tune`'s options as one checked settings object: the study's ``StudySettings``
(new, or as a resumed study stored them) and how this run serves it. The checks run in a fixed
order, so that of several mistakes the same one is reported first; those the study's strategy
needs are ``tune.strategy.check_strategy``'s, which ``run_study`` makes again."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

from pydantic import BaseModel, ConfigDict

from sweetspot._errors import SweetspotError
from sweetspot.cli._common import GUIDE_MODEL, _check_name, _out, _realtime_client
from sweetspot.spec.hardware import load_hardware
from sweetspot.spec.knobs import ServingConfig
from sweetspot.spec.quant import load_quantization
from sweetspot.spec.version import parse_vllm_version
from sweetspot.tune.executors import Execution
from sweetspot.tune.strategy import check_strategy
from sweetspot.tune.study import StudySettings


class TuneSettings(BaseModel):
    """One `sweetspot tune` run."""

    model_config = ConfigDict(frozen=True)

    study: StudySettings  # what defines the study (stored with it); --resume: as stored
    storage_url: str
    resume: bool
    space_changes: dict  # --space-file, then --space: knob -> values, None drops the knob
    dry_run: bool  # print the servers' commands, start nothing
    report_dir: Path  # --report-dir, else .sweetspot/reports/STUDY
    execution: Execution  # where the trials run (not part of the study)
    worker: bool = False  # one of the processes serving the study's shared budget


def tune_settings(o: SimpleNamespace) -> TuneSettings:
    """``o``: the command's options by name."""
    from sweetspot.backends.loadgen import request_headers
    from sweetspot.tune.space import load_space_file, parse_fix_items, parse_space_items
    from sweetspot.tune.store import default_storage_url

    storage_url = o.storage or default_storage_url()
    if o.study_name is not None and o.report_dir is None:
        _check_name(o.study_name, "--study-name")
    changes = {}
    if o.space_file is not None:
        changes.update(load_space_file(o.space_file))
    changes.update(parse_space_items(o.space or []))
    fixed = parse_fix_items(o.fix or [])  # bad ones end here; clashes with --space: run_study
    if o.worker and o.resume:
        raise SweetspotError("--worker joins the study or starts it: leave --resume out")
    if o.worker and not o.study_name:
        raise SweetspotError("--worker needs --study-name (the study every worker serves)")
    joined = o.worker and _stored(storage_url, o.study_name)
    study = (_resumed_settings(o, storage_url, fixed) if o.resume or joined
             else _new_settings(o, fixed))
    if o.worker and study.strategy == "rate":
        raise SweetspotError("--strategy rate is one baseline's search: it has no trials to "
                             "share among workers")
    study = dataclasses.replace(study, headers=request_headers(o.api_key, o.header or []))
    return TuneSettings(study=study, storage_url=storage_url, resume=o.resume, worker=o.worker,
                        space_changes=changes, dry_run=o.dry_run,
                        report_dir=o.report_dir or Path(".sweetspot") / "reports" / study.name,
                        execution=_execution(o, study.backend))


def _execution(o: SimpleNamespace, backend: str) -> Execution:
    """--executor and its options, checked against the study's backend."""
    from sweetspot.tune.executors import check_execution, default_executor

    execution = Execution(executor=o.executor or default_executor(backend),
                          in_flight=o.in_flight, ray_address=o.ray_address,
                          emulate_gpus=o.emulate_gpus, emulate_speedup=o.emulate_speedup)
    check_execution(execution, backend)
    return execution


def _stored(storage_url: str, name: str) -> bool:
    """A study of that name is in the storage (a worker joins it with its settings)."""
    from sweetspot.tune.store import StudyStore

    return StudyStore.stored_settings(storage_url, name, wait_s=0.0) is not None


def _resumed_settings(o: SimpleNamespace, storage_url: str, fixed: dict) -> StudySettings:
    """--resume: the settings the study stored (their secrets from this environment), with
    more trials or time when asked."""
    from sweetspot.tune.store import StudyStore

    if not o.study_name:
        raise SweetspotError("--resume needs --study-name")
    if fixed:  # its trials ran with the stored pins; others would mix two studies
        raise SweetspotError("--fix applies to a new study: a resumed one keeps the knobs "
                             "it pinned")
    stored = StudyStore.load(storage_url, o.study_name).user_attrs.get("settings")
    if not stored:
        raise SweetspotError(f"study {o.study_name!r} has no sweetspot settings")
    settings = StudySettings.from_dict(stored).with_secrets()
    if settings.vllm.get("realtime_client"):  # still allowed here?
        _realtime_client("realtime")
    if o.trials is not None or o.time_budget is not None:  # a resumed study may get more
        settings = dataclasses.replace(
            settings, trials=o.trials if o.trials is not None else settings.trials,
            seconds=_parse_duration(o.time_budget) if o.time_budget else settings.seconds)
    return settings


def _new_settings(o: SimpleNamespace, fixed: dict) -> StudySettings:
    """A new study's settings: the defaults filled in (no model, GPU, workload or baseline:
    the field guide's setup, its template the baseline), every name loaded, every text
    parsed."""
    import time

    from sweetspot.spec.loaders import load_workload
    from sweetspot.spec.model import checkpoint_quantization, load_model
    from sweetspot.spec.tokens import tokenizer_counter
    from sweetspot.spec.workload import workload_to_dict
    from sweetspot.tune.advise import _checkpoint
    from sweetspot.tune.evaluate import config_to_json, parse_slos
    from sweetspot.tune.space import storage_label

    _check_backend(o)
    demo = o.model is None and o.gpu is None and o.workload is None and o.baseline is None
    model, gpu = o.model or GUIDE_MODEL, o.gpu or "a100-80gb"
    version = _target_release(o)
    hardware = load_hardware(gpu)
    offered = _parse_rate(o.rate if o.rate is not None or o.workload is not None else "auto")
    baseline = _guide_baseline(version) if demo and o.backend == "sim" else o.baseline
    counter = tokenizer_counter(o.tokenizer) if o.tokenizer else None
    wl = load_workload(o.workload or "chat", counter)
    slos = parse_slos(o.slo)
    if o.acceptance is not None and o.backend != "sim":
        raise SweetspotError("--acceptance is what the simulator assumes; a real server's "
                             "acceptance is measured (backend sim only)")
    resolved = load_model(model)
    q = checkpoint_quantization(model, resolved, load_quantization(o.quant) if o.quant else None)
    config = _baseline_config(baseline, version, hardware, q, o.backend)
    seconds = _parse_duration(o.time_budget) if o.time_budget else None
    real = o.backend != "sim"  # measured, not predicted
    vllm = _server_settings(o)
    return StudySettings(
        name=o.study_name or _slug(f"{resolved.arch.name}-{hardware.name}-{wl.name}-"
                                   f"{time.strftime('%Y%m%d-%H%M%S')}"),
        model=model if real else _checkpoint(model, resolved.arch, q, resolved.quantization),
        gpu=hardware.name, quant=q.name, vllm_version=str(version),
        workload=workload_to_dict(wl), num_requests=o.num_requests or (64 if real else 300),
        slos=slos, space={}, baseline=config_to_json(config),
        strategy=o.strategy, objective=o.objective,
        trials=o.trials or (None if seconds and not real else (8 if real else 60)),
        seconds=seconds, seed=o.seed,
        confirm_repeats=o.confirm if o.confirm is not None else (3 if real else 7),
        memory_limit_gib=o.memory_gib, backend=o.backend, vllm=vllm,
        calibration=str(o.calibration) if o.calibration else None,
        rate=offered, acceptance=o.acceptance,
        fixed={k: storage_label(v) for k, v in (fixed or {}).items()})


def _check_backend(o: SimpleNamespace) -> None:
    """The backend and the options that go with it; then what the strategy needs."""
    if o.backend not in ("sim", "vllm", "endpoint"):
        raise SweetspotError(f"--backend must be sim, vllm or endpoint, not {o.backend!r}")
    if o.dummy_weights and o.backend != "vllm":
        raise SweetspotError("--dummy-weights goes with --backend vllm (servers that sweetspot "
                             "starts)")
    if (o.backend == "endpoint") != (o.url is not None):
        raise SweetspotError("--url goes with --backend endpoint (a running server), and "
                             "--backend endpoint needs --url")
    check_strategy(o.backend, o.strategy, o.objective, has_slos=bool(o.slo))


def _target_release(o: SimpleNamespace):
    """The vLLM release the picks are rendered for: with --backend vllm, the one the launched
    servers run (unless they run from a launch template); else --vllm-version."""
    from sweetspot.cli._server_options import vllm_python_path

    if o.backend == "vllm" and o.launch_template is None:
        return _installed_vllm(vllm_python_path(o.vllm_python), o.vllm_version)
    return parse_vllm_version(o.vllm_version)


def _installed_vllm(python: str, asked: str | None):
    """The release the launched servers run: the vLLM ``python`` imports. A different
    --vllm-version would render the picks for a release no trial measured."""
    from sweetspot.backends.vllm.installed import detect_vllm

    installed = parse_vllm_version(str(detect_vllm(python).version))
    if asked is not None and parse_vllm_version(asked) != installed:
        raise SweetspotError(f"--vllm-version {asked}: {python} has vLLM {installed}, the "
                             "release the trials run; leave --vllm-version out, or use "
                             "--launch-template for another release")
    return installed


def _guide_baseline(version) -> str:
    """The default demo's baseline, said on stdout: the field guide's "ultimate template" (its
    step 1: start from the template), as far as the target release has its flags — its
    --scheduling-policy lof and --num-scheduler-steps 8 do not exist in current releases, and
    a draft model runs only from DRAFT_MODEL_SINCE."""
    from packaging.version import Version

    from sweetspot.engine.releases import DRAFT_MODEL_SINCE, NUM_SCHEDULER_STEPS_REMOVED

    parts = ["vllm serve Qwen/Qwen2.5-14B-Instruct-AWQ --max-num-seqs 256",
             "--max-model-len 8192 --gpu-memory-utilization 0.95 --enable-prefix-caching"]
    if Version(str(version)) < NUM_SCHEDULER_STEPS_REMOVED:
        parts.append("--num-scheduler-steps 8")
    if Version(str(version)) >= DRAFT_MODEL_SINCE:
        parts.append("--speculative-config '{\"method\": \"draft_model\", \"model\": "
                     "\"Qwen/Qwen2.5-0.5B-Instruct\", \"num_speculative_tokens\": 8}'")
    baseline = " ".join(parts)
    _out.print(f"baseline: the field guide's template for vLLM {version} "
               f"({baseline.removeprefix('vllm serve ')})", markup=False)
    return baseline


def _baseline_config(baseline: str | None, version, hardware, quant,
                     backend: str) -> ServingConfig:
    """--baseline as a configuration, checked as `sweetspot lint` checks it (none: vLLM's
    defaults), with the quantisation vLLM must be told of."""
    from sweetspot.engine.lint import lint_command

    config = None
    if baseline:
        report = lint_command(baseline, version, hardware)
        if report.errors:
            raise SweetspotError(f"--baseline: {report.errors[0].message}")
        config = report.config
    config = config or ServingConfig()
    if backend != "endpoint" and config.quantization is None and quant.vllm_flag:
        # vLLM quantises at load time only when told (fp8): every trial's server must be, so
        # what is measured is what the picks' commands serve.
        config = config.replace(quantization=quant.vllm_flag)
    return config


def _server_settings(o: SimpleNamespace) -> dict:
    """``StudySettings.vllm``: how the study's servers start (--backend vllm), or where the
    running one is (endpoint); whether the client runs real-time."""
    from sweetspot.cli._server_options import server_options

    vllm: dict = {}
    if o.backend == "vllm":
        server = server_options(o.vllm_python, o.launch_template, o.server_env)
        vllm = {"python": server.python, "template": server.template, "tokenizer": o.tokenizer,
                "env": server.env, "trials_dir": str(o.trials_dir),
                "args": shlex.split(o.server_args or "")}
        if o.dummy_weights:  # an option of every server, so a resumed study keeps it
            from sweetspot.backends.vllm.server import DUMMY_WEIGHTS

            vllm["args"] += DUMMY_WEIGHTS
            vllm["dummy_weights"] = True
    if o.backend == "endpoint":
        vllm = {"url": o.url}
    if o.client_priority == "realtime" and o.backend == "sim":
        raise SweetspotError("--client-priority realtime applies to measured backends "
                             "(vllm, endpoint): the simulator has no client")
    if _realtime_client(o.client_priority):
        vllm["realtime_client"] = True
    return vllm


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.") or "study"


def _parse_rate(text: str | None) -> float | str | None:
    """--rate: a positive req/s, "auto", or None (the workload's own)."""
    if text is None or text.strip().lower() == "auto":
        return None if text is None else "auto"
    try:
        value = float(text)
    except ValueError:
        raise SweetspotError(f"bad --rate {text!r}: a request rate (req/s) or auto") from None
    if not math.isfinite(value) or value <= 0:
        raise SweetspotError(f"bad --rate {text!r}: must be a positive number of req/s")
    return value


def _parse_duration(text: str) -> float:
    value = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(value[-1:])
    try:
        seconds = float(value[:-1] if scale else value) * (scale or 1)
    except ValueError:
        raise SweetspotError(f"bad duration {text!r}: expected e.g. 90s, 20m, 2h") from None
    if seconds <= 0:
        raise SweetspotError(f"bad duration {text!r}: must be positive")
    return seconds
