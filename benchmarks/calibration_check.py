"""Calibrate the simulator on one real server, predict others: measure here, compare anywhere.

The design of ``tests/backends/vllm/test_sim_calibration.py`` (issue 4's fidelity check), for
any vLLM and any host, in two steps so that the measuring can run where the GPU is and the
comparing where sweetspot's full install is:

    # where vLLM runs: servers of max-num-seqs 4, 16, 64 side by side, the calibration profile
    # on the 64 server and measured runs on all three, interleaved round-robin
    python benchmarks/calibration_check.py measure --vllm-python PY --model DIR --tokenizer DIR \
        --out DIR [--round 0] [--server-args "--enforce-eager ..."] [--dummy-weights]

    # anywhere: `sweetspot calibrate` on the profile runs, `sweetspot simulate --calibration`
    # for every measured run, medians compared
    python benchmarks/calibration_check.py compare DIR --gpu h200 --vllm-version 0.24.0 \
        [--set enforce_eager=true ...]

``measure --round K`` runs one round (seeds depend on K), so rounds can run as separate calls
on a machine whose commands are time-limited; ``compare`` reads every round found in DIR.
``--profile-repeats inf:3`` measures a profile run three times a round with fresh prompts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from sweetspot.backends.vllm import launch_server

WORKLOAD = {"name": "calibration-check", "prompt": {"kind": "uniform", "low": 16, "high": 96},
            "output": {"kind": "uniform", "low": 64, "high": 192}}
KEYS = ("output_throughput", "median_tpot_ms")


def _profile(poisson_rate: str) -> tuple[tuple[str, str | None, int | None, int], ...]:
    """As the test's: (label, rate, concurrency, requests); the Poisson run's rate is an option
    (about half of the calibration server's rate-inf throughput)."""
    return (("closed1", None, 1, 16), ("closed4", None, 4, 32), ("closed16", None, 16, 32),
            ("inf", "inf", None, 48), ("poisson", poisson_rate, None, 32))


def _bench(url: str, workload: Path, out: Path, seed: int, n: int, rate: str | None,
           concurrency: int | None, vocab: int) -> None:
    args = [sys.executable, "-m", "sweetspot.cli", "bench", "--url", url, "--workload",
            str(workload), "--num-requests", str(n), "--vocab-size", str(vocab), "--seed",
            str(seed), "--metrics-interval", "0", "--json", str(out)]
    if rate is not None:
        args += ["--rate", rate]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"bench failed ({out.name}): {result.stderr.strip()[-400:]}")


def measure(opts: argparse.Namespace) -> None:
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    workload = out / "workload.json"
    workload.write_text(json.dumps(WORKLOAD))
    seqs_list = [int(s) for s in opts.seqs.split(",")]
    runs = [(rate, int(n), int(rep)) for rate, n, rep in
            (item.split(":") for item in opts.runs.split(","))]
    r = opts.round
    manifest = {"round": r, "seqs": seqs_list, "calibration_seqs": opts.calibration_seqs,
                "profile": [], "measured": [], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with ExitStack() as stack:
        servers = {}
        for seqs in seqs_list:
            began = time.monotonic()
            servers[seqs] = stack.enter_context(launch_server(
                opts.vllm_python, opts.model, tokenizer_dir=opts.tokenizer,
                args=(*shlex.split(opts.server_args), "--max-num-seqs", str(seqs)),
                log_path=out / f"vllm{seqs}-r{r}.log", dummy_weights=opts.dummy_weights))
            print(f"server max-num-seqs {seqs} up in {time.monotonic() - began:.0f} s",
                  flush=True)
        for seqs, server in servers.items():  # a fresh server's first batches run slower
            _bench(server.base_url, workload, out / f"warm{seqs}-r{r}.json", seqs, 32, None, 8,
                   opts.vocab)
        cal_url = servers[opts.calibration_seqs].base_url
        profile = _profile(opts.profile_rate)
        profile_repeats = {label: int(k) for label, k in
                   (item.split(":") for item in opts.profile_repeats.split(",") if item)}
        for i in range(max(len(profile), len(runs))):
            if i < len(profile):
                label, rate, concurrency, n = profile[i]
                for k in range(profile_repeats.get(label, 1)):  # fresh prompts every repeat
                    path = out / (f"profile-{label}-{r}.json" if k == 0
                                  else f"profile-{label}-{r}-{k}.json")
                    _bench(cal_url, workload, path, 5000 + 10 * r + i + 20000 * k, n, rate,
                           concurrency, opts.vocab)
                    manifest["profile"].append(path.name)
                    _save(out, manifest)
                    print(f"profile {label}: {_summary(path)}", flush=True)
            if i < len(runs):
                rate, n, repeats = runs[i]
                for seqs, server in servers.items():
                    for repeat in range(repeats):
                        seed = 1000 * r + 100 * seqs + 10 * repeat + i
                        path = out / f"m{seed}.json"
                        _bench(server.base_url, workload, path, seed, n, rate, None,
                               opts.vocab)
                        manifest["measured"].append(
                            {"seqs": seqs, "rate": rate, "n": n, "seed": seed,
                             "path": path.name})
                        _save(out, manifest)
                        print(f"mns {seqs} rate {rate}: {_summary(path)}", flush=True)


def _save(out: Path, manifest: dict) -> None:
    """After every run: a call cut short by its time limit still leaves what it measured."""
    (out / f"manifest-r{manifest['round']}.json").write_text(json.dumps(manifest, indent=1))


def _summary(path: Path) -> str:
    d = json.loads(path.read_text())
    return f"{d['output_throughput']:.1f} tok/s, median TPOT {d['median_tpot_ms']:.2f} ms"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweetspot.cli", *args], capture_output=True,
                          text=True)


def compare(opts: argparse.Namespace) -> None:
    folder = Path(opts.folder)
    manifests = [json.loads(p.read_text()) for p in sorted(folder.glob("manifest-r*.json"))]
    if not manifests:
        raise SystemExit(f"no manifest-r*.json in {folder}")
    model = opts.model or str(folder / "model")
    common = ["--model", model, "--gpu", opts.gpu, "--vllm-version", opts.vllm_version]
    for knob in opts.set:
        common += ["--set", knob]
    common += shlex.split(opts.extra)
    calibration = folder / "calibration.json"
    cal_seqs = manifests[0]["calibration_seqs"]
    profile = [str(folder / name) for m in manifests for name in m["profile"]]
    fitted = _cli("calibrate", *profile, *common, "--set", f"max_num_seqs={cal_seqs}",
                  "--out", str(calibration))
    if fitted.returncode != 0:
        raise SystemExit(fitted.stderr or fitted.stdout)
    print(fitted.stdout)
    measured: dict[tuple, list[float]] = {}
    predicted: dict[tuple, list[float]] = {}
    for m in manifests:
        for run in m["measured"]:
            p_path = folder / f"p{run['seed']}.json"
            sim = _cli("simulate", *common, "--set", f"max_num_seqs={run['seqs']}",
                       "--workload", str(folder / "workload.json"), "--num-requests",
                       str(run["n"]), "--rate", run["rate"], "--seed", str(run["seed"]),
                       "--calibration", str(calibration), "--json", str(p_path))
            if sim.returncode != 0:
                raise SystemExit(sim.stderr or sim.stdout)
            got = json.loads((folder / run["path"]).read_text())
            want = json.loads(p_path.read_text())
            for key in KEYS:
                measured.setdefault((run["seqs"], run["rate"], key), []).append(got[key])
                predicted.setdefault((run["seqs"], run["rate"], key), []).append(want[key])
    print("| max-num-seqs | rate | metric | measured (runs) | simulated | error |")
    print("|---|---|---|---|---|---|")
    errors = []
    for (seqs, rate, key), values in measured.items():
        mv, pv = statistics.median(values), statistics.median(predicted[seqs, rate, key])
        errors.append(pv / mv - 1)
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {seqs} | {rate} | {key} | {mv:.2f} ({runs}) | {pv:.2f} | {pv / mv - 1:+.1%} |")
    within = sum(abs(e) <= 0.15 for e in errors)
    print(f"\n{within} of {len(errors)} within 15 %; worst {max(errors, key=abs):+.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--vllm-python", required=True)
    m.add_argument("--model", required=True)
    m.add_argument("--tokenizer", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--round", type=int, default=0)
    m.add_argument("--server-args", default="--enforce-eager")
    m.add_argument("--dummy-weights", action="store_true",
                   help="random weights (--load-format dummy), for a model folder without them")
    m.add_argument("--seqs", default="4,16,64")
    m.add_argument("--calibration-seqs", type=int, default=64)
    m.add_argument("--runs", default="inf:48:3,1:24:1,2:32:1",
                   help="rate:requests:repeats per measured run, comma-separated")
    m.add_argument("--profile-rate", default="2.7")
    m.add_argument("--profile-repeats", default="",
                   help="label:times for profile runs measured more than once a round, e.g. "
                        "inf:3,closed16:2 (the runs a slow or fast moment can decide)")
    m.add_argument("--vocab", type=int, default=4096)
    c = sub.add_parser("compare")
    c.add_argument("folder")
    c.add_argument("--model", help="the model folder (default: FOLDER/model)")
    c.add_argument("--gpu", required=True)
    c.add_argument("--vllm-version", required=True)
    c.add_argument("--set", action="append", default=[])
    c.add_argument("--extra", default="", help="more simulate/calibrate options, one string")
    opts = parser.parse_args()
    (measure if opts.step == "measure" else compare)(opts)


if __name__ == "__main__":
    main()
