"""The sensor example's demo (docs/sensor.md): models/imu learns two new exercises from the
board's own sensor and is measured before and after on people it never saw.

    PYTHONPATH=host:studies python -m tinyol_studies.sensor_demo [--out DIR]

One recording is played through the sensor (record-to-resd; Renode's LSM6DSO model, or the
native target's file): held-out windows (subjects 8-10, unlabelled) are predicted, labelled
windows of TRAP and ROW (subjects 1 and 2, the model was trained on neither exercise) are
learned as new classes 5 and 6, then the same held-out windows are predicted again. This module
is the twin's side (tests/device/test_sensor_device.py runs the device's): the windows the
device cuts from the rows its sensor reports, the numpy reference learner's predictions on
them, the accuracy before and after, and the same learning judged on every window of the
held-out subjects (all seven exercises).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from tinyol.data import sensor as S
from tinyol.data.datasets import WATCH_TEST_SUBJECTS, watch_recordings
from tinyol.paths import models_dir

STRIDE = 50
UNLABELLED = -1
# (recording index in seglearn's file, first row, end row, label on the device; -1: none). The
# recordings: the first of that exercise and subject in the file's order.
MEASURE = [(30, 0, 400), (78, 0, 400), (11, 0, 400)]   # TRAP subject 8, ROW 9, PEN 10 (held out)
LEARN = [(3, 0, 600, 5), (23, 0, 600, 6),              # TRAP, ROW of subject 1
         (68, 0, 600, 5), (52, 0, 600, 6)]             # TRAP, ROW of subject 2
PLAN = ([(i, a, b, UNLABELLED) for i, a, b in MEASURE] + LEARN
        + [(i, a, b, UNLABELLED) for i, a, b in MEASURE])


def recording(plan=PLAN) -> dict:
    """The plan's rows as one recording: X [T, 6] (g, rad/s), y [T] (-1 unlabelled), and per
    segment (first row, rows, data-set label, device label)."""
    d = watch_recordings()
    xs, ys, segs, row = [], [], [], 0
    for i, a, b, lab in plan:
        x = np.asarray(d["X"][i])[a:b]
        xs.append(x)
        ys.append(np.full(len(x), lab))
        segs.append((row, len(x), int(d["y"][i]), lab))
        row += len(x)
    return {"X": np.concatenate(xs), "y": np.concatenate(ys), "segments": segs}


def truth(segments, n_windows: int, length: int, stride: int = STRIDE) -> list[int | None]:
    """Per window: the data-set label of the unlabelled segment it lies in whole, else None."""
    out: list[int | None] = []
    for k in range(n_windows):
        first, last = k * stride, k * stride + length - 1
        t = None
        for r0, n, cls, lab in segments:
            if lab == UNLABELLED and r0 <= first and last < r0 + n:
                t = cls
        out.append(t)
    return out


def accuracy_before_after(preds, segments, length: int, stride: int = STRIDE) -> tuple[float, float, int]:
    """(before, after, windows per pass): accuracy on the first and the last pass over MEASURE
    (the held-out windows: the plan plays them before and after learning)."""
    t = truth(segments, len(preds), length, stride)
    half = sum(n for _, n, _, _ in segments[:len(MEASURE)])  # rows of the first pass
    first = [(p, c) for k, (p, c) in enumerate(zip(preds, t)) if c is not None and k * stride < half]
    last = [(p, c) for k, (p, c) in enumerate(zip(preds, t)) if c is not None and k * stride >= half]
    acc = lambda pairs: float(np.mean([p == c for p, c in pairs]))  # noqa: E731
    assert len(first) == len(last)
    return acc(first), acc(last), len(first)


class Twin:
    """The device's arithmetic on the host: sensor rows -> int8 windows (tol_window's) ->
    backbone (TFLM's runtime) -> the reference learner, in the firmware's order."""

    def __init__(self, model_dir=None):
        from tinyol.targets.twin import learner_settings, load_model, make_learner

        self.model = load_model(Path(model_dir or models_dir() / "imu"))
        m = self.model.manifest
        self.length = int(m["input"]["shape"][0])
        self.mul, self.add = S.coefficients(S.sensor("lsm6dsl").unit_per_lsb, m["input"]["scale"],
                                            m["input"]["zero_point"], *S.preprocess(m, 6))
        self.learner = make_learner(self.model, *learner_settings(self.model))

    def windows(self, raw: np.ndarray) -> np.ndarray:
        return S.windows(S.scale_raw(raw, self.mul, self.add), self.length, STRIDE)

    def latents(self, windows: np.ndarray) -> np.ndarray:
        from tinyol.targets.twin import latents

        return latents(self.model, windows.reshape(len(windows), -1))

    def play(self, raw: np.ndarray, schedule) -> dict:
        """What the firmware does with these rows and this label schedule: per window its
        bytes' CRC-32, prediction, confidence x 1e6 (as the firmware truncates it), and the
        windows learned (tinyol.data.sensor.window_labels' rule)."""
        import zlib

        w = self.windows(raw)
        labels = S.window_labels([tuple(s) for s in schedule], len(w), self.length, STRIDE)
        preds, conf_e6, learned = [], [], []
        for k, q in enumerate(self.latents(w)):
            p, c = self.learner.predict(q)
            preds.append(int(p))
            conf_e6.append(int(np.float32(c) * np.float32(1e6)))  # (int32_t)(conf * 1e6f)
            if labels[k] != 255:
                self.learner.learn(q, labels[k])
                learned.append(k)
        return {"crc": [zlib.crc32(x.tobytes()) for x in w], "preds": preds, "conf_e6": conf_e6,
                "learned": learned, "labels": labels}

    def held_out(self) -> tuple[float, dict, int]:
        """Accuracy of the learner as it is on every window of the held-out subjects (all seven
        exercises, whole recordings, the sensor's rows): (accuracy, per exercise, windows)."""
        d = watch_recordings()
        ys, ps = [], []
        for x, lab, s in zip(d["X"], d["y"], d["subject"]):
            if int(s) not in WATCH_TEST_SUBJECTS:
                continue
            w = self.windows(S.lsm6dso_lsb(np.asarray(x)))
            ps.extend(int(self.learner.predict(q)[0]) for q in self.latents(w))
            ys.extend([int(lab)] * len(w))
        y, p = np.array(ys), np.array(ps)
        names = [str(n) for n in d["y_labels"]]
        return (float(np.mean(p == y)), {names[c]: round(float(np.mean(p[y == c] == c)), 3)
                                         for c in sorted(set(ys))}, len(y))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model folder (default: models/imu)")
    a = ap.parse_args(argv)
    rec = recording()
    twin = Twin(a.model)
    before_all = twin.held_out()
    raw = S.lsm6dso_lsb(rec["X"])
    out = twin.play(raw, S.schedule(rec["y"]))
    before, after, n = accuracy_before_after(out["preds"], rec["segments"], twin.length)
    after_all = twin.held_out()
    print(json.dumps({"rows": len(raw), "windows": len(out["preds"]), "learned": len(out["learned"]),
                      "demo_windows_per_pass": n, "demo_before": round(before, 4),
                      "demo_after": round(after, 4),
                      "held_out_windows": before_all[2], "held_out_before": round(before_all[0], 4),
                      "held_out_after": round(after_all[0], 4),
                      "held_out_per_exercise_before": before_all[1],
                      "held_out_per_exercise_after": after_all[1]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
