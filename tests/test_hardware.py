import pytest

from analyzer.machine.datasheet import GPUS, PCIE_X16_GBPS, lookup


def test_every_row_cites_a_datasheet():
    assert {g.name for g in GPUS} >= {
        "RTX 3090",
        "RTX 4090",
        "L40S",
        "A100 40GB SXM",
        "A100 80GB SXM",
        "H100 SXM",
        "H100 PCIe",
        "H200",
        "B200",
    }
    for g in GPUS:
        assert "NVIDIA" in g.source
        assert g.memory_bw_gbps > 0 and g.fp32_tflops > 0


@pytest.mark.parametrize(
    "device,name",
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA L40S", "L40S"),
    ],
)
def test_lookup_by_cuda_device_name(device, name):
    assert lookup(device).name == name


def test_datasheet_numbers_of_h100_h200_rtx4090_and_pcie():
    h100, h200, rtx4090 = lookup("H100 SXM"), lookup("NVIDIA H200"), lookup("RTX 4090")
    assert (h100.memory_bw_gbps, h100.peak_tflops("bfloat16")) == (3350, 989)
    assert (h200.memory_gb, h200.memory_bw_gbps) == (141, 4800)
    assert (rtx4090.memory_bw_gbps, rtx4090.peak_tflops("bfloat16")) == (1008, 165.2)
    assert (PCIE_X16_GBPS[4], PCIE_X16_GBPS[5]) == (31.5, 63.0)
    assert lookup("Tesla T4") is None and lookup(None) is None
