"""`tinyol doctor` on every emulated target, and on deliberately broken firmware builds.

Passes on the native target, in QEMU and in a real Renode (all four boards: checked on the boot of
tests/device/test_renode_real.py's per-board test); names what is
wrong on firmware built with a wrong PLL (72 MHz while the firmware assumes 80), a wrong
baud (TOL_BAUD 57600) or too few flash wait states (Renode's RCC refuses the switch, the
board never boots). Broken builds are the release firmware with one -D flag
(PLATFORMIO_BUILD_FLAGS), in their own build folder.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest
from click.testing import CliRunner
from _renode_util import FINE_QUANTUM
from conftest import ROOT
from tinyol.cli import group, main
from tinyol.commands.doctor import run_checks
from tinyol.link.device import Device
from tinyol.paths import pio_command
from tinyol.targets import emulator
from tinyol.targets.firmware import BuildConfig, build_env, ensure_project

MODEL = "models/digits"


def _status(checks) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def _detail(checks, name) -> str:
    return next(c.detail for c in checks if c.name == name)


def build_variant(board: str, flags: str, tag: str) -> str:
    """The release firmware of `board` built with extra compiler flags; path of its ELF."""
    cfg = BuildConfig(board, MODEL)
    proj, ini = ensure_project()
    env = build_env(cfg)
    env["PLATFORMIO_BUILD_DIR"] = f"{env['PLATFORMIO_BUILD_DIR']}-{tag}"
    env["PLATFORMIO_BUILD_FLAGS"] = flags
    proc = subprocess.run([*pio_command(), "run", "-d", str(proj), "-c", str(ini), "-e", board], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return os.path.join(env["PLATFORMIO_BUILD_DIR"], board, "firmware.elf")


# ---- native -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def native(firmware):
    return firmware("native", MODEL).program


def test_doctor_passes_on_native_and_leaves_the_learned_state(native, tmp_path):
    rng = np.random.default_rng(4)
    with emulator.start_native(native, state_dir=tmp_path / "state", timeout=120) as t:
        with Device.open(t.url) as dev:
            for x, y in zip(rng.integers(-128, 128, (30, 64), dtype=np.int8), rng.integers(0, 10, 30)):
                dev.sample(x, int(y))
            head = dev.get_head()
            seen = dev.stats().samples_seen
        r = CliRunner().invoke(group, ["doctor", "--port", t.url, "--clock-seconds", "0.2", "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output)
        assert out["ok"] is True
        st = {c["name"]: c["status"] for c in out["checks"]}
        assert st == {"link": "ok", "versions": "ok", "core self-test": "ok", "clock tree": "skip",
                      "console baud": "skip", "core clock": "skip", "flash geometry": "ok", "save/load": "ok"}
        assert out["board_report"]["flash_page_bytes"] == 2048
        with Device.open(t.url) as dev:
            after = dev.get_head()
            assert all(np.array_equal(a, b) for a, b in zip(head, after))
            assert dev.stats().samples_seen == seen
            assert dev.store_status()[0] == "empty"   # the boot-time state; a record now exists
            assert dev.load().seq == 1


def test_doctor_on_a_dead_port_is_one_line_and_nonzero(capsys):
    rc = main(["doctor", "--port", f"socket://127.0.0.1:{emulator.free_port()}", "--timeout", "0.2"])
    err = capsys.readouterr().err
    assert rc != 0 and err.startswith("error: ") and "Traceback" not in err


def test_doctor_rejects_a_nonpositive_interval(capsys):
    assert main(["doctor", "--port", "loop://", "--clock-seconds", "0"]) != 0
    assert capsys.readouterr().err.startswith("error: --clock-seconds must be > 0")


def test_page_sizes_a_part_can_have():
    """RM0432: the 2 MB L4R5 has 4 KB pages with OPTR.DBANK = 1 and 8 KB with DBANK = 0;
    RM0351/RM0394: 2 KB on the L47x and L43x."""
    from tinyol.boards import BOARDS
    from tinyol.commands.doctor import _page_sizes

    assert _page_sizes(BOARDS["nucleo_l4r5zi"]) == (4096, 8192)
    for b in ("nucleo_l476rg", "nucleo_l432kc", "disco_l475vg_iot01a"):
        assert _page_sizes(BOARDS[b]) == (2048,)


# ---- QEMU -----------------------------------------------------------------------------

@pytest.mark.slow
def test_doctor_passes_in_qemu(firmware):
    fw = firmware("nucleo_l476rg", MODEL, test_build=False)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=120) as t:
        checks, facts = run_checks(t.url, clock_seconds=0.5)
    st = _status(checks)
    assert "FAIL" not in st.values(), checks
    assert st["clock tree"] == "ok" and st["console baud"] == "ok"       # QEMU models RCC and BRR
    assert st["flash geometry"] == "skip" and st["save/load"] == "skip"  # no flash interface in QEMU
    assert facts["board_report"]["sysclk_hz"] == 80_000_000
    # QEMU executes every instruction the kernels use as the manual says (test_cpu_instructions.py)
    detail = next(c.detail for c in checks if c.name == "core self-test")
    assert st["core self-test"] == "ok" and detail.startswith("12 of 12 instruction checks"), detail


@pytest.mark.slow
def test_doctor_names_a_wrong_pll_in_qemu():
    elf = build_variant("nucleo_l476rg", "-DTOL_PLL_N=36u", "pll36")
    with emulator.start_qemu("nucleo_l476rg", elf, timeout=120) as t:
        checks, _ = run_checks(t.url, clock_seconds=0.5)
    assert _status(checks)["clock tree"] == "FAIL"
    assert "72 MHz" in _detail(checks, "clock tree") and "80 MHz" in _detail(checks, "clock tree")


# ---- Renode ---------------------------------------------------------------------------

renode = pytest.mark.renode


@pytest.fixture
def found_renode(monkeypatch):
    from _renode_util import SKIP_REASON, renode_launcher

    launcher = renode_launcher()
    if launcher is None:
        pytest.skip(SKIP_REASON)
    monkeypatch.setenv("TINYOL_RENODE", launcher)


def _wire(t) -> dict[str, int]:
    """The GPIO stand-in's console-wire counters (mcu/renode/gpio.py, reserved words of GPIOA)."""
    read = lambda a: int(t.monitor.execute(f"sysbus ReadDoubleWord {a:#x}").strip(), 16)  # noqa: E731
    return {"pins_ok": read(0x480003F0), "baud": read(0x480003F4), "passed": read(0x480003F8),
            "garbled": read(0x480003FC)}


@pytest.mark.slow
@renode
@pytest.mark.parametrize("flags,tag,baud", [("-DTOL_PLL_N=36u", "pll36", 103746),
                                            ("-DTOL_BAUD=57600u", "baud57600", 57595)])
def test_renode_garbles_a_wrong_baud(found_renode, flags, tag, baud):
    """A 72 MHz PLL under a BRR computed for 80 MHz, or a firmware built for 57600 baud: the
    console runs at `baud` while the host's side runs at 115200. Renode's wire (gpio.py)
    resamples every byte as a UART receiver would: nothing decodes, doctor hears silence.
    (QEMU, which ignores BRR, lets doctor name the cause: test_doctor_names_*_in_qemu.)"""
    elf = build_variant("nucleo_l476rg", flags, tag)
    with emulator.start_renode("nucleo_l476rg", elf, timeout=180) as t:
        checks, _ = run_checks(t.url, timeout=0.3, clock_seconds=0.1)
        wire = _wire(t)
    assert _status(checks) == {"link": "FAIL"}, checks
    assert "another baud" in _detail(checks, "link")
    assert wire["pins_ok"] == 1 and wire["baud"] == baud and wire["garbled"] > 0


@pytest.mark.slow
@renode
def test_renode_console_needs_its_pins_alternate_function(found_renode, firmware):
    """PA2 (USART2 TX) put back to AF0 from the debugger: the host hears nothing; AF7 again: it works."""
    fw = firmware("nucleo_l476rg", MODEL, test_build=False)
    with emulator.start_renode("nucleo_l476rg", fw.elf, timeout=180) as t:
        assert _status(run_checks(t.url, clock_seconds=0.1, save=False)[0])["link"] == "ok"
        assert _wire(t)["pins_ok"] == 1
        afrl = int(t.monitor.execute("sysbus ReadDoubleWord 0x48000020").strip(), 16)
        assert (afrl >> 8) & 0xF == 7                         # PA2: AF7 as the firmware set it
        t.monitor.execute(f"sysbus WriteDoubleWord 0x48000020 {afrl & ~0xF00:#x}")
        checks, _ = run_checks(t.url, timeout=0.3, clock_seconds=0.1)
        assert _status(checks) == {"link": "FAIL"} and _wire(t)["pins_ok"] == 0
        t.monitor.execute(f"sysbus WriteDoubleWord 0x48000020 {afrl:#x}")
        assert _status(run_checks(t.url, clock_seconds=0.1, save=False)[0])["link"] == "ok"


@pytest.mark.slow
def test_doctor_names_a_wrong_baud_in_qemu():
    elf = build_variant("nucleo_l476rg", "-DTOL_BAUD=57600u", "baud57600")
    with emulator.start_qemu("nucleo_l476rg", elf, timeout=120) as t:
        checks, _ = run_checks(t.url, clock_seconds=0.5)
    st = _status(checks)
    assert st["console baud"] == "FAIL" and st["clock tree"] == "ok", checks
    assert "57595 baud" in _detail(checks, "console baud") and "115200" in _detail(checks, "console baud")


@pytest.mark.slow
@renode
def test_renode_refuses_too_few_wait_states(found_renode, firmware):
    """LATENCY 3 at 80 MHz (RM0351 needs 4): the RCC refuses the switch, the firmware never
    boots, the Renode log and the RCC's diagnostic words say why; doctor finds silence."""
    elf = build_variant("nucleo_l476rg", "-DTOL_FLASH_LATENCY=3u", "lat3")
    with emulator.start_renode("nucleo_l476rg", elf, timeout=180, quantum=FINE_QUANTUM) as t:
        read = lambda a: int(t.monitor.execute(f"sysbus ReadDoubleWord {a:#x}").strip(), 16)  # noqa: E731
        t.monitor.execute("pause")
        for _ in range(50):   # clock set-up is the firmware's first act: 100 us steps of virtual time
            if read(0x400213F4):
                break
            t.monitor.execute('emulation RunFor "0.0001"')
        assert read(0x400213F4) == 1                          # RCC_DIAG_LATENCY
        assert read(0x400213F8) == 80_000_000                 # the clock it asked for
        assert read(0x40021008) & 0xF == 0x3                  # SW = PLL, SWS = MSI: never switched
        t.monitor.execute("start")                            # resume: doctor hears nothing
        checks, _ = run_checks(t.url, timeout=0.3, clock_seconds=0.1)
        # Renode writes its log file asynchronously: poll it (bounded) for the refusal line
        deadline = time.monotonic() + 20
        while "too few flash wait states" not in t.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "too few flash wait states (FLASH_ACR.LATENCY)" in t.output()
    assert _status(checks) == {"link": "FAIL"}
    assert "silence" in _detail(checks, "link")
