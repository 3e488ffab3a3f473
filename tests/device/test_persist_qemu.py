"""QEMU cannot write flash (its STM32L4 flash interface is not implemented: registers
read 0, writes are ignored): the firmware must notice, boot from the exported head
and answer SAVE/LOAD with ERR_FLASH instead of hanging or faulting."""
from __future__ import annotations

import numpy as np
import pytest
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceError, DeviceGone, Msg
from tinyol.targets import emulator

pytestmark = [pytest.mark.slow, pytest.mark.qemu]


def test_qemu_reports_persistence_unavailable(firmware):
    elf = firmware("nucleo_l476rg", "models/digits").elf
    with emulator.start_qemu("nucleo_l476rg", elf, timeout=120) as target:
        with Device.open(target.url, timeout=10) as dev:
            assert dev.store_status() == ("unavailable", 0)
            x = np.zeros(64, np.int8)
            dev.sample(x, 1)
            with pytest.raises(DeviceError, match="ERR_FLASH"):
                dev.save()
            with pytest.raises(DeviceError, match="ERR_FLASH"):
                dev.load()
            assert dev.sample(x, 1).samples_seen == 2  # still alive and learning
            assert dev.stats().persist.store == "unavailable"
            try:
                dev.link.request(Msg.EXIT, bytes([0]))
            except DeviceGone:
                pass  # QEMU may close the socket before the reply is read
        assert target.wait(20) == 0
