"""The boot self-test (tol_cpu.h) compiled for the host: the portable C of every SIMD helper
gives the ARMv7-M pseudo-code's answers (tol_cpu_kat.h, generated from
tinyol.armdsp), so the self-test passes where the instructions are right and its
known answers are not copied from the code under test. On the Cortex-M4 the same test runs
at every boot (tests/device/test_verify_allops.py reads its verdict from QEMU and Renode)."""
from __future__ import annotations

import ctypes

import pytest
from conftest import ROOT, compile_shared
from tinyol import armdsp

MCU = ROOT / "mcu"


class Report(ctypes.Structure):
    _fields_ = [("checked", ctypes.c_uint32), ("faults", ctypes.c_uint32), ("fallbacks", ctypes.c_uint32)]


@pytest.fixture(scope="module", params=["simd", "ref"])
def lib(request):
    return request.param, compile_shared([MCU / "src/kernels" / request.param / "tol_cpu.c", MCU / "src/tol_cpu.c"],
                                         [MCU / "include", MCU / "src", MCU / "src/kernels"], {})


def test_host_helpers_pass_the_self_test(lib):
    impl, so = lib
    so.tol_cpu_selftest()
    r = Report()
    so.tol_cpu_report(ctypes.byref(r))
    every = (1 << len(armdsp.CPU_CHECKS)) - 1
    learner = sum(1 << i for i, c in enumerate(armdsp.CPU_CHECKS) if c.kernels == "all")
    assert r.checked == (every if impl == "simd" else learner)
    assert r.faults == 0, armdsp.cpu_verdict(r.faults, r.fallbacks)


def test_forced_faults_and_names(lib):
    impl, so = lib
    so.tol_cpu_use(0b1000000001)
    r = Report()
    so.tol_cpu_report(ctypes.byref(r))
    assert r.faults == 0b1000000001
    assert r.fallbacks == (1 if impl == "simd" else 0)   # only MAX_POOL_2D has a portable path
    so.tol_cpu_check_name.restype = ctypes.c_char_p
    names = [so.tol_cpu_check_name(i).decode() for i in range(len(armdsp.CPU_CHECKS))]
    assert names == [c.name for c in armdsp.CPU_CHECKS] and so.tol_cpu_check_name(len(names)) is None
    so.tol_cpu_use(0)


def test_known_answers_come_from_the_oracle():
    """Spot checks of the generated table against values worked out by hand."""
    kat = (MCU / "src/kernels/tol_cpu_kat.h").read_text()
    # max per signed lane of 0x05050505 and 0x01010101 is 0x05050505 (SSUB8 lanes +4: GE set)
    assert "{0u, 0x05050505u, 0x01010101u, 0x00000000u, 0x05050505u, 0x00000000u}" in kat
    # SSAT #8 of 0x7F7F7F7F saturates to 127
    assert "{8u, 0x7F7F7F7Fu," in kat and "0x0000007Fu, 0x00000000u}" in kat
