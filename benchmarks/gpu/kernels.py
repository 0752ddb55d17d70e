#!/usr/bin/env python3
# ruff: noqa: F821, B023  -- closures timed in loops, their tensors freed with `del` after
"""Kernel-level measurements of the roofline cost model's physics constants.

Measures on one GPU, with PyTorch only (no vLLM), what ``RooflineConstants`` in
``src/sweetspot/backends/sim/cost.py`` assumes:

- GEMMs (``linear_mfu`` at large M, ``weight_bandwidth`` at small M): one transformer layer's
  four bf16 linears (qkv, o, gate_up, down) of qwen3-14b and llama-3-8b at M tokens, cycled over
  8 distinct weight copies (the weights never sit in L2), captured in a CUDA graph;
- prefill attention (``attention_mfu``): causal SDPA (flash, and cuDNN where it runs), one
  sequence of L tokens, 40 q / 8 kv heads, head_dim 128;
- decode attention (``kv_bandwidth``): one query token per sequence over contiguous KV of L
  tokens, B sequences; SDPA with ``enable_gqa`` and a GQA-packed form (the q heads sharing a kv
  head as query rows, as FlashAttention / FlashInfer decode kernels do);
- a 2 GiB device-to-device copy (the bandwidth actually reachable).

    python3 benchmarks/gpu/kernels.py --out kernels.json     # on the GPU, ~1 min
    python3 benchmarks/gpu/kernels.py --dry-run --out x.json # tiny CPU fp32 check
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time

import torch
import torch.nn.functional as F

MODELS = {
    "qwen3-14b": dict(hidden=5120, intermediate=17408, q_heads=40, kv_heads=8, head_dim=128,
                      layers=40),
    "llama-3-8b": dict(hidden=4096, intermediate=14336, q_heads=32, kv_heads=8, head_dim=128,
                       layers=32),
}
GEMM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 2048, 4096, 8192, 16384]
PREFILL_L = [512, 2048, 8192, 20000]
DECODE_B = [1, 16, 64, 256]
DECODE_L = [512, 2048, 8192]
MAX_DECODE_TOKENS = 4_200_000
WEIGHT_COPIES = 8
COPY_BYTES = 2 << 30

# Datasheet peaks (dense bf16 FLOP/s, HBM B/s), matched on torch.cuda.get_device_name().
PEAKS = [
    ("H200", 989e12, 4.8e12),
    ("H100 PCIe", 756e12, 2.0e12),
    ("H100 NVL", 835e12, 3.9e12),
    ("H100", 989e12, 3.35e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("A100", 312e12, 2.039e12),
]


def peaks_for(name: str) -> tuple[float, float]:
    for key, flops, bw in PEAKS:
        if key in name:
            return flops, bw
    return 989e12, 3.35e12


class Timer:
    """Seconds per call of ``fn``: captured in a CUDA graph where possible (no launch gaps),
    else eager with CUDA events (or perf_counter on CPU)."""

    def __init__(self, device: torch.device, target_s: float, min_reps: int = 3,
                 max_reps: int = 2000):
        self.device, self.target_s = device, target_s
        self.min_reps, self.max_reps = min_reps, max_reps
        self.cuda = device.type == "cuda"

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _elapsed(self, call, reps: int) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                call()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        return time.perf_counter() - t0

    def __call__(self, fn, *, graph: bool = True) -> tuple[float, str]:
        call, mode, g = fn, "eager", None
        if self.cuda and graph:
            try:
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        fn()
                torch.cuda.current_stream().wait_stream(stream)
                self._sync()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                call, mode = g.replay, "graph"
            except Exception as exc:
                print(f"  (graph capture failed, eager: {type(exc).__name__}: {exc})"[:200],
                      file=sys.stderr)
                g = None
                self._sync()
        for _ in range(2):  # warm-up
            call()
        self._sync()
        once = self._elapsed(call, 1)
        reps = int(min(self.max_reps, max(self.min_reps, self.target_s / max(once, 1e-7))))
        total = self._elapsed(call, reps)
        del g
        return total / reps, mode


def bench_gemm(name: str, shape: dict, ms: list[int], dtype, device, timer: Timer,
               peak_flops: float, peak_bw: float, copies: int) -> list[dict]:
    h, inter = shape["hidden"], shape["intermediate"]
    q, kv, hd = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    dims = {"qkv": (h, (q + 2 * kv) * hd), "o": (q * hd, h), "gate_up": (h, 2 * inter),
            "down": (inter, h)}
    params = sum(i * o for i, o in dims.values())
    elem = torch.finfo(dtype).bits // 8
    layers = [{k: (torch.randn(o, i, device=device, dtype=dtype) * 0.02)
               for k, (i, o) in dims.items()} for _ in range(copies)]
    rows = []
    for m in ms:
        xs = {k: torch.randn(m, i, device=device, dtype=dtype) for k, (i, _) in dims.items()}

        def step():
            for w in layers:
                for k in ("qkv", "o", "gate_up", "down"):
                    F.linear(xs[k], w[k])

        sec, mode = timer(step)
        per_layer = sec / copies
        flops = 2.0 * m * params
        wbytes = params * elem
        row = dict(M=m, s_per_layer=per_layer, tflops=flops / per_layer / 1e12,
                   frac_peak_flops=flops / per_layer / peak_flops,
                   weight_bw=wbytes / per_layer, frac_peak_bw=wbytes / per_layer / peak_bw,
                   mode=mode)
        rows.append(row)
        print(f"  {name:10s} M={m:6d} {per_layer * 1e6:9.1f} us/layer "
              f"{row['tflops']:7.1f} TF/s  mfu {row['frac_peak_flops']:.3f}  "
              f"wbw {row['weight_bw'] / 1e12:5.2f} TB/s ({row['frac_peak_bw']:.3f})  {mode}",
              flush=True)
        del xs
    del layers
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _sdpa_backends():
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # very old torch
        return None, None
    return SDPBackend, sdpa_kernel


def run_sdpa(backend_name: str | None, q, k, v, *, causal: bool, gqa: str):
    """A callable running SDPA on the named backend (None: torch's choice), GQA either native
    (``enable_gqa``) or by repeating kv heads beforehand; raises if the backend refuses."""
    SDPBackend, sdpa_kernel = _sdpa_backends()
    if gqa == "repeat" and k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    kwargs = dict(is_causal=causal)
    if gqa == "native" and k.shape[1] != q.shape[1]:
        kwargs["enable_gqa"] = True

    if backend_name is None or sdpa_kernel is None:
        def fn():
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
    else:
        backend = getattr(SDPBackend, backend_name)

        def fn():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
    fn()  # raises here if the backend cannot run these inputs
    return fn


def attention_variants(device) -> list[tuple[str | None, str]]:
    if device.type == "cuda":
        return [("FLASH_ATTENTION", "native"), ("FLASH_ATTENTION", "repeat"),
                ("CUDNN_ATTENTION", "native"), ("CUDNN_ATTENTION", "repeat"), (None, "native")]
    return [("FLASH_ATTENTION", "native"), (None, "native"), (None, "repeat")]


def bench_prefill(shape: dict, ls: list[int], dtype, device, timer: Timer,
                  peak_flops: float) -> list[dict]:
    qh, kvh, hd = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    rows = []
    for length in ls:
        q = torch.randn(1, qh, length, hd, device=device, dtype=dtype)
        k = torch.randn(1, kvh, length, hd, device=device, dtype=dtype)
        v = torch.randn(1, kvh, length, hd, device=device, dtype=dtype)
        flops = 4.0 * length * length / 2 * qh * hd
        done_backends = set()
        for backend, gqa in attention_variants(device):
            if backend in done_backends:
                continue  # native GQA worked on this backend: skip the repeat fallback
            try:
                fn = run_sdpa(backend, q, k, v, causal=True, gqa=gqa)
                sec, mode = timer(fn)
            except Exception as exc:
                print(f"  prefill L={length} {backend}/{gqa}: unavailable "
                      f"({type(exc).__name__})", flush=True)
                continue
            done_backends.add(backend)
            row = dict(L=length, backend=backend or "default", gqa=gqa, seconds=sec,
                       flops=flops, tflops=flops / sec / 1e12,
                       frac_peak_flops=flops / sec / peak_flops, mode=mode)
            rows.append(row)
            print(f"  prefill L={length:6d} {row['backend']:16s} {gqa:6s} {sec * 1e3:8.3f} ms "
                  f"{row['tflops']:7.1f} TF/s  frac {row['frac_peak_flops']:.3f}  {mode}",
                  flush=True)
            if backend is None:
                break
        del q, k, v
    return rows


def bench_decode(shape: dict, bs: list[int], ls: list[int], dtype, device, timer: Timer,
                 peak_bw: float, max_tokens: int) -> list[dict]:
    qh, kvh, hd = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    group = qh // kvh
    elem = torch.finfo(dtype).bits // 8
    rows = []
    for b in bs:
        for length in ls:
            if b * length > max_tokens:
                continue
            k = torch.randn(b, kvh, length, hd, device=device, dtype=dtype)
            v = torch.randn(b, kvh, length, hd, device=device, dtype=dtype)
            kv_bytes = 2 * b * length * kvh * hd * elem
            forms = {
                # one query row per q head, kv heads shared through enable_gqa
                "gqa": torch.randn(b, qh, 1, hd, device=device, dtype=dtype),
                # the q heads of a kv head as query rows (no causal mask: all see all keys)
                "packed": torch.randn(b, kvh, group, hd, device=device, dtype=dtype),
            }
            for form, q in forms.items():
                result = None
                variants = [("FLASH_ATTENTION", "native"), (None, "native")]
                if device.type == "cuda":
                    variants.insert(1, ("CUDNN_ATTENTION", "native"))
                for backend, gqa in variants:
                    try:
                        fn = run_sdpa(backend, q, k, v, causal=False, gqa=gqa)
                        result = (backend or "default", *timer(fn))
                        break
                    except Exception as exc:
                        print(f"  decode B={b} L={length} {form} {backend}: unavailable "
                              f"({type(exc).__name__})", flush=True)
                if result is None:
                    continue
                backend, sec, mode = result
                row = dict(B=b, L=length, form=form, backend=backend, seconds=sec,
                           kv_bytes=kv_bytes, bandwidth=kv_bytes / sec,
                           frac_peak_bw=kv_bytes / sec / peak_bw, mode=mode)
                rows.append(row)
                print(f"  decode B={b:4d} L={length:6d} {form:6s} {backend:16s} "
                      f"{sec * 1e6:9.1f} us {row['bandwidth'] / 1e12:5.2f} TB/s  "
                      f"frac {row['frac_peak_bw']:.3f}  {mode}", flush=True)
            del k, v, forms
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def bench_copy(nbytes: int, device, timer: Timer, peak_bw: float) -> dict:
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)

    def fn():
        dst.copy_(src)

    sec, mode = timer(fn)
    moved = 2 * nbytes
    row = dict(bytes_copied=nbytes, bytes_moved=moved, seconds=sec, bandwidth=moved / sec,
               frac_peak_bw=moved / sec / peak_bw, mode=mode)
    print(f"  copy {nbytes / 2**30:.3f} GiB: {sec * 1e3:.3f} ms, "
          f"{row['bandwidth'] / 1e12:.2f} TB/s (r+w), frac {row['frac_peak_bw']:.3f}  {mode}",
          flush=True)
    del src, dst
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny shapes, fp32, on CPU (or --device): checks the script only")
    ap.add_argument("--device", default=None)
    ap.add_argument("--peak-flops", type=float, default=None, help="override bf16 dense peak")
    ap.add_argument("--peak-bw", type=float, default=None, help="override HBM peak, B/s")
    args = ap.parse_args(argv)

    t_start = time.time()
    if args.dry_run:
        device = torch.device(args.device or "cpu")
        dtype = torch.float32
        models = {k: {**v, "hidden": v["hidden"] // 16, "intermediate": v["intermediate"] // 16,
                      "q_heads": v["q_heads"] // 4, "kv_heads": v["kv_heads"] // 4,
                      "head_dim": 32} for k, v in MODELS.items()}
        gemm_m, prefill_l = [1, 16, 64], [64, 200]
        decode_b, decode_l, max_tokens = [1, 4], [64, 256], 512
        copies, copy_bytes, target = 2, 1 << 20, 0.01
    else:
        device = torch.device(args.device or "cuda")
        dtype = torch.bfloat16
        models, gemm_m, prefill_l = MODELS, GEMM_M, PREFILL_L
        decode_b, decode_l, max_tokens = DECODE_B, DECODE_L, MAX_DECODE_TOKENS
        copies, copy_bytes, target = WEIGHT_COPIES, COPY_BYTES, 0.2

    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        gpu = "cpu"
    peak_flops, peak_bw = peaks_for(gpu)
    peak_flops = args.peak_flops or peak_flops
    peak_bw = args.peak_bw or peak_bw
    timer = Timer(device, target)
    print(f"# {gpu}  torch {torch.__version__}  cuda {torch.version.cuda}  "
          f"peaks: {peak_flops / 1e12:.0f} TFLOP/s bf16, {peak_bw / 1e12:.2f} TB/s", flush=True)

    result = dict(
        gpu=gpu, torch=torch.__version__, cuda=torch.version.cuda,
        date=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        dry_run=args.dry_run, dtype=str(dtype).replace("torch.", ""),
        peak_bf16_flops=peak_flops, peak_hbm_bw=peak_bw, weight_copies=copies,
        models=models, gemm={}, prefill_attention=[], decode_attention=[], copy=None,
    )
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        result["sm_count"] = props.multi_processor_count
        result["memory_bytes"] = props.total_memory
        result["l2_bytes"] = getattr(props, "L2_cache_size", None)

    sections = [("copy", lambda: bench_copy(copy_bytes, device, timer, peak_bw))]
    for name, shape in models.items():
        sections.append((f"gemm:{name}", lambda n=name, s=shape: bench_gemm(
            n, s, gemm_m, dtype, device, timer, peak_flops, peak_bw, copies)))
    qwen = models["qwen3-14b"]
    sections.append(("prefill_attention", lambda: bench_prefill(
        qwen, prefill_l, dtype, device, timer, peak_flops)))
    sections.append(("decode_attention", lambda: bench_decode(
        qwen, decode_b, decode_l, dtype, device, timer, peak_bw, max_tokens)))

    errors = {}
    for key, run in sections:
        print(f"## {key}", flush=True)
        t0 = time.time()
        try:
            value = run()
        except Exception as exc:
            errors[key] = f"{type(exc).__name__}: {exc}"
            print(f"  FAILED: {errors[key]}", flush=True)
            continue
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if key.startswith("gemm:"):
            result["gemm"][key[5:]] = value
        else:
            result[key] = value
        print(f"  ({time.time() - t0:.1f} s)", flush=True)
        with open(args.out, "w") as fh:  # partial results survive a timeout
            json.dump(result, fh, indent=1)

    result["errors"] = errors
    result["wall_s"] = time.time() - t_start
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)

    print("# summary: GEMM fraction of bf16 peak (mfu) / of HBM bandwidth (wbw) per layer")
    names = list(result["gemm"])
    print("      M " + "".join(f"{n + ' mfu':>16s}{n[:6] + ' wbw':>12s}" for n in names))
    for i, m in enumerate(gemm_m):
        cells = ""
        for n in names:
            rows = result["gemm"][n]
            cells += (f"{rows[i]['frac_peak_flops']:16.3f}{rows[i]['frac_peak_bw']:12.3f}"
                      if i < len(rows) else " " * 28)
        print(f"  {m:5d} {cells}")
    print(f"# wall {result['wall_s']:.1f} s; errors: {errors or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
