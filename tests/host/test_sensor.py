"""The board's own sensor, preprocessing (mcu/src/tol_window.c <-> host/tinyol/data/sensor.py).

One preprocessing, two sides: the C windowing/scaling compiled on the host and the Python twin
give the same bytes for the same raw readings (a real recording of the watch set, turned into
LSM6DSL LSB). The scaling is checked against an outside formula too: the float quantization of
the host path (simulation.quantize_input of x / divisor), and the windows against the data
set's own windows (datasets.watch_windows).
"""
from __future__ import annotations

import ctypes
import importlib.util

import numpy as np
import pytest
from conftest import ROOT, compile_arm_objects, compile_shared
from tinyol.data import sensor as S
from tinyol.errors import TinyolError

MCU = ROOT / "mcu"
needs_watch = pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                                 reason="seglearn (watch data) not installed: make setup")


@pytest.fixture(scope="module")
def lib():
    lib = compile_shared([MCU / "src/tol_window.c", MCU / "src/tol_status.c", ROOT / "tests/c/window_shim.c"],
                         [MCU / "include"])
    lib.shim_window_run.restype = ctypes.c_int32
    return lib


def c_windows(lib, raw: np.ndarray, length: int, stride: int, mul, add, ring_bytes=None):
    raw = np.ascontiguousarray(raw, np.int16)
    n_rows, ch = raw.shape
    mul32 = np.ascontiguousarray(mul, np.int32)
    add32 = np.ascontiguousarray(add, np.int32)
    ring = np.zeros(length * ch if ring_bytes is None else ring_bytes, np.int8)
    cap = max(1, n_rows // max(stride, 1) + 1)
    out = np.zeros((cap, length, ch), np.int8)
    p = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    n = lib.shim_window_run(p(raw), ctypes.c_uint32(n_rows), ctypes.c_uint16(length),
                            ctypes.c_uint16(stride), ctypes.c_uint16(ch), p(mul32), p(add32), p(ring),
                            ctypes.c_uint32(ring.size), p(out), ctypes.c_uint32(cap))
    return n if n < 0 else out[:n]


def test_scale_rounds_half_up_and_saturates(lib):
    lib.tol_window_scale.restype = ctypes.c_int8
    lib.tol_window_scale.argtypes = [ctypes.c_int16, ctypes.c_int32, ctypes.c_int32]
    half = 1 << (S.SHIFT - 1)
    one = 1 << S.SHIFT
    # raw * 0.5: 3 -> 1.5 -> 2, -3 -> -1.5 -> -1 (half up), 1 -> 1; 0.5 * 32767 saturates
    cases = [(3, half, 0, 2), (-3, half, 0, -1), (1, half, 0, 1), (32767, half, 0, 127),
             (-32768, half, 0, -128), (0, one, -5 * one, -5), (10, one, 117 * one, 127)]
    for raw, mul, add, want in cases:
        assert lib.tol_window_scale(raw, mul, add) == want
        assert S.scale_raw(np.array([[raw]], np.int16), [mul], [add])[0, 0] == want


def test_windows_of_a_synthetic_stream(lib):
    """Row r of channel c holds r*8+c (exactly representable): every window is rows s..s+L-1."""
    L, stride, ch, T = 10, 4, 3, 45
    raw = (np.arange(T)[:, None] * 8 + np.arange(ch)[None, :]).astype(np.int16) - 128
    one = [1 << S.SHIFT] * ch
    got = c_windows(lib, raw, L, stride, one, [0] * ch)
    starts = list(range(0, T - L + 1, stride))   # 0, 4, ..., 32: 9 windows
    assert len(got) == len(starts) == 9
    for w, s in zip(got, starts):
        assert np.array_equal(w, np.clip(raw[s:s + L], -128, 127))
    assert np.array_equal(got, S.windows(S.scale_raw(raw, one, [0] * ch), L, stride))


def test_init_refuses_bad_shapes(lib):
    raw = np.zeros((5, 2), np.int16)
    assert c_windows(lib, raw, 4, 5, [1, 1], [0, 0]) == -1          # stride > length: TOL_ERR_ARG
    assert c_windows(lib, raw, 4, 0, [1, 1], [0, 0]) == -1          # stride 0
    assert c_windows(lib, raw, 4, 2, [1, 1], [0, 0], ring_bytes=7) == -16  # ring 7 < 8: OVERFLOW
    with pytest.raises(TinyolError, match="stride"):
        S.window_starts(10, 4, 5)


def test_coefficients_match_the_float_formula():
    """mul/add in Q20 give what the float path gives: quantize((x - o) / d) with x = raw * u,
    exactly except where the float lies closer to a rounding tie than the Q20 rounding error of
    mul and add allows ((|raw| + 1) * 2^-21), and there within one step."""
    rng = np.random.default_rng(3)
    s = S.sensor("lsm6dsl")
    raw = rng.integers(-20000, 20000, size=(4000, 6)).astype(np.int16)
    off = np.array([0.1, -0.2, 1.0, 0.0, 0.05, -0.05])
    div = np.array([0.5, 0.5, 0.5, 2.0, 2.0, 2.0])
    scale, zp = 0.05, -3
    mul, add = S.coefficients(s.unit_per_lsb, scale, zp, off, div)
    got = S.scale_raw(raw, mul, add).astype(int)
    exact = (raw * np.asarray(s.unit_per_lsb) - off) / div / scale + zp
    want = np.clip(np.floor(exact + 0.5), -128, 127)
    bound = (np.abs(raw) + 1.0) * 2.0 ** -(S.SHIFT + 1) + 1e-9
    near_tie = np.abs(exact - np.floor(exact) - 0.5) < bound
    assert np.mean(near_tie) < 0.02
    assert np.array_equal(got[~near_tie], want[~near_tie])
    assert np.all(np.abs(got - want) <= 1)
    assert 0.3 < np.mean((got > -128) & (got < 127))  # the test is not all saturation


def test_coefficients_refuse_a_useless_scale():
    with pytest.raises(TinyolError, match="2048"):
        S.coefficients([1.0], 1e-4, 0)
    with pytest.raises(TinyolError, match="divisor"):
        S.preprocess({"input": {"preprocess": {"offset": [0, 0], "divisor": [1, 0]}}}, 2)
    with pytest.raises(TinyolError, match="2 offsets"):
        S.preprocess({"input": {"preprocess": {"offset": [0, 0], "divisor": [1, 1]}}}, 6)


@needs_watch
def test_device_and_host_windows_of_a_recording_are_bit_identical(lib):
    """A watch recording as the LSM6DSL reports it (int16 LSB), windowed with the model's length
    and the data set's stride: the C module and the host twin give the same bytes, window for
    window; and they are the windows datasets.watch_windows cuts (same starts, same count)."""
    import json

    from tinyol.data.datasets import WATCH_STRIDE, WATCH_WINDOW, watch_recordings, watch_windows

    m = json.loads((ROOT / "models/imu/manifest.json").read_text())
    s = S.sensor("lsm6dsl")
    mul, add = S.coefficients(s.unit_per_lsb, m["input"]["scale"], m["input"]["zero_point"],
                              *S.preprocess(m, 6))
    d = watch_recordings()
    Xw, _, _, _ = watch_windows()
    first = 0
    for r in (0, 37):
        rec = np.asarray(d["X"][r], np.float32)
        raw = S.to_raw(rec, s.unit_per_lsb)
        dev = c_windows(lib, raw, WATCH_WINDOW, WATCH_STRIDE, mul, add)
        host = S.windows(S.scale_raw(raw, mul, add), WATCH_WINDOW, WATCH_STRIDE)
        assert dev.shape == host.shape and len(dev) == (len(rec) - WATCH_WINDOW) // WATCH_STRIDE + 1
        assert dev.tobytes() == host.tobytes()
        # the data set's windows of the same recording, in physical units, at the same starts
        first = sum((len(x) - WATCH_WINDOW) // WATCH_STRIDE + 1 for x in d["X"][:r])
        ds = Xw[first:first + len(dev)]
        assert np.array_equal(S.windows(rec, WATCH_WINDOW, WATCH_STRIDE), ds)
        # and the device's int8 is the host's float path on those windows within one step
        from tinyol.targets.twin import quantize_input

        q = quantize_input(S.windows(raw * np.asarray(s.unit_per_lsb, np.float32), WATCH_WINDOW,
                                     WATCH_STRIDE), m["input"]["scale"], m["input"]["zero_point"])
        assert np.max(np.abs(q.astype(int) - dev.astype(int))) <= 1
        assert np.mean(q == dev) > 0.99


def test_models_imu_was_trained_on_the_windows_the_device_cuts(lib):
    """models/imu's training windows (datasets.watch_sensor_windows: the rows Renode's LSM6DSO
    reports for a recording, times the sensitivity tol_window assumes) quantized as the host does
    are the device's int8 windows of those rows (tol_window compiled here), within one input step
    (the float path and the Q20 one round apart only near a tie), window for window."""
    import json

    from tinyol.data.datasets import WATCH_STRIDE, WATCH_WINDOW, watch_recordings, watch_sensor_windows
    from tinyol.targets.twin import quantize_input

    m = json.loads((ROOT / "models/imu/manifest.json").read_text())
    assert m["calibration"].startswith("watch:0-3@train") and m["head"]["classes"] == ["PEN", "ABD", "FEL", "IR"]
    s = S.sensor("lsm6dsl")
    mul, add = S.coefficients(s.unit_per_lsb, m["input"]["scale"], m["input"]["zero_point"],
                              *S.preprocess(m, 6))
    d = watch_recordings()
    assert (int(d["y"][0]), int(d["subject"][0])) == (0, 7)  # the file's first recording: PEN, training subject
    Xtr, ytr, _ = watch_sensor_windows((0,), "train")
    raw = S.lsm6dso_lsb(np.asarray(d["X"][0]))
    dev = c_windows(lib, raw, WATCH_WINDOW, WATCH_STRIDE, mul, add)
    q = quantize_input(Xtr[:len(dev)], m["input"]["scale"], m["input"]["zero_point"])
    assert np.max(np.abs(q.astype(int) - dev.astype(int))) <= 1
    assert np.mean(q == dev) > 0.99


def test_window_module_compiles_for_cortex_m4():
    compile_arm_objects([MCU / "src/tol_window.c"], [MCU / "include"])


def test_example_header_is_up_to_date():
    """examples/imu_learner/include/imu_config.h is what `tinyol sensor-header` writes today."""
    import json

    m = json.loads((ROOT / "models/imu/manifest.json").read_text())
    text = S.header(m, S.sensor("lsm6dsl"), 50, "imu/manifest.json")
    assert (ROOT / "examples/imu_learner/include/imu_config.h").read_text() == text
    assert "#define IMU_WINDOW_LENGTH 100" in text and "#define IMU_WINDOW_STRIDE 50" in text


def test_schedule_and_window_labels():
    y = np.array([-1, -1, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4])
    segs = S.schedule(y)
    assert segs == [(0, 255), (2, 3), (6, 4)]
    # windows of 4 rows every 2: [0-3] mixed, [2-5] all 3, [4-7] mixed, [6-9] 4, [8-11] 4
    assert S.window_labels(segs, 5, 4, 2) == [255, 3, 255, 4, 4]


def test_resd_layout(tmp_path):
    """RESD v1 as Renode's parser reads it (the Renode test plays these files for real)."""
    import struct

    X = np.array([[0.5, -1.0, 1.0, 0.1, -0.2, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0, 3.0]])
    np.savez(tmp_path / "r.npz", X=X, t=np.array([0.0, 0.02]), y=np.array([1, 1]))
    rec = S.load_recording(str(tmp_path / "r.npz"))
    assert rec["rate"] == pytest.approx(50.0)
    meta = S.write_resd(rec, tmp_path / "o", S.sensor("lsm6dsl"), "r.npz")
    b = (tmp_path / "o" / "acc.resd").read_bytes()
    assert b[:8] == b"RESD\x01\x00\x00\x00"
    btype, stype, chan, size = struct.unpack_from("<BHHQ", b, 8)
    assert (btype, stype, chan, size) == (2, 2, 0, 24 + 2 * 12)
    start, period, mlen = struct.unpack_from("<QQQ", b, 21)
    assert period == 19230769 and start == S.RESD_LEAD_NS - period // 2 and mlen == 0
    assert struct.unpack_from("<6i", b, 45) == (500000, -1000000, 1000000, 0, 0, 1000000)
    g = (tmp_path / "o" / "gyro.resd").read_bytes()
    assert struct.unpack_from("<BHHQ", g, 8)[1] == 3
    assert struct.unpack_from("<6i", g, 45) == (10000, -20000, 0, 0, 0, 300000)
    raw = np.frombuffer((tmp_path / "o" / "raw.bin").read_bytes(), "<i2").reshape(-1, 6)
    # +-8 g: 4096 LSB/g; 2000 dps: 1000/70 LSB per dps, 0.1 rad/s = 5.7296 dps -> 81.85 -> 82
    assert raw[0].tolist() == [2048, -4096, 4096, 82, -164, 0]
    assert raw[1, 5] == 2456      # 3 rad/s = 171.887 dps * 14.2857 = 2455.5 -> 2456 (half even: 2455.53)
    assert meta["schedule"] == [[0, 1]] or meta["schedule"] == [(0, 1)]


@pytest.mark.parametrize("content, msg", [
    ("ax,ay\n1,2\n", "must name ax,ay,az"),
    ("ax,ay,az,t\n0,0,1,0\n0,0,1,0.02\n0,0,1,0.05\n", "evenly spaced"),
    ("ax,ay,az\n0,0,1\n", "no sample rate"),
    ("ax,ay,az,t,label\n0,0,1,0,300\n0,0,1,0.02,1\n", "labels must be"),
])
def test_record_to_resd_refuses_bad_recordings(tmp_path, capsys, content, msg):
    from tinyol.cli import main

    (tmp_path / "r.csv").write_text(content)
    assert main(["record-to-resd", str(tmp_path / "r.csv"), "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert msg in err and err.startswith("error: ") and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_emulate_sensor_needs_the_imu_app(tmp_path, capsys):
    from tinyol.cli import main

    assert main(["emulate", "--emulator", "renode", "--board", "disco_l475vg_iot01a",
                 "--sensor", str(tmp_path)]) != 0
    assert "--app imu" in capsys.readouterr().err
    assert main(["emulate", "--emulator", "renode", "--board", "nucleo_l476rg", "--app", "imu",
                 "--sensor", str(tmp_path)]) != 0
    assert "B-L475E-IOT01A" in capsys.readouterr().err
    assert main(["emulate", "--emulator", "renode", "--board", "disco_l475vg_iot01a", "--app", "imu",
                 "--sensor", str(tmp_path)]) != 0
    assert "not a record-to-resd folder" in capsys.readouterr().err


def test_renode_board_matches_the_driver():
    """stm32l475.repl: I2C2 at the board header's address with the IMU at the driver's 0x6A
    (UM2153: LSM6DSL, SA0 low), I2C2 event/error IRQs 33/34 (RM0351), the button on PC13."""
    import re

    from test_renode_static import parse_repl

    repl = parse_repl(ROOT / "mcu/renode/stm32l475.repl")
    header = (MCU / "boards/stm32l4/stm32l4.h").read_text()
    base = int(re.search(r"#define TOL_I2C2_BASE\s+(0x[0-9A-Fa-f]+)u", header).group(1), 16)
    gpioc = int(re.search(r"#define TOL_GPIOC_BASE\s+(0x[0-9A-Fa-f]+)u", header).group(1), 16)
    assert repl["i2c2"]["type"] == "I2C.STM32F7_I2C" and repl["i2c2"]["addresses"] == [base]
    assert sorted(repl["i2c2"]["gpio"]) == [("ErrorInterrupt", "nvic", 34), ("EventInterrupt", "nvic", 33)]
    text = (ROOT / "mcu/renode/stm32l475_imu.repl").read_text()
    driver = (MCU / "app/imu/imu_lsm6dsx.c").read_text()
    addr = int(re.search(r"#define ADDR (0x[0-9A-Fa-f]+)u", driver).group(1), 16)
    assert re.search(rf"imu_i2c: Sensors\.TinyolI2CRegisterBridge @ i2c2 {addr:#04X}".replace("0X", "0x"), text)
    assert "imu: Sensors.LSM6DSO_IMU @ imu_i2c" in text
    assert repl["gpioPortC"]["addresses"] == [gpioc]
    assert repl["userButton"]["gpio"] == [("", "gpioPortC", 13)] and repl["userButton"]["attrs"]["invert"] == "true"
    imu = (ROOT / "mcu/renode/disco_l475vg_iot01a_imu.resc").read_text()
    assert "include $ORIGIN/TinyolI2CRegisterBridge.cs" in imu
    assert "machine LoadPlatformDescription $ORIGIN/stm32l475_imu.repl" in imu
    board = (ROOT / "mcu/renode/disco_l475vg_iot01a.resc").read_text()
    assert "$imu?=$ORIGIN/no_imu.resc" in board and "\ninclude $imu\n" in board
