import pytest

from analyzer.machine.datasheet import GPUS, lookup


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
        assert g.fp32_tflops > 0


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


def test_datasheet_numbers_of_h100_h200_and_rtx4090():
    h100, h200, rtx4090 = lookup("H100 SXM"), lookup("NVIDIA H200"), lookup("RTX 4090")
    assert (h100.peak_tflops("float32"), h100.peak_tflops("bfloat16")) == (67, 989)
    assert (h200.peak_tflops("float8"), h200.peak_tflops("tf32")) == (1979, 494.5)
    assert (rtx4090.peak_tflops("float32"), rtx4090.peak_tflops("bfloat16")) == (82.6, 165.2)
    assert lookup("Tesla T4") is None and lookup(None) is None
