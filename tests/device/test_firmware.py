"""The firmware foundation: offline builds for every board, the images'
vector tables, QEMU boot + INFO, the native target, the icount helper."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from tinyol.boards import BOARDS
from tinyol.errors import TinyolError
from tinyol.link.protocol import DeviceGone, Frame, Link, Msg
from tinyol.targets import emulator
from tinyol.targets.firmware import BuildConfig, build

pytestmark = pytest.mark.slow


def test_generated_constants_are_current():
    r = subprocess.run([sys.executable, "-m", "tinyol.gen_defs", "--check"], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT / "host")})
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("board", list(BOARDS))
def test_board_definitions_agree(board):
    """boards.py, the linker script and the PlatformIO board manifest describe the same memory."""
    b = BOARDS[board]
    ld = (ROOT / f"mcu/boards/stm32l4/ld/{board}.ld").read_text()
    regions = {m[1]: (int(m[2], 16), int(m[3]) * 1024)
               for m in re.finditer(r"(\w+) \(\w+\) : ORIGIN = (0x[0-9A-Fa-f]+), LENGTH = (\d+)K", ld)}
    assert regions["FLASH"] == (0x08000000, b.flash_bytes)
    assert regions["RAM"] == (0x20000000, b.ram_bytes)
    assert regions["RAM2"] == (0x10000000, b.ram2_bytes)
    assert regions["RAM3"] == (0x20040000, b.ram3_bytes)  # SRAM3: L4R5 only, LENGTH 0 elsewhere
    manifest = json.loads((ROOT / f"mcu/platform/stm32l4/boards/{board}.json").read_text())
    assert manifest["upload"]["maximum_size"] == b.flash_bytes
    assert manifest["upload"]["maximum_ram_size"] == b.ram_bytes
    assert manifest["tinyol"]["ram2_size"] == b.ram2_bytes
    assert manifest["tinyol"].get("ram3_size", 0) == b.ram3_bytes
    assert manifest["tinyol"]["console"] == b.console
    board_c = (ROOT / f"mcu/boards/stm32l4/board_{board}.c").read_text()
    assert f"TOL_{b.console}_BASE" in board_c and f"TOL_{b.console}_IRQN" in board_c


@pytest.mark.parametrize("board", list(BOARDS))
def test_release_image_vector_table(firmware, board):
    """What a board needs to boot: initial SP inside its SRAM1, reset vector in flash, Thumb bit set."""
    res = firmware(board, test_build=False)
    image = res.bin.read_bytes()
    sp, reset = struct.unpack_from("<II", image)
    b = BOARDS[board]
    assert 0x20000000 < sp <= 0x20000000 + b.ram_bytes and sp % 8 == 0
    assert reset & 1 == 1, "reset vector must have the Thumb bit"
    assert 0x08000000 <= (reset & ~1) < 0x08000000 + len(image)
    # the release image must not contain the semihosting breakpoint (bkpt 0xAB = 0xBEAB)
    assert b"\xab\xbe" not in image[: len(image) & ~1][::1] or _no_bkpt(image)


def _no_bkpt(image: bytes) -> bool:
    return all(struct.unpack_from("<H", image, i)[0] != 0xBEAB for i in range(0, len(image) - 1, 2))


def test_semihosting_only_in_test_builds(firmware):
    rel = firmware("nucleo_l476rg", test_build=False).bin.read_bytes()
    test = firmware("nucleo_l476rg", test_build=True).bin.read_bytes()
    assert _no_bkpt(rel)
    assert not _no_bkpt(test)


def test_memory_overflow_fails_with_the_size(tmp_path):
    """A model too big for the board's flash fails the build and says by how much."""
    model = tmp_path / "huge"
    model.mkdir()
    (model / "config.h").write_text((ROOT / "mcu/app/nomodel/config.h").read_text())
    (model / "blob.c").write_text(
        "#include <stdint.h>\n"
        "/* a KEEP'd section, so --gc-sections cannot drop it */\n"
        "__attribute__((used, section(\".isr_vector\"))) const uint8_t tol_blob[300 * 1024] = {1};\n")
    with pytest.raises(TinyolError) as e:
        build(BuildConfig("nucleo_l432kc", str(model)))
    msg = str(e.value)
    assert "nucleo_l432kc" in msg
    assert re.search(r"overflowed by \d+ bytes", msg), msg


def test_unchanged_build_skips_platformio_and_any_change_rebuilds(tmp_path, monkeypatch):
    """A second build of the same inputs returns the first's firmware without running PlatformIO
    (a pio that cannot start proves it) and says what the first build said; a changed model
    header, a TINYOL_* variable the build reads, or a firmware relinked behind its back (a direct
    `pio run`) each run PlatformIO again."""
    import tinyol.targets.firmware as fw

    model = tmp_path / "m"
    shutil.copytree(ROOT / "models" / "digits", model)
    cfg = BuildConfig("native", str(model))
    said: list[str] = []
    first = build(cfg, echo=said.append)
    program = first.program.read_bytes()
    real = fw.pio_command
    monkeypatch.setattr(fw, "pio_command", lambda: ["/nonexistent/pio"])
    again: list[str] = []
    assert build(cfg, echo=again.append).program.read_bytes() == program
    assert again == said and any(l.startswith("tinyol: model=") for l in said), again

    def needs_pio():
        with pytest.raises(FileNotFoundError):   # PlatformIO was asked: it cannot start here
            build(cfg)
        monkeypatch.setattr(fw, "pio_command", real)
        build(cfg)
        monkeypatch.setattr(fw, "pio_command", lambda: ["/nonexistent/pio"])
        build(cfg)                                # and up to date again after that build

    config = model / "config.h"
    config.write_text(config.read_text() + "\n/* changed */\n")
    needs_pio()
    monkeypatch.setenv("TINYOL_LEARNER_REGION", "1")
    needs_pio()
    monkeypatch.delenv("TINYOL_LEARNER_REGION")
    needs_pio()
    first.program.touch()                         # relinked by someone else
    needs_pio()


def _qemu_info(firmware, board):
    res = firmware(board)
    with emulator.start_qemu(board, res.elf, timeout=60) as target:
        with Link.open(target.url, timeout=5) as link:
            info = link.info()
            link.request(Msg.EXIT, bytes([42]))
        rc = target.wait(20)
    return info, rc


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["nucleo_l476rg", "disco_l475vg_iot01a"])
def test_qemu_boot_and_info(firmware, board):
    info, rc = _qemu_info(firmware, board)
    b = BOARDS[board]
    assert info.board == board
    assert info.cpu_hz == 80_000_000
    assert "emulated" in info.flags and "test_build" in info.flags
    assert info.ram_total == b.ram_bytes and info.flash_total == b.flash_bytes
    assert 0 < info.flash_used < 64 * 1024 and info.ram_used > 8192  # includes the reserved stack
    assert info.boot_count == 1
    assert rc == 42, "semihosting exit code must come back from QEMU"


@pytest.mark.qemu
def test_hard_fault_is_reported(firmware):
    """A fault prints one `tinyol fault ...` line with the PC, then exits with code 3."""
    res = firmware("nucleo_l476rg")
    lines = []
    with emulator.start_qemu("nucleo_l476rg", res.elf, timeout=60) as target:
        with Link.open(target.url, timeout=5, on_line=lines.append) as link:
            link.request(Msg.EXIT, bytes([0xFE]))
            deadline = time.monotonic() + 10
            try:
                while not any(l.startswith("tinyol fault") for l in lines) and time.monotonic() < deadline:
                    list(link.poll(time.monotonic() + 0.2))
            except DeviceGone:
                pass  # QEMU exits right after the report
        rc = target.wait(20)
    fault = next(l for l in lines if l.startswith("tinyol fault"))
    fields = dict(kv.split("=") for kv in fault.split()[2:])
    assert int(fields["exc"], 16) in (3, 6)        # HardFault or UsageFault
    assert int(fields["cfsr"], 16) & (1 << 17)     # UFSR.INVSTATE: branch without the Thumb bit
    assert int(fields["pc"], 16) == 0x20000000
    assert rc == 3


def test_native_info_and_boot_counter(firmware, tmp_path):
    res = firmware("native")
    counts = []
    for _ in range(2):
        with emulator.start_native(res.program, state_dir=tmp_path, timeout=30) as t:
            with Link.open(t.url) as link:
                info = link.info()
                counts.append(info.boot_count)
                assert info.board == "native" and "emulated" in info.flags
                # a second client on the same running device sees the same session
            with Link.open(t.url) as link:
                assert link.info().boot_count == counts[-1]
    assert counts == [1, 2]


@pytest.mark.qemu
def test_icount_measurement_is_deterministic(firmware):
    from tinyol.bench.icount import Session

    elf = firmware("nucleo_l476rg").elf
    runs = []
    for _ in range(2):
        with Session("nucleo_l476rg", elf, timeout=60) as s:
            runs.append([s.instructions(1, n) for n in (0, 256, 512, 1024)])
    assert runs[0] == runs[1]
    c0, c256, c512, c1k = runs[0]
    # CRC-32 cost is linear in the length: equal increments per 512 bytes, up to
    # one SysTick wrap interrupt (~10 instructions, every 1.6 M) landing in a region
    assert abs((c1k - c512) - (c512 - c0)) <= 16
    assert abs(2 * (c512 - c256) - (c512 - c0)) <= 16
    assert 4 <= (c1k - c0) / 1024 <= 30  # a nibble-table CRC: ~10 instructions per byte on M4


def test_flash_dry_run_command(root):
    from tinyol.commands.flash import upload_argv

    bin_, elf = root / "x/firmware.bin", root / "x/firmware.elf"
    assert upload_argv("nucleo_l476rg", "stlink", bin_, elf, None) == [
        "st-flash", "--reset", "write", str(bin_), "0x08000000"]
    argv = upload_argv("nucleo_l4r5zi", "openocd", bin_, elf, None)
    assert argv[:3] == ["openocd", "-f", "interface/stlink.cfg"] and "target/stm32l4x.cfg" in argv
    assert upload_argv("nucleo_l432kc", "pyocd", bin_, elf, "0668FF") == [
        "pyocd", "flash", "--target", "stm32l432kcux", "--uid", "0668FF", str(elf)]
    assert upload_argv("nucleo_l432kc", "mbed", bin_, elf, "/media/u/NODE_L432KC") == [
        "cp", str(bin_), "/media/u/NODE_L432KC/firmware.bin"]
