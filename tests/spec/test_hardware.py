import pytest

from sweetspot import SweetspotError
from sweetspot.spec.hardware import GiB, gpu_names, load_hardware


@pytest.mark.parametrize("alias, name", [
    ("a100-80gb", "a100-80gb"), ("A100", "a100-80gb"), ("h100", "h100"),
    ("H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("a100_40gb", "a100-40gb"),
])
def test_aliases_resolve(alias, name):
    assert load_hardware(alias).name == name


def test_catalog_figures_are_the_datasheets():
    a100, h200 = load_hardware("a100-80gb"), load_hardware("h200")
    assert a100.bf16_flops == 312e12 and a100.fp8_flops is None
    assert a100.bandwidth_bytes_per_s == 2039e9
    assert h200.fp8_flops == 1979e12 and h200.supports_fp8
    assert 139 * GiB < h200.usable_memory_bytes < 140 * GiB
    assert "a100" in a100.device_name.lower()  # vLLM's small-tier defaults key on this


def test_unknown_gpu_is_a_clear_error():
    with pytest.raises(SweetspotError, match=r"unknown GPU 'v100'.*a100-80gb"):
        load_hardware("v100")


def test_cpu_entry_exists():
    assert load_hardware("cpu").is_cpu
    assert "cpu" in gpu_names()
