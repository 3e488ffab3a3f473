"""`tinyol record-to-resd` and `tinyol sensor-header`: a board's own sensor (docs/sensor.md)."""
from __future__ import annotations

from pathlib import Path

import click

from ..checks import Number
from ..data import sensor as S
from ..model.folder import load_manifest
from ..options import emit_json, json_option


@click.command("record-to-resd")
@click.argument("recording", metavar="RECORDING")
@click.option("--out", "-o", "out_dir", required=True, metavar="DIR", help="Folder for the files.")
@click.option("--rate", type=Number(0.0, 1e6, min_open=True), default=None, metavar="HZ",
              help="Sample rate of the recording (when it has no timestamps).")
@click.option("--sensor", "sensor_name", default="lsm6dsl", show_default=True, help="The board's IMU.")
@json_option
def cmd_record_to_resd(recording, out_dir, rate, sensor_name, as_json):
    """Turn a labelled IMU recording (.npz: X [T, 3|6] in g and rad/s, optional t, y; or .csv
    with ax,ay,az[,gx,gy,gz][,t][,label]) into RESD files for Renode's IMU model
    (acc.resd, gyro.resd), the raw rows the emulated sensor reports (raw.bin, also the native
    target's sensor file) and the label schedule (sensor.json).

    \b
    Example:
      tinyol record-to-resd walk.npz --rate 50 --out build/walk
      tinyol emulate --emulator renode --board disco_l475vg_iot01a --sensor build/walk ...
    """
    from ..checks import output_dir
    output_dir(out_dir, "--out")
    rec = S.load_recording(recording, rate)
    meta = S.write_resd(rec, out_dir, S.sensor(sensor_name), Path(recording).name)
    if as_json:
        emit_json(meta)
        return
    click.echo(f"{out_dir}: {meta['rows']} rows ({meta['recorded_hz']:g} Hz recorded, played at "
               f"{meta['played_hz']:g} Hz), {len(meta['schedule'])} label segments")


@click.command("sensor-header")
@click.option("--model", "-m", "model_dir", required=True, metavar="DIR", help="The exported model.")
@click.option("--sensor", "sensor_name", default="lsm6dsl", show_default=True, help="The board's IMU.")
@click.option("--stride", type=int, required=True, help="Rows between window starts.")
@click.option("--out", "-o", "out", required=True, metavar="FILE", help="The header to write.")
def cmd_sensor_header(model_dir, sensor_name, stride, out):
    """Write the C header of a sensor firmware (imu_config.h): window length and stride, and
    the integer coefficients that turn the sensor's raw readings into the model's int8 input
    (sensitivity, the manifest's input.preprocess, input scale and zero point)."""
    m = load_manifest(model_dir)
    text = S.header(m, S.sensor(sensor_name), stride, f"{Path(model_dir).name}/manifest.json")
    Path(out).write_text(text)
    click.echo(f"wrote {out}")
