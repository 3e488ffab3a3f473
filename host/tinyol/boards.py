"""The boards tinyol supports: memory sizes, serial port, upload defaults.

This table is the host's single view of a board; the firmware's linker scripts
(mcu/boards/stm32l4/ld/<board>.ld) and the PlatformIO board manifests
(mcu/platform/stm32l4/boards/<board>.json) are checked against it in tests.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import TinyolError


@dataclass(frozen=True)
class Board:
    name: str            # PlatformIO environment name
    title: str           # what is printed on the box
    mcu: str             # part number
    flash_bytes: int     # main flash
    ram_bytes: int       # SRAM1 (contiguous at 0x20000000): stack, .data, .bss
    ram2_bytes: int      # SRAM2 (at 0x10000000): large static buffers (replay)
    console: str         # UART wired to the ST-Link virtual COM port
    page_bytes: int      # flash page (erase unit)
    qemu_serial_index: int | None  # position of `console` in QEMU's -serial order; None: not emulated
    upload_protocol: str  # default `tinyol flash` method
    usb_vid_pid: tuple[int, int] = (0x0483, 0x374B)  # ST-Link V2-1 VCP
    ram3_bytes: int = 0  # SRAM3 (at 0x20040000, L4R5 only): the learner when it fits there

    @property
    def emulated(self) -> bool:
        return self.qemu_serial_index is not None


KB = 1024

# QEMU's b-l475e-iot01a machine: -serial order USART1, USART2, USART3, UART4, UART5, LPUART1.
BOARDS: dict[str, Board] = {
    b.name: b
    for b in [
        Board("nucleo_l476rg", "NUCLEO-L476RG", "STM32L476RGT6", 1024 * KB, 96 * KB, 32 * KB,
              "USART2", 2 * KB, 1, "stlink"),
        Board("nucleo_l432kc", "NUCLEO-L432KC", "STM32L432KCU6", 256 * KB, 48 * KB, 16 * KB,
              "USART2", 2 * KB, 1, "stlink"),
        Board("disco_l475vg_iot01a", "B-L475E-IOT01A", "STM32L475VGT6", 1024 * KB, 96 * KB, 32 * KB,
              "USART1", 2 * KB, 0, "stlink"),
        Board("nucleo_l4r5zi", "NUCLEO-L4R5ZI", "STM32L4R5ZIT6", 2048 * KB, 192 * KB, 64 * KB,
              "LPUART1", 4 * KB, 5, "stlink", ram3_bytes=384 * KB),  # 4 KB pages: dual-bank (DBANK=1, factory default)
    ]
}

NATIVE = "native"


def store_geometry(board: Board, store_bytes: int | None = None) -> tuple[int, int, int]:
    """(flash bytes, store region bytes, page bytes) of `board`'s persistence store: the last
    1/8 of flash unless `store_bytes` (TOL_STORE_BYTES at build, stm32l4_common.ld), which must
    be a multiple of two pages and leave room for the firmware. The native target imitating the
    board gets the same (`--flash`), so a save keeps there what it keeps on the board."""
    store = board.flash_bytes // 8 if store_bytes is None else int(store_bytes)
    if store <= 0 or store % (2 * board.page_bytes) or store > board.flash_bytes // 2:
        raise TinyolError(
            f"store region of {store} bytes on {board.name}",
            hint=f"give a multiple of two {board.page_bytes}-byte pages, at most half the "
                 f"{board.flash_bytes // 1024} KB flash (default {board.flash_bytes // 8})")
    return board.flash_bytes, store, board.page_bytes


def get_board(name: str) -> Board:
    try:
        return BOARDS[name]
    except KeyError:
        raise TinyolError(
            f"unknown board {name!r}", hint="choose one of: " + ", ".join(BOARDS)
        ) from None
