"""`tinyol info`: ask a device for its INFO record."""
from __future__ import annotations

import dataclasses
import time

import click

from .. import memory
from ..boards import get_board
from ..checks import TIMEOUT, Number
from ..errors import TinyolError
from ..link.device import Device
from ..link.protocol import DeviceError
from ..model.folder import load_manifest
from ..options import emit_json, json_option, port_option, resolve_port


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB"


def memory_plan(model_dir: str, board: str) -> dict:
    """The firmware's memory for `model_dir` on `board` (tinyol.memory, the model `tinyol export`
    checks and the build places the learner with)."""
    b = get_board(board)
    m = load_manifest(model_dir)
    try:
        model = memory.Model.from_manifest(m)
        name = str(m["name"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        what = f"no {e.args[0]!r} field" if isinstance(e, KeyError) else f"a field of the wrong kind ({e})"
        raise TinyolError(f"{model_dir}/manifest.json: {what}",
                          hint="re-export the model (`tinyol export`); manifest.json is written by it, "
                               "not by hand") from None
    plan = memory.plan(model, b.name, memory.board_regions(b), flash_bytes=b.flash_bytes)
    lay = memory.store_layout(model, b.flash_bytes, b.page_bytes)
    stage = m.get("stage") or {}
    return {"model": name, "board": board, "fits": plan.fits,
            "stage_train": stage.get("train_spec", "all" if stage else None),
            "stage_train_auto": "selection" in stage,
            "learner_region": memory.REGION_TITLES[plan.learner_region],
            "replay_region": memory.REGION_TITLES[plan.replay_region],
            "store": {"slots": lay.slots, "slot_bytes": lay.slot_bytes, "store_bytes": lay.store_bytes,
                      "full_record": lay.full_record, "head_record": lay.head_record,
                      "replay_saved": lay.replay_saved, "saves_whole": lay.whole,
                      "line": lay.line(), "advice": None if lay.whole else lay.advice(model)},
            "learner_bytes": plan.model.learner(), "learner_parts": plan.model.parts(),
            "regions": {r.title: {"used": r.used, "size": r.size, "items": r.items}
                        for r in plan.regions},
            "flash_estimate": plan.flash_needed, "flash_room": plan.flash_room,
            "lines": plan.lines(), "advice": None if plan.fits else plan.advice()}


@click.command("info")
@port_option(required=False)
@click.option("--model", "-m", "model_dir", default=None, metavar="DIR",
              help="Without a device: print the memory this model needs on --board.")
@click.option("--board", "-b", default=None, metavar="BOARD",
              help="With --model: the board (default: the one it was exported for).")
@json_option
@click.option("--timeout", type=TIMEOUT, default=2.0, show_default=True, help="Seconds per attempt.")
@click.option("--watch", type=Number(0.2, 86400.0), default=None, metavar="SECONDS",
              help="With --port: show it again every SECONDS until Ctrl-C (one client at a time: "
                   "not while `tinyol stream` uses the port).")
def cmd(port, model_dir, board, as_json, timeout, watch):
    """Print a device as it is now: board, firmware, model, memory use, boot counter, and its
    learner (mode and settings, active classes and samples per class, replay fill per class,
    anomaly threshold and score statistics) and what its store holds (the record the learner
    matches: slot, size, whether it has the replay buffer, how many updates behind); or, with
    --model (no device needed), the memory the model's firmware reserves on a board.

    \b
    Examples:
      tinyol info --port socket://127.0.0.1:4321 --json
      tinyol info --port socket://127.0.0.1:4321 --watch 2
      tinyol info --model models/digits --board nucleo_l432kc
    """
    src = click.get_current_context().get_parameter_source("model_dir")
    if port is not None and src == click.core.ParameterSource.DEFAULT_MAP:
        model_dir = None  # tinyol.toml's model: with a device, ask the device
    if model_dir is not None:
        board = board or load_manifest(model_dir).get("board") or "nucleo_l476rg"
        plan = memory_plan(model_dir, board)
        if as_json:
            emit_json(plan)
            return
        click.echo(f"{plan['model']} on {board}: "
                   + ("fits" if plan["fits"] else "does NOT fit") + " (host/tinyol/memory.py)")
        if plan["stage_train"] is not None:
            click.echo(f"  adaptive stage trains: {plan['stage_train']}"
                       + (" (chosen by --stage-train auto at export)" if plan["stage_train_auto"] else ""))
        for line in plan["lines"]:
            click.echo(f"  {line}")
        click.echo(f"  {plan['store']['line']}")
        if plan["advice"]:
            click.echo(f"hint: {plan['advice']}")
        elif plan["store"]["advice"]:
            click.echo(f"hint: {plan['store']['advice']}")
        return
    if port is None:
        raise TinyolError("give --port URL (a device) or --model DIR (its memory, no device)")
    with Device.open(resolve_port(port), timeout=timeout) as dev:
        while True:
            view = device_view(dev)
            if as_json:
                emit_json(view)
            else:
                if watch:
                    click.clear()
                for line in view_lines(view):
                    click.echo(line)
            if not watch:
                return
            try:
                time.sleep(watch)
            except KeyboardInterrupt:
                return
            dev.info = dev.link.info()  # a reset in between shows as a new boot count


MODES = {0: "frozen", 1: "SGD (TinyOL)", 2: "SGD + replay"}


def _settings(dev: Device) -> dict:
    """The learner's settings by GET; those older firmware does not know are left out."""
    names = (["mode", "lr", "momentum", "weight_decay", "n_new", "n_old", "rehearse", "replay_policy"]
             if dev.info.head_mode == "classifier" else
             ["mode", "lr", "threshold_k", "ema_alpha", "warmup", "train_anomalies"]) + ["autosave"]
    out = {}
    for name in names:
        try:
            out[name] = dev.get(name)
        except DeviceError:
            continue
    return out


def device_view(dev: Device) -> dict:
    """What `tinyol info --port` shows: INFO, then the learner as it is now (STATS, GET) and
    what the store holds now (STATS' persistence and record blocks)."""
    from ..model.export import REPLAY_POLICIES

    info = dev.info
    view = dataclasses.asdict(info)
    view["store_at_boot"] = info.store
    st = dev.stats()
    ae = info.head_mode == "autoencoder"
    set_ = _settings(dev)
    if "replay_policy" in set_:
        pol = int(set_["replay_policy"])
        set_["replay_policy"] = REPLAY_POLICIES[pol] if pol < len(REPLAY_POLICIES) else pol
    learner = {"mode": MODES.get(int(set_.get("mode", -1)), set_.get("mode")), "settings": set_,
               "samples_seen": st.samples_seen, "updates": st.updates, "rejected": st.rejected}
    if ae:
        learner["anomaly"] = {"threshold": st.threshold, "flagged": st.anomalies,
                              "score_mean": st.record.score_mean if st.record else None,
                              "score_std": st.record.score_std if st.record else None,
                              "k": set_.get("threshold_k")}
    else:
        counts = st.class_counts or []
        learner["active_classes"] = st.n_active
        learner["max_classes"] = st.n_outputs
        learner["samples_per_class"] = {str(c): n for c, n in enumerate(counts) if n}
    learner["replay"] = {"fill": st.replay_fill, "capacity": st.replay_capacity, "bits": info.replay_bits,
                         "storage": memory.replay_storage(info.latent_dim, info.replay_bits),
                         "per_class": ({str(c): n for c, n in enumerate(st.record.replay_per_class) if n}
                                       if st.record else None)}
    view["learner"] = learner
    p, r = st.persist, st.record
    store = {"at_boot": info.store}
    if p is not None:
        store.update(slots=p.slots, saves_since_boot=p.saves, last_status=p.last_status,
                     seq=p.seq, saves_left=p.saves_left)
    if r is not None:
        store.update(record=r.origin, slot=r.slot if r.origin != "none" else None,
                     bytes=r.bytes, includes_replay=r.has_replay if r.origin != "none" else None,
                     updates_since=r.updates_since, slot_bytes=r.slot_bytes,
                     save_would_write=r.save_bytes, replay_fits_a_slot=r.replay_fits,
                     replay_left_out=r.replay_left_out)
    # what the store holds now: the record this state matches (saved or loaded), else the boot state
    if r is not None and r.origin != "none":
        store["now"] = "record"
    elif p is not None and p.seq:
        store["now"] = "record"
    else:
        store["now"] = info.store
    view["stored"] = store  # "store" / "store_seq" stay INFO's: the state at boot
    return view


def _per_class(d: dict | None) -> str:
    return ", ".join(f"{c}: {n}" for c, n in d.items()) if d else "-"


def view_lines(v: dict) -> list[str]:
    flags = v["flags"]
    rows = [
        ("board", v["board"]),
        ("firmware", f"{v['fw_version']} (protocol {v['proto_version']})"),
        ("flags", ", ".join(flags) or "-"),
        ("model", f"{v['model']} (hash 0x{v['model_hash']:08x})"),
        ("input / latent", f"{v['input_size']} int8 / {v['latent_dim']}"),
        ("head", f"autoencoder: reconstructs its {v['max_classes']} inputs; a score above mean + k "
                 "std of the scores seen is an anomaly" if v["head_mode"] == "autoencoder"
         else f"{v['head_mode']}, up to {v['max_classes']} classes"),
        *([("adaptive stage", f"{v['stage_layers']} layers, {v['stage_params']} parameters, "
                              f"{_kb(v['stage_bytes'])} RAM")] if v["stage_layers"] else []),
        ("cpu clock", f"{v['cpu_hz'] / 1e6:.0f} MHz"),
        ("RAM", f"{_kb(v['ram_used'])} of {_kb(v['ram_total'])} (+ SRAM2 {_kb(v['ram2_used'])} of "
                f"{_kb(v['ram2_total'])})" if v["ram_total"] else "n/a (host process)"),
        ("flash", f"{_kb(v['flash_used'])} of {_kb(v['flash_total'])}" if v["flash_total"] else "n/a (host process)"),
        ("boot count", str(v["boot_count"])),
        ("max payload", f"{v['max_payload']} bytes"),
    ]
    L = v["learner"]
    s = L["settings"]
    how = ", ".join(f"{k} {s[k]:g}" if isinstance(s[k], float) else f"{k} {s[k]}"
                    for k in ("lr", "momentum", "n_new", "n_old", "rehearse", "replay_policy",
                              "threshold_k", "warmup") if k in s)
    rows += [("learner", f"{L['mode']}" + (f" ({how})" if how else "")),
             ("samples", f"{L['samples_seen']} seen, {L['updates']} updates"
                         + (f", {L['rejected']} rejected" if L["rejected"] else ""))]
    if "anomaly" in L:
        a = L["anomaly"]
        thr = a["threshold"]
        stats = (f" = mean {a['score_mean']:.4g} + {a['k']:g} x std {a['score_std']:.4g}"
                 if a["score_mean"] is not None and a["k"] is not None and thr != float("inf") else "")
        rows.append(("anomaly", ("threshold warming up" if thr == float("inf") else f"threshold {thr:.4g}{stats}")
                     + f"; {a['flagged']} flagged"))
    else:
        rows.append(("classes", f"{L['active_classes']} of {L['max_classes']} active; samples learned "
                                f"per class: {_per_class(L['samples_per_class'])}"))
    rp = L["replay"]
    if rp["capacity"]:
        rows.append(("replay", f"{rp['fill']} of {rp['capacity']} latents at {rp.get('storage') or str(rp['bits']) + ' bit'}; "
                               "per class: "
                               + (_per_class(rp["per_class"]) if rp["per_class"] is not None
                                  else "(firmware too old to say)")))
    else:
        rows.append(("replay", "none"))
    st = v["stored"]
    if st.get("record") in ("saved", "loaded"):
        learner = "stage" if v["stage_layers"] else "head"
        what = f"{learner} + replay buffer" if st["includes_replay"] else f"{learner} only, no replay buffer"
        age = ("matches the learner" if not st["updates_since"]
               else f"{st['updates_since']} updates behind the learner")
        now = (f"record {st['seq']} in slot {st['slot']}, {st['bytes']} bytes ({what}); "
               f"{st['record']}{' since boot' if st['record'] == 'saved' else ''}; {age}")
    elif st["now"] == "record":
        now = f"record {st['seq']} (firmware too old to say more)"
    else:
        now = st["now"]
    rows.append(("stored state", now))
    if st.get("slot_bytes"):
        fits = ("a save now keeps everything" if st["replay_fits_a_slot"] else
                f"a save now leaves the replay buffer out (state {st['save_would_write']} bytes, "
                f"slot {st['slot_bytes']})")
        rows.append(("store", f"{st['slots']} slots of {st['slot_bytes']} bytes; {fits}; "
                              f"{st['saves_left']} saves left"))
    rows.append(("at boot", st["at_boot"] + (f" (record {v['store_seq']})" if v.get("store_seq") else "")
                 + ("; a newer record is damaged (a save cut at its commit, or changed flash): this is an "
                    "older state than the last save" if "store_damaged" in flags else "")))
    return [f"{k:>15}: {val}" for k, val in rows]
