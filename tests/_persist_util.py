"""Host builds of the persistence C (tol_store.c over tests/c/flash_sim.c) for ctypes tests."""
from __future__ import annotations

import ctypes as C

from conftest import ROOT, compile_shared

MCU = ROOT / "mcu"
STATUS = {"OK": 0, "ERR_ARG": 1, "ERR_RANGE": 2, "ERR_FULL": 4, "ERR_LENGTH": 10, "ERR_FLASH": 13,
          "ERR_NO_RECORD": 14, "ERR_MODEL": 15, "ERR_OVERFLOW": 16}
CUT = -1


def build_store_sim():
    lib = compile_shared(
        [MCU / "src/tol_store.c", MCU / "src/tol_crc32.c", MCU / "src/tol_status.c", ROOT / "tests/c/flash_sim.c"],
        [MCU / "include"])
    lib.sim_setup.argtypes = [C.c_uint32, C.c_uint32, C.c_uint8, C.c_uint32]
    lib.sim_mem.restype = C.POINTER(C.c_uint8)
    lib.sim_states.restype = C.POINTER(C.c_uint8)
    lib.sim_steps.restype = C.c_long
    lib.sim_prog_errors.restype = C.c_long
    lib.sim_save.argtypes = [C.c_char_p, C.c_uint32, C.c_uint32, C.c_uint32, C.c_long, C.c_int, C.c_uint32,
                             C.POINTER(C.c_long)]
    lib.sim_boot.argtypes = [C.c_uint32, C.c_char_p, C.c_uint32] + [C.POINTER(C.c_uint32)] * 4
    lib.sim_capacity.restype = C.c_uint32
    lib.sim_capacity.argtypes = [C.POINTER(C.c_uint32)]
    return StoreSim(lib)


class StoreSim:
    def __init__(self, lib):
        self.lib = lib
        self.bytes = 0

    def setup(self, region_bytes=16 * 1024, page=2048, fill=0xFF, max_record=0):
        assert self.lib.sim_setup(region_bytes, page, fill, max_record) == 0
        self.bytes = region_bytes

    def snapshot(self) -> bytes:
        """The region's bytes, then one state byte per double-word (0 erased, 1 programmed, 2 torn)."""
        return C.string_at(self.lib.sim_mem(), self.bytes) + C.string_at(self.lib.sim_states(), self.bytes // 8)

    def restore(self, image: bytes):
        C.memmove(self.lib.sim_mem(), image[:self.bytes], self.bytes)
        C.memmove(self.lib.sim_states(), image[self.bytes:], self.bytes // 8)

    def save(self, payload: bytes, model_hash=0x1234, chunk=13, cut_at=-1, torn=False, seed=1):
        steps = C.c_long()
        rc = self.lib.sim_save(payload, len(payload), model_hash, chunk, cut_at, int(torn), seed, C.byref(steps))
        return rc, steps.value

    def boot(self, model_hash=0x1234):
        """(status, payload or None, seq, erases); self.slot: the record's slot"""
        buf = C.create_string_buffer(256 * 1024)
        n, seq, slot, erases = C.c_uint32(), C.c_uint32(), C.c_uint32(), C.c_uint32()
        rc = self.lib.sim_boot(model_hash, buf, len(buf), C.byref(n), C.byref(seq), C.byref(slot), C.byref(erases))
        payload = buf.raw[:n.value] if rc == 0 else None
        self.slot = slot.value
        return rc, payload, seq.value, erases.value

    def capacity(self) -> tuple[int, int]:
        """(payload bytes per slot, number of slots)"""
        slots = C.c_uint32()
        cap = self.lib.sim_capacity(C.byref(slots))
        return cap, slots.value


def load_flash_model() -> dict:
    """mcu/renode/flash.py's functions and constants (everything above its Renode dispatch):
    the strict flash model, callable from CPython."""
    src = (ROOT / "mcu/renode/flash.py").read_text()
    scope: dict = {}
    exec(compile(src.split("# ---- Renode request dispatch")[0], "flash.py", "exec"), scope)  # noqa: S102
    return scope
