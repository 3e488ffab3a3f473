"""`tinyol save|load|pull|push`: what the board has learned, kept in its flash or copied off it.

save  SAVE: the device writes its learner state (head, settings, statistics, replay
      buffer) as a new record in its flash store (docs/persistence.md).
load  LOAD: the device replaces its learner state with the newest stored record.
pull  GET_HEAD row by row -> an .npz (W, b, active + metadata compatible with head_init.npz).
push  an .npz -> SET_HEAD row by row (checks the model hash and the shapes first).
"""
from __future__ import annotations

import dataclasses
import os
import zipfile
from pathlib import Path

import click
import numpy as np

from .. import __version__
from .._defs import Status
from ..checks import TIMEOUT, output_file
from ..errors import TinyolError
from ..link.device import RATED_ERASE_CYCLES, Device
from ..link.protocol import DeviceError
from ..options import emit_json, json_option, port_option, resolve_port

HINTS = {
    Status.ERR_FLASH: "the device could not erase or program its flash; QEMU cannot write flash at "
                      "all (use a board, Renode or `tinyol emulate --board native`), elsewhere retry "
                      "and check the store state with `tinyol info`",
    Status.ERR_NO_RECORD: "nothing stored yet: run `tinyol save` first",
    Status.ERR_MODEL: "the stored record belongs to another model or learner configuration; "
                      "`tinyol save` overwrites it",
    Status.ERR_UNSUPPORTED: "this firmware has no model, so nothing to save",
    Status.ERR_OVERFLOW: "the learner state does not fit a store slot; build with a larger "
                         "TOL_STORE_BYTES (docs/persistence.md)",
}

timeout_option = click.option("--timeout", type=TIMEOUT, default=30.0, show_default=True,
                              help="Seconds to wait for the reply (an erase takes ~25 ms per page).")


retries_option = click.option(
    "--retries", type=click.IntRange(0, 100), default=5, show_default=True,
    help="Resends met by silence before giving up (each waits twice as long; a damaged reply "
         "is resent at once). Also [VERB] retries = N in tinyol.toml.")


def _open(port: str, timeout: float, retries: int = 5) -> Device:
    return Device.open(resolve_port(port), timeout=timeout, retries=retries)


def _explain(e: DeviceError) -> TinyolError:
    err = TinyolError(str(e), hint=HINTS.get(e.status))
    return err


def _wear_rows(dev: Device) -> dict:
    p = dev.stats().persist
    if p is None:
        return {}
    return {"page_erases": p.erases, "cycles_per_page": round(p.cycles_per_page, 2), "slots": p.slots,
            "rated_cycles": RATED_ERASE_CYCLES, "saves_left": p.saves_left,
            "days_at_one_save_per_minute": round(p.lifetime_days(1.0), 1),
            "pages_per_save": p.pages_per_save}


def _store_for(record_bytes: int, info) -> int:
    """The smallest store region (two slots, whole pages of the board) whose slots hold a record
    of record_bytes; tinyol.memory.StoreLayout.store_bytes_for_whole for a state on the device."""
    from ..boards import BOARDS

    page = BOARDS[info.board].page_bytes if info.board in BOARDS else 2048
    slot = -(-record_bytes // page) * page
    return -(-2 * slot // (2 * page)) * (2 * page)


@click.command("save")
@port_option()
@click.option("--no-replay", is_flag=True, help="Leave the replay buffer out (smaller record).")
@timeout_option
@retries_option
@json_option
def cmd_save(port, no_replay, timeout, retries, as_json):
    """Store the device's learned state in its flash (survives resets and power cuts).

    \b
    Example:
      tinyol save --port socket://127.0.0.1:4321
    """
    with _open(port, timeout, retries) as dev:
        try:
            r = dev.save(replay=not no_replay, timeout=timeout)
        except DeviceError as e:
            raise _explain(e) from None
        st = dev.stats()
        wear = _wear_rows(dev)
        hz = dev.info.cpu_hz
        learner = "stage" if dev.info.stage_layers else "head"
    rec = st.record
    has_buffer = st.replay_capacity > 0
    out = dataclasses.asdict(r) | wear | {
        "includes_replay": bool(r.parts & 1),
        # the replay buffer was wanted but does not fit a store slot (None: firmware too old to say)
        "replay_left_out": (rec.replay_left_out if rec is not None else None) if not no_replay else False,
        "replay_fill": st.replay_fill, "replay_capacity": st.replay_capacity,
        "slot_bytes": rec.slot_bytes if rec is not None else None,
        "state_bytes_with_replay": rec.save_bytes if rec is not None else None}
    if as_json:
        emit_json(out)
        return
    parts = [learner] + (["replay buffer"] if r.parts & 1 else []) + (["momentum"] if r.parts & 2 else [])
    took = f", {r.cycles / hz * 1e3:.1f} ms" if r.cycles is not None else ""
    click.echo(f"saved record {r.seq} in slot {r.slot}: {r.bytes} bytes ({' + '.join(parts)}), "
               f"{r.pages} page(s) erased per save{took}")
    if no_replay and has_buffer:
        click.echo(f"replay buffer not saved (--no-replay): {st.replay_fill} latents are lost at a reset")
    elif out["replay_left_out"]:
        from ..memory import replay_row_bytes

        per = replay_row_bytes(dev.info.latent_dim, dev.info.replay_bits) + 2  # a latent and its label
        keep = max(0, (rec.slot_bytes - (rec.save_bytes - st.replay_fill * per)) // per)
        click.echo(f"warning: replay buffer NOT saved: with its {st.replay_fill} latents the state is "
                   f"{rec.save_bytes} bytes and a store slot holds {rec.slot_bytes}; after a reset the "
                   f"board has the {learner} only ({st.replay_fill} latents that protect old classes are lost)",
                   err=True)
        click.echo(f"hint: build with a larger store (`tinyol build --store-bytes N`, N >= "
                   f"{_store_for(rec.save_bytes, dev.info)}) or export with --replay-capacity {keep} "
                   f"or fewer (what a slot holds); docs/persistence.md", err=True)
    if wear:
        click.echo(f"flash wear: {wear['cycles_per_page']} erase cycles per page of {RATED_ERASE_CYCLES} rated "
                   f"({wear['slots']} slots in rotation); "
                   f"{wear['saves_left']} saves left (~{wear['days_at_one_save_per_minute']} days at one per minute)")


@click.command("load")
@port_option()
@timeout_option
@retries_option
@json_option
def cmd_load(port, timeout, retries, as_json):
    """Replace the device's learned state with the newest record in its flash.

    \b
    Example:
      tinyol load --port socket://127.0.0.1:4321
    """
    with _open(port, timeout, retries) as dev:
        try:
            r = dev.load(timeout=timeout)
        except DeviceError as e:
            raise _explain(e) from None
        damaged = "store_damaged" in dev.info.flags
    if as_json:
        emit_json({**dataclasses.asdict(r), "newer_record_damaged": damaged})
        return
    click.echo(f"loaded record {r.seq} from slot {r.slot}: {r.samples_seen} samples seen, "
               f"{r.n_active} active outputs")
    if damaged:
        click.echo("warning: at boot a newer record was found damaged (a save cut at its commit, or "
                   f"changed flash): record {r.seq} is older than the last save")


@click.command("pull")
@port_option()
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="The .npz to write (W, b, active, metadata).  [default: MODEL-head.npz (an "
                   "adaptive stage: MODEL-stage.npz) in the current directory, MODEL being the "
                   "name the device reports]")
@click.option("--timeout", type=TIMEOUT, default=2.0, show_default=True, help="Seconds per request.")
@retries_option
def cmd_pull(port, out, timeout, retries):
    """Copy the device's current head to an .npz file.

    \b
    The file holds W [rows, latent_dim], b [rows], active [rows] and, like
    head_init.npz, n_classes; plus model_hash, model, head_mode, board, samples_seen.
    Example:
      tinyol pull --port socket://127.0.0.1:4321 --out head.npz
      tinyol pull --port /dev/ttyACM0          # -> ./MODEL-head.npz
    """
    if out is not None:
        output_file(out, "--out")
    with _open(port, timeout, retries) as dev:
        info = dev.info
        if out is None:  # named after the model the device runs, where the user stands
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in info.model) or "model"
            out = Path(f"{safe}-{'stage' if info.stage_layers else 'head'}.npz")
            output_file(out, "--out")
            click.echo(f"no --out given: writing {out} in the current directory ({Path.cwd()})")
        if info.stage_layers:  # an adaptive stage: the whole stage image (docs/adaptive.md)
            image = dev.get_stage()
            st = dev.stats()
            tmp = out.with_name(out.name + ".tmp")
            with open(tmp, "wb") as f:  # written aside and renamed: never a half-written .npz
                np.savez(f, stage_image=np.frombuffer(image, np.uint8),
                         stage_hash=np.int64(info.stage_hash), model_hash=np.int64(info.model_hash),
                         model=np.str_(info.model), board=np.str_(info.board),
                         samples_seen=np.int64(st.samples_seen), tinyol_version=np.str_(__version__))
            os.replace(tmp, out)
            click.echo(f"wrote {out}: adaptive stage, {info.stage_layers} layers, {info.stage_params} "
                       f"parameters, {st.samples_seen} samples seen (model {info.model}, hash "
                       f"0x{info.model_hash:08x})")
            return
        w, b, active = dev.get_head()
        st = dev.stats()
    n_classes = int(np.flatnonzero(active).max() + 1) if active.any() else 0
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:  # written aside and renamed: never a half-written .npz
        np.savez(f, W=w.astype(np.float32), b=b.astype(np.float32), active=active.astype(bool),
                 n_classes=np.int64(n_classes), model_hash=np.int64(info.model_hash), model=np.str_(info.model),
                 head_mode=np.str_(info.head_mode), board=np.str_(info.board),
                 samples_seen=np.int64(st.samples_seen), tinyol_version=np.str_(__version__))
    tmp.replace(out)
    click.echo(f"wrote {out}: W{list(w.shape)}, {int(active.sum())} active rows, "
               f"{st.samples_seen} samples seen (model {info.model}, hash 0x{info.model_hash:08x})")


def read_head(path: Path) -> dict:
    """Load an .npz from `pull` or `export` (head_init.npz) -> dict(W, b, active, model_hash or None)."""
    hint = "expected the output of `tinyol pull` or an exported head_init.npz"
    if Path(path).stat().st_size == 0:
        raise TinyolError(f"{path} is an empty file", hint=hint)
    try:
        z = np.load(path, allow_pickle=False)
        if not hasattr(z, "files"):
            raise ValueError("a single array, not an .npz archive")
        missing = [k for k in ("W", "b") if k not in z.files]
        if missing:
            raise TinyolError(f"{path} has no {', '.join(missing)}", hint=hint)
        w, b = np.asarray(z["W"]), np.asarray(z["b"])
        if w.ndim != 2 or b.ndim != 1 or not (np.issubdtype(w.dtype, np.number)
                                              and np.issubdtype(b.dtype, np.number)):
            raise TinyolError(f"{path}: W must be a 2-D and b a 1-D array of numbers, got W "
                              f"{w.dtype}{list(w.shape)}, b {b.dtype}{list(b.shape)}", hint=hint)
        if "active" in z.files:
            active = np.asarray(z["active"]).astype(bool).reshape(-1)
        elif "n_classes" in z.files:
            active = np.arange(len(b)) < int(z["n_classes"])
        else:
            active = np.ones(len(b), bool)
        model_hash = int(z["model_hash"]) if "model_hash" in z.files else None
    except TinyolError:
        raise
    except (OSError, ValueError, TypeError, EOFError, KeyError, zipfile_error()) as e:
        # EOFError (an empty file) must not reach click, which would print "aborted"
        raise TinyolError(f"cannot read {path}: {type(e).__name__}: {e or 'empty file'}", hint=hint) from None
    return {"W": w, "b": b, "active": active, "model_hash": model_hash}


def zipfile_error():
    return zipfile.BadZipFile


def _cut_push(e: TinyolError, dev: Device, inp) -> TinyolError:
    """What the device holds after a push that failed part way (set_head stages every
    slice but the last, so the head is fenced, never learned on or saved, until committed)."""
    k = getattr(dev, "head_written", 0)
    why = str(_explain(e)) if isinstance(e, DeviceError) else str(e)
    if k == 0:
        return TinyolError(f"push failed before the device took any of {inp}: {why}; its head is unchanged",
                           hint=e.hint)
    return TinyolError(
        f"push cut after {k} slices of {inp}: {why}. The device holds a partly written head, fenced: "
        "it refuses SAMPLE, PREDICT and SAVE (ERR_BUSY) and never auto-saves it",
        hint="push again to commit a whole head; or `tinyol load` (last saved state) / a reset "
             "(the exported head) to roll back")


@click.command("push")
@port_option()
@click.option("--in", "inp", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An .npz from `tinyol pull` (or a head_init.npz).")
@click.option("--force", is_flag=True, help="Push even if the file's model hash differs from the device's.")
@click.option("--timeout", type=TIMEOUT, default=2.0, show_default=True, help="Seconds per request.")
@retries_option
def cmd_push(port, inp, force, timeout, retries):
    """Write a head from an .npz file onto the device (SET_HEAD); `tinyol save` keeps it.

    \b
    Example:
      tinyol push --port socket://127.0.0.1:4321 --in head.npz
    """
    stage, stage_hash, model_hash = _read_stage(inp)
    if stage is not None:
        _push_stage(port, timeout, retries, inp, stage, stage_hash, model_hash, force)
        return
    head = read_head(inp)
    with _open(port, timeout, retries) as dev:
        info = dev.info
        if info.stage_layers:
            raise TinyolError(f"{inp} holds a one-layer head but {info.model} on the device trains an "
                              f"adaptive stage of {info.stage_layers} layers",
                              hint="push an .npz that `tinyol pull` wrote from a device of this export")
        if head["model_hash"] is not None and head["model_hash"] != info.model_hash and not force:
            raise TinyolError(
                f"model hash mismatch: {inp} is for model hash 0x{head['model_hash']:08x}, the device runs "
                f"{info.model} (0x{info.model_hash:08x})",
                hint="a head only fits the backbone it was trained on; --force pushes it anyway")
        try:
            dev.set_head(head["W"], head["b"], head["active"])
        except TinyolError as e:
            raise _cut_push(e, dev, inp) from None
    click.echo(f"pushed {inp}: {int(np.asarray(head['active']).sum())} active rows onto {info.board} "
               f"(not yet saved: run `tinyol save` to keep it)")


def _read_stage(inp: Path) -> tuple[bytes | None, int | None, int | None]:
    """An adaptive-stage image from a `tinyol pull` file, or (None, None) for anything else
    (read_head then reads it as a one-layer head, or explains what is wrong with it)."""
    try:
        with np.load(inp, allow_pickle=False) as z:
            if "stage_image" not in z.files:
                return None, None, None
            image = z["stage_image"]
            stage_hash = int(z["stage_hash"]) if "stage_hash" in z.files else None
            model_hash = int(z["model_hash"]) if "model_hash" in z.files else None
    except Exception:  # noqa: BLE001 - not an .npz at all: read_head gives the one-line error
        return None, None, None
    if image.dtype != np.uint8 or image.ndim != 1:
        raise TinyolError(f"{inp}: stage_image must be a 1-D uint8 array, not {image.dtype} {image.shape}",
                          hint="push an .npz that `tinyol pull` wrote")
    return bytes(image), stage_hash, model_hash


def _push_stage(port, timeout, retries, inp: Path, image: bytes, stage_hash: int | None,
                model_hash: int | None, force: bool) -> None:
    """push for an adaptive stage: SET_STAGE slices, committed all at once by the device. Its
    size, model and stage are checked before the first slice is staged (a staged slice fences
    the device until the push completes)."""
    with _open(port, timeout, retries) as dev:
        info = dev.info
        if not info.stage_layers:
            raise TinyolError(f"{inp} holds an adaptive stage but {info.model} on the device has a "
                              f"one-layer head", hint="push it to a firmware built from the same export")
        want = 4 * info.stage_params + info.max_classes  # docs/protocol.md: GET_STAGE / SET_STAGE
        if len(image) != want:
            raise TinyolError(f"{inp} holds a stage image of {len(image)} bytes, the device's is {want} "
                              f"({info.stage_params} parameters + {info.max_classes} flags); nothing was sent",
                              hint="pull and push between devices running the same export")
        if stage_hash is not None and stage_hash != info.stage_hash and not force:
            raise TinyolError(f"stage mismatch: {inp} is for stage 0x{stage_hash:08x}, the device runs "
                              f"0x{info.stage_hash:08x}",
                              hint="a stage only fits the export it came from; --force pushes it anyway")
        if model_hash is not None and model_hash != info.model_hash and not force:
            raise TinyolError(
                f"model hash mismatch: {inp} was pulled from model hash 0x{model_hash:08x}, the device "
                f"runs {info.model} (0x{info.model_hash:08x})",
                hint="a stage only fits the backbone it was trained on; --force pushes it anyway")
        try:
            n_active = dev.set_stage(image)
        except DeviceError as e:
            raise _explain(e) from None
        except TinyolError as e:  # the link died part way
            k = getattr(dev, "stage_written", 0)
            if k == 0:
                raise TinyolError(f"push failed before the device took any of {inp}: {e}; its stage "
                                  f"is unchanged", hint=e.hint) from None
            raise TinyolError(
                f"push cut after {k} slices of {inp}: {e}. The device's stage is unchanged but fenced "
                "by the staged part: it refuses SAMPLE, PREDICT and SAVE (ERR_BUSY) and never "
                "auto-saves until a push completes",
                hint="push again to commit the whole stage; or `tinyol load` (last saved state) / a "
                     "reset (the exported stage) to roll back") from None
    click.echo(f"pushed {inp}: adaptive stage ({info.stage_params} parameters, {n_active} active "
               f"classes) onto {info.board} (not yet saved: run `tinyol save` to keep it)")
