import pytest

from sweetspot.backends.vllm.logs import classify_failure, parse_startup

NEW = """INFO 12-02 12:40:01 [gpu_worker.py:301] Available KV cache memory: 44.29 GiB
INFO 12-02 12:40:01 [default_loader.py:262] Model loading took 14.2 GiB memory and 5.13 seconds
INFO 12-02 12:40:02 [kv_cache_utils.py:1148] GPU KV cache size: 2,097,152 tokens, Maximum concurrency for 8,192 tokens per request: 256.00x
"""  # noqa: E501
OLD = """INFO 05-01 10:00:00 [kv_cache_utils.py:716] GPU KV cache size: 93,872 tokens
INFO 05-01 10:00:00 [kv_cache_utils.py:720] Maximum concurrency for 16,384 tokens per request: 5.73x
"""


def test_startup_lines_of_both_formats():
    new = parse_startup(NEW)
    assert new.kv_cache_tokens == 2_097_152 and new.max_concurrency == 256.0
    assert new.max_model_len == 8192 and new.device == "GPU"
    assert new.kv_cache_bytes == int(44.29 * 2**30)
    assert new.model_load_bytes == int(14.2 * 2**30) and new.model_load_s == 5.13
    old = parse_startup(OLD)
    assert old.kv_cache_tokens == 93_872 and old.max_concurrency == 5.73
    assert old.max_model_len == 16_384
    cpu = parse_startup("CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 4,096 "
                        "tokens per request: 512.00x")
    assert cpu.device == "CPU" and cpu.kv_cache_tokens == 2_097_152
    empty = parse_startup("nothing here")
    assert empty.kv_cache_tokens is None and empty.max_concurrency is None


@pytest.mark.parametrize("line, status", [
    ("ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", "oom"),
    ("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB "
     "KV cache is needed, which is larger than the available KV cache memory (2.00 GiB).", "oom"),
    ("ValueError: To serve at least one request with the models's max seq len (32768), (x)",
     "oom"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("ValueError: Free memory on device (70.1/79.2 GiB) on startup is less than desired GPU "
     "memory utilization (0.99, 78.4 GiB).", "oom"),
    ("api_server.py: error: argument --max-num-seqs: invalid int value: 'abc'", "invalid"),
    ("api_server.py: error: unrecognized arguments: --num-scheduler-steps 8", "invalid"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig",
     "invalid"),
    ("ValueError: max_num_batched_tokens (256) must be greater than or equal to max_num_seqs "
     "(512).", "invalid"),
    ("RuntimeError: Engine core initialization failed. See root cause above.", "crash"),
])
def test_failure_classes(line, status):
    log = f"INFO starting\nINFO loading\n{line}\nINFO shutting down\n"
    failure = classify_failure(log)
    assert failure.status == status
    assert failure.cause == line
    assert line in failure.lines


def test_oom_wins_over_the_crash_it_causes():
    log = ("ERROR EngineCore failed to start.\n"
           "ValueError: No available memory for the cache blocks.\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert classify_failure(log).status == "oom"
    assert classify_failure("").status == "crash"
