"""Large inputs in a real Renode (issue 34): a 27 KB input (models/mobilenet_v1_vww, 96x96x3)
streams pipelined with no damaged frame, in order, and learns what the reference learner learns.

Why Renode damaged them: its UART model hands the firmware the next byte as soon as RDR is read
(no baud timing), so while the device executed one 27 KB SAMPLE the receive interrupt filled the
2 KB ring with the next one and dropped the rest (88,729 bytes dropped, 7 damaged frames, 14
resends and 554 KB sent for 6 samples of 166 KB; STATS uart_errors counts them). The firmware now
leaves the byte in RDR and masks the interrupt while the ring is full, so the emulator holds the
rest back (mcu/boards/stm32l4/hal_stm32l4.c). Oracles: the device's own counters (STATS), the
numpy reference learner on TFLM's latents (its confidences to 1e-5: a damaged byte that passed
the CRC would change them).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from _renode_util import _use_found_renode  # noqa: F401
from _stream_util import reference_run
from conftest import ROOT
from tinyol.link.device import Device
from tinyol.link.stream import stream
from tinyol.targets import emulator

pytestmark = [pytest.mark.slow, pytest.mark.renode]

MODEL = "models/mobilenet_v1_vww"
BOARD = "nucleo_l4r5zi"    # the model's board: 640 KB of SRAM for its 55 KB arena
N = 3                      # window 4: samples 2 and 3 arrive while the first one executes


def test_large_inputs_stream_pipelined_without_damage_in_order(firmware):
    man = json.loads((ROOT / MODEL / "manifest.json").read_text())
    size = int(man["input"]["size"])
    assert size > 8 * 2048    # several frames' worth of the device's 2 KB receive ring
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 1, size=(N, size)).astype(np.float32)
    y = np.array([0, 1, 1])
    ref = reference_run(str(ROOT / MODEL), X, y)
    fw = firmware(BOARD, MODEL, test_build=False)
    with emulator.start_renode(BOARD, fw.elf, timeout=300) as t, Device.open(t.url, timeout=10) as dev:
        s, recs = stream(dev, X, y, man, mode="train", window=4, timeout=30.0)
        st = dev.stats()
    assert (st.frames_bad, st.uart_errors, st.rx_overflows) == (0, 0, 0), st
    # no frame damaged either way; a resend can only be a slow reply's (a loaded host), and
    # then the device answered it from its cache
    assert s.damaged == 0 and s.duplicates == s.retries
    assert [r.samples_seen for r in recs] == list(range(1, N + 1))
    assert st.samples_seen == N
    assert [r.prediction for r in recs] == ref["predictions"].tolist()
    np.testing.assert_allclose([r.confidence for r in recs], ref["confidence"], rtol=1e-5)
