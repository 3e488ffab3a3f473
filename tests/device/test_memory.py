"""One memory truth (host/tinyol/memory.py): "export says it fits" == "the real linker links it".

The oracle is arm-none-eabi-ld, through the real firmware build (PlatformIO, our platform): every
configuration of the sweep is linked for every board, with the learner where the plan puts it, and,
for the ones the plan refuses, in every region the board has (none may link). The linked ELF's
object sizes (tol_learner_mem, tol_server) must equal the model's to the byte.
"""
from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tinyol import memory
from tinyol.boards import BOARDS
from tinyol.errors import TinyolError
from tinyol.learn import learner as ref

ROOT = Path(__file__).resolve().parents[2]


def test_learner_bytes_matches_reference_port():
    """memory.learner_bytes (stdlib, used by the build) == tinyol.learn.learner.learner_bytes (the port of
    TOL_LEARNER_BYTES_EX that tests/host/test_learner_* hold against the C macro)."""
    rng = random.Random(3)
    for _ in range(300):
        d, c, cap = rng.randint(1, 700), rng.randint(1, 800), rng.choice([0, 0, 1, 7, 200, 3000])
        bits, nn, no = rng.choice([32, 8, 7]), rng.randint(1, 32), rng.choice([0, 1, 2, 16, 40])
        mom = rng.random() < 0.5
        want = ref.learner_bytes(d, c, cap, bits, nn, memory.max_old(cap, no), no_momentum=not mom)
        assert memory.learner_bytes(d, c, cap, bits, nn, no, mom) == want


def test_momentum_and_replay_rows_only_when_used():
    m = memory.Model(input_size=768, latent_dim=16, outputs=768, autoencoder=True, arena_bytes=1000,
                     replay_capacity=0)
    p = m.parts()
    assert p["momentum"] == 0 and p["replay buffer"] == 0
    assert p["gradient rows"] == 4 * 1 * (768 + 16)      # one fresh sample, no replayed rows
    m.momentum = True
    assert m.parts()["momentum"] == 4 * (768 * 16 + 768)


def test_largest_capacity_is_the_edge():
    m = memory.Model(input_size=64, latent_dim=32, outputs=10, autoencoder=False, arena_bytes=1056,
                     replay_capacity=0)
    b = BOARDS["nucleo_l432kc"]
    regions = memory.board_regions(b)
    cap = memory.largest_capacity(m, b.name, regions)
    assert cap > 0
    m.replay_capacity = cap
    assert memory.plan(m, b.name, regions).fits
    m.replay_capacity = cap + 1
    assert not memory.plan(m, b.name, regions).fits


def test_export_refuses_with_bytes_and_knob():
    from tinyol.model.plan import check_fit, memory_model

    # the MLPerf Tiny AD autoencoder's head (128 -> 640) is 328 KB of float weights
    mm = memory_model(input_size=640, dim=128, rows=640, autoencoder=True, arena_bytes=600,
                      replay_capacity=0, replay_bits=8, replay_n_new=1, replay_n_old=16, momentum=0.0)
    with pytest.raises(TinyolError) as e:
        check_fit(mm, BOARDS["nucleo_l476rg"], name="ad")
    assert re.search(r"ad does not fit nucleo_l476rg: SRAM1 over by \d+ bytes", str(e.value))
    assert "--board nucleo_l4r5zi" in e.value.hint       # where it does fit
    check_fit(mm, BOARDS["nucleo_l4r5zi"])                  # learner in SRAM3


def test_stage_is_in_the_memory_model():
    """An adaptive stage's learner is tol_stage_bytes (tinyol.learn.stage, held equal to the C by
    tests/host/test_stage_equiv.py), placed and sized like the head's; a misfit names bytes and knob."""
    from tinyol.learn.stage import Layer, stage_memory
    from tinyol.model.plan import check_fit

    man = json.loads((ROOT / "models/digits_adaptive/manifest.json").read_text())
    m = memory.Model.from_manifest(man)
    layers = [Layer(**dict(zip(("kind", "act", "kh", "kw", "sh", "sw", "pt", "pl", "in_h", "in_w", "in_c",
                                "out_h", "out_w", "out_c"), d))) for d in man["stage"]["descriptors"]]
    assert m.learner() == stage_memory(layers, 32, 8, 1, 0, True)["total"] == sum(m.parts().values())
    assert m.learner() == man["memory"]["learner_bytes"]
    b = BOARDS["nucleo_l432kc"]
    with pytest.raises(TinyolError) as e:
        check_fit(m, b, name="digits_adaptive")
    assert re.search(r"digits_adaptive does not fit nucleo_l432kc: SRAM1 over by \d+ bytes", str(e.value))
    assert e.value.hint.startswith("cut later (--split nearer the head)")
    l4r5 = BOARDS["nucleo_l4r5zi"]
    assert memory.plan(m, l4r5.name, memory.board_regions(l4r5)).learner_region == "RAM3"
    regions = memory.board_regions(BOARDS["nucleo_l476rg"])
    cap = memory.largest_capacity(m, "nucleo_l476rg", regions)
    m.replay_capacity = cap
    assert memory.plan(m, "nucleo_l476rg", regions).fits
    m.replay_capacity = cap + 1
    assert not memory.plan(m, "nucleo_l476rg", regions).fits


# ---------------------------------------------------------------------------------------------
# the sweep against the real linker

def _keras_ae(tmp: Path, name: str, n_in: int, hidden: list[int]) -> Path:
    from tinyol.model.export import _keras

    keras = _keras()
    inp = keras.Input((n_in,))
    x = inp
    for i, h in enumerate(hidden):
        x = keras.layers.Dense(h, activation="relu", name=f"d{i}")(x)
    out = keras.layers.Dense(n_in, name="head")(x)
    path = tmp / f"{name}.keras"
    keras.Model(inp, out, name=name).save(path)
    return path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """Exported model directories: shipped ones copied, autoencoders exported here."""
    from tinyol.model.export import export_model

    tmp = tmp_path_factory.mktemp("mem")
    dirs = {}
    for name in ("digits", "mobilenet_v1_vww"):
        dirs[name] = tmp / name
        shutil.copytree(ROOT / "models" / name, dirs[name])
    for name, n_in, hidden in (("ae768_16", 768, [64, 16]), ("ae768_8", 768, [64, 8]),
                               ("ad_ae", 640, [128] * 4 + [8] + [128] * 4)):
        src = _keras_ae(tmp, name, n_in, hidden)
        export_model(str(src), str(tmp / name), name=name)
        dirs[name] = tmp / name
    # 4-bit replay (replay_codec.c): half a byte per latent value
    dirs["digits4"] = tmp / "digits4"
    export_model(str(ROOT / "models" / "digits" / "digits.keras"), str(dirs["digits4"]),
                 name="digits4", calib="digits:0-4@train", max_classes=10, replay_bits=4)
    # product-quantized replay (replay_codec.c holds the codebook): one byte per sub-vector
    dirs["digitspq"] = tmp / "digitspq"
    export_model(str(ROOT / "models" / "digits" / "digits.keras"), str(dirs["digitspq"]),
                 name="digitspq", calib="digits:0-4@train", max_classes=10, replay_codec="pq:8")
    return dirs


def _link(model_dir: Path, board: str, region: int | None,
          replay_region: int | None = None) -> tuple[bool, str, Path | None]:
    """Build the release firmware; True when it linked. region: force the learner there (and its
    replay buffer to replay_region, default the same)."""
    from tinyol.paths import pio_command
    from tinyol.targets.firmware import BuildConfig, build_env

    cfg = BuildConfig(board, str(model_dir))
    env = build_env(cfg)
    env.pop("TINYOL_REPLAY_REGION", None)
    if region is not None:
        env["TINYOL_LEARNER_REGION"] = str(region)
        if replay_region is not None:
            env["TINYOL_REPLAY_REGION"] = str(replay_region)
    else:
        env.pop("TINYOL_LEARNER_REGION", None)
    r = subprocess.run([*pio_command(), "run", "-d", str(ROOT), "-e", board], env=env,
                       capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    elf = Path(env["PLATFORMIO_BUILD_DIR"]) / board / "firmware.elf"
    if r.returncode != 0:
        assert re.search(r"overflowed|will not fit in region|does not fit", out), out[-3000:]  # memory only
    return r.returncode == 0, out, elf if r.returncode == 0 else None


def _sizes(elf: Path) -> dict[str, int]:
    nm = subprocess.check_output(["arm-none-eabi-nm", "-S", str(elf)], text=True)
    return {f[3]: int(f[1], 16) for f in (l.split() for l in nm.splitlines()) if len(f) == 4}


def _addresses(elf: Path) -> dict[str, int]:
    nm = subprocess.check_output(["arm-none-eabi-nm", "-S", str(elf)], text=True)
    return {f[3]: int(f[0], 16) for f in (l.split() for l in nm.splitlines()) if len(f) == 4}


def _configs():
    """(board, model, learner changes, link in every region when refused)."""
    out = []
    for b in BOARDS:
        out += [(b, "digits", {}, False)]
        if b != "disco_l475vg_iot01a":  # the L475's memory map is the L476's
            out += [(b, "ae768_16", {}, False), (b, "ad_ae", {}, False),
                    (b, "mobilenet_v1_vww", {}, False)]
    out += [("nucleo_l476rg", "ae768_8", {}, False), ("nucleo_l432kc", "ae768_8", {}, False),
            ("nucleo_l476rg", "ae768_16", {"momentum": 0.9}, True),
            ("nucleo_l432kc", "digits", {"momentum": 0.9}, False),
            ("nucleo_l476rg", "ad_ae", {"replay_capacity": 200}, False)]
    for b in ("nucleo_l432kc", "nucleo_l4r5zi"):  # the edge, both ways
        out += [(b, "digits", {"replay_capacity": "largest"}, False),
                (b, "digits", {"replay_capacity": "largest+1"}, True)]
    return out


@pytest.mark.slow
@pytest.mark.tf
def test_fits_equals_links(model_dirs):
    report = _sweep(model_dirs, _configs())
    # the cases the issue names
    res = {(b, n, json.dumps(c, sort_keys=True)): (f, l) for b, n, c, f, l, _ in report}
    assert res[("nucleo_l4r5zi", "mobilenet_v1_vww", "{}")] == (True, True)
    assert res[("nucleo_l476rg", "ae768_16", "{}")] == (True, True)
    assert res[("nucleo_l476rg", "ae768_8", "{}")] == (True, True)


@pytest.mark.slow
@pytest.mark.tf
def test_4bit_replay_fits_equals_links(model_dirs):
    """4-bit replay slots (ceil(D/2) + 2 bytes) are the linker's too: the largest capacity the
    plan gives links, one slot more does not."""
    man = json.loads((model_dirs["digits4"] / "manifest.json").read_text())
    assert man["learner"]["replay_bits"] == 4
    assert memory.replay_row_bytes(32, 4) == 16
    report = _sweep(model_dirs, [("nucleo_l432kc", "digits4", {"replay_capacity": "largest"}, False),
                                 ("nucleo_l432kc", "digits4", {"replay_capacity": "largest+1"}, True)])
    assert [(f, l if f else None) for _, _, _, f, l, _ in report] == [(True, True), (False, None)]


def _sweep(model_dirs, configs) -> list:
    """Link every configuration; the plan's verdict must be the linker's (see the module doc)."""
    from tinyol.model.export import refresh_config
    from tinyol.model.plan import board_plan

    report = []
    for board, name, changes, every_region in configs:
        d = model_dirs[name]
        changes = dict(changes)
        if isinstance(changes.get("replay_capacity"), str):
            m = memory.Model.from_manifest(json.loads((d / "manifest.json").read_text()))
            b = BOARDS[board]
            cap = memory.largest_capacity(m, board, memory.board_regions(b))
            changes["replay_capacity"] = cap + (1 if changes["replay_capacity"].endswith("+1") else 0)
        man = refresh_config(str(d), check=False, board=board, **changes)
        mm = memory.Model.from_manifest(man)
        plan = board_plan(mm, BOARDS[board])
        linked, out, elf = _link(d, board, None)
        report.append((board, name, changes, plan.fits, linked,
                       plan.learner_region + ("+" + plan.replay_region if plan.split else "")))
        if plan.fits:
            assert linked, f"{board} {name} {changes}: export says it fits, the link failed\n{out[-2000:]}"
            sizes = _sizes(elf)
            blocks = {"tol_learner_mem": (plan.learner_region, mm.learner())}
            if plan.split:  # the replay buffer in a region of its own
                replay = mm.parts()["replay buffer"]
                blocks = {"tol_learner_mem": (plan.learner_region, mm.learner() - replay),
                          "tol_replay_mem": (plan.replay_region, replay)}
            else:
                assert "tol_replay_mem" not in sizes
            for sym, (where, size) in blocks.items():
                addr = _addresses(elf)[sym]
                assert addr >> 28 == (1 if where == "RAM2" else 2), hex(addr)  # SRAM2 at 0x1...
                assert (0x20040000 <= addr < 0x20040000 + 0x60000) == (where == "RAM3"), hex(addr)
                assert sizes[sym] == size, sym
            assert sizes["tol_server"] == memory.app_bytes(mm.input_size, mm.latent_dim,
                                                        0 if mm.autoencoder else mm.outputs)
            assert "tinyol: memory plan" in out
        else:
            where, over = plan.over
            assert not linked or (where == "SRAM1" and over <= memory.SLACK_BYTES), (board, name, changes)
            # the build refuses with the summary, not ld's "region overflowed"
            assert re.search(r"tinyol: error: .* does not fit %s: \w+ over by \d+ bytes" % board, out)
            assert "tinyol: hint:" in out and "overflowed" not in out
            # the linker must refuse it too: with the learner where the plan comes closest, and
            # for the edge cases in every region the board has
            ids = range(1, len(memory.board_regions(BOARDS[board])) + 1)
            placements = ([(a, b) for a in ids for b in ids if b == a or mm.parts()["replay buffer"]]
                          if every_region else [(plan.learner_region_id, plan.replay_region_id)])
            for region, rregion in placements:
                ok, out2, _ = _link(d, board, region, rregion)
                assert not ok or (1 in (region, rregion) and plan.regions[0].over <= memory.SLACK_BYTES), \
                    f"{board} {name} {changes}: refused, but links with the learner in region {region}, " \
                    f"its replay buffer in {rregion}"
        print(f"memory sweep: {board} {name} {changes}: fits {plan.fits}, linked {linked}, "
              f"learner in {plan.learner_region}", flush=True)
    return report


@pytest.mark.slow
@pytest.mark.tf
def test_pq_replay_fits_equals_links(model_dirs):
    """PQ replay slots (M + 2 bytes) are the linker's too: the largest capacity the plan gives
    links, one slot more does not; the codebook the plan counts in flash is the linked one."""
    man = json.loads((model_dirs["digitspq"] / "manifest.json").read_text())
    bits = man["learner"]["replay_bits"]
    assert bits == 128 + 32 // 8 and memory.replay_row_bytes(32, bits) == 8
    report = _sweep(model_dirs, [("nucleo_l432kc", "digitspq", {"replay_capacity": "largest"}, False)])
    assert [(f, l) for _, _, _, f, l, _ in report] == [(True, True)]
    from tinyol.targets.firmware import BuildConfig, build_env

    elf = Path(build_env(BuildConfig("nucleo_l432kc", str(model_dirs["digitspq"])))["PLATFORMIO_BUILD_DIR"])
    nm = subprocess.check_output(["arm-none-eabi-nm", "-S", str(elf / "nucleo_l432kc" / "firmware.elf")],
                                 text=True)
    book = [l.split() for l in nm.splitlines() if l.endswith(" tol_replay_codebook")]
    assert len(book) == 1 and int(book[0][0], 16) >> 24 == 0x08, book  # in flash
    assert int(book[0][1], 16) == memory.replay_codec_flash(32, bits) == 256 * 32
    report = _sweep(model_dirs, [("nucleo_l432kc", "digitspq", {"replay_capacity": "largest+1"}, True)])
    assert [(f, l if f else None) for _, _, _, f, l, _ in report] == [(False, None)]
