"""One model of the firmware's memory, shared by `tinyol export` (fit check), the firmware build
(summary, learner placement) and `tinyol info --model`.

What the firmware reserves, per region of an STM32L4 board:

SRAM1 (``RAM``)   .data/.bss of the firmware (drivers, protocol state, ...: ``FIXED_RAM1``,
                  measured), the protocol buffers (``tol_server_t``, sized by the model's input),
                  the backbone's input and latent buffers, the backbone's activation arena,
                  the 8 KB stack reservation, and the learner's memory when it is placed here.
SRAM2 (``RAM2``)  the learner's memory when it fits there (all boards), or its replay buffer.
SRAM3 (``RAM3``)  the same (NUCLEO-L4R5ZI only: 384 KB).

The learner's memory is one block (``tol_learner_mem`` in mcu/app/model.c). For the one-layer
head (mcu/app/learner_head.c):
``TOL_LEARNER_BYTES_EX(dim, outputs, capacity, bits, n_new, max_old, no_momentum)``:
the head (W, b; momentum buffers only when momentum > 0; one gradient row per sample of the
largest batch: n_new fresh + n_old replayed, and only n_old of them when there is a buffer),
the replay buffer (only when capacity > 0), scratch and per-class counters.
For an adaptive stage (an earlier ``--split``, mcu/app/learner_stage.c): ``tol_stage_bytes()``:
every parameter of the stage, its gradients, momentum (only when momentum > 0), every layer's
output kept for backprop plus two delta buffers and the probabilities, the queue of n_new fresh
latents, per-class counters and flags, the replay buffer (:func:`stage_parts`).
The block goes to the largest extra region where everything fits, else SRAM1; when it fits
nowhere whole, the replay buffer is split off and placed in a region of its own (the head or
stage in SRAM1 and the buffer in SRAM2, say: ``tol_replay_mem`` in model.c, the learners'
``replay_mem`` config). The build passes the choice to model.c as ``TOL_LEARNER_REGION`` (1, 2
or 3) and, for a split, ``TOL_REPLAY_REGION``.

The flash store (docs/persistence.md) is modelled too: :func:`store_layout` gives the slot size
tol_store_init() chooses for the model's largest record and how much of the replay buffer a save
can keep (the firmware leaves the buffer out of a record that does not fit a slot).

This module uses the standard library only: the PlatformIO build script loads it by path.
Sizes are exact (the learner block alone in SRAM2/SRAM3 to the byte); in SRAM1 the linker may
pad between objects by a few bytes, so the fit check keeps ``SLACK_BYTES`` free there (tests/device/test_memory.py links the
firmware with the real arm-none-eabi linker to hold "fits" equal to "links").
"""
from __future__ import annotations

from dataclasses import dataclass, field

KB = 1024
STACK_BYTES = 8 * KB            # TOL_STACK_BYTES in mcu/boards/stm32l4/ld/stm32l4_common.ld
SLACK_BYTES = 16                # SRAM1: alignment padding between objects, on the safe side
FLASH_BASE_BYTES = 40 * KB      # code besides the model (estimate; the build reports the real size)
MAX_CAPACITY = 0xFFFF           # replay capacity is a uint16 on the device
DEFAULT_CAPACITY = 200          # replay capacity without a board to size it for (docs/study.md)
DEFAULT_MAX_OLD = 16            # TOL_LEARNER_DEFAULT_MAX_OLD

# SRAM1 bytes of everything that does not depend on the model (.data, .bss of the HAL, protocol
# cache, learner/store structs, ...), per board and build kind (release, test build), without
# the stack. Measured from the linked firmware by scripts/measure_memory.py (`--check`: exit 1 when
# the firmware changed without this table); tests/device/test_memory.py links configurations at the edge.
# --- measured (scripts/measure_memory.py) ---
FIXED_RAM1 = {
    ('nucleo_l476rg', False): 3736,
    ('nucleo_l476rg', True): 3736,
    ('nucleo_l432kc', False): 3736,
    ('nucleo_l432kc', True): 3736,
    ('disco_l475vg_iot01a', False): 3736,
    ('disco_l475vg_iot01a', True): 3736,
    ('nucleo_l4r5zi', False): 3736,
    ('nucleo_l4r5zi', True): 3736,
}
# --- end measured ---
# A firmware with an adaptive stage (mcu/app/learner_stage.c) reserves this many bytes more in
# SRAM1 (negative: fewer) than FIXED_RAM1: its tol_stage_t instead of the head's tol_learner_t.
# models/digits_adaptive minus models/digits on every board the stage fits, one number: the largest
# (-48 on the L476RG and the B-L475E, -52 on the L4R5ZI since tol_stage_t holds the int16 stage's
# pointer and stage_lr_scale; scripts/measure_memory.py).
FIXED_RAM1_STAGE_DELTA = -48

REGION_TITLES = {"RAM": "SRAM1", "RAM2": "SRAM2", "RAM3": "SRAM3"}
REGION_IDS = {"RAM": 1, "RAM2": 2, "RAM3": 3}


def _a4(n: int) -> int:
    return (n + 3) & ~3


# ---------------------------------------------------------------------------------------------
# sizes of the model-dependent objects (ports of the C macros; tests compare them with C)

def fc_weight_bytes(in_features: int, out_features: int, fmt: str = "int8") -> int:
    """Flash bytes of one FULLY_CONNECTED layer's weights as `tinyol export --fc-weights` stores
    them: int8 (default, one byte per weight) or int16 (pre-widened, tol_fc16_params_t: two
    bytes per weight plus one zero half per depth-tail value of the out % 4 leftover rows)."""
    if fmt == "int8":
        return in_features * out_features
    if fmt == "int16":
        return 2 * in_features * out_features + 2 * (out_features % 4) * (in_features % 4)
    raise ValueError(f"FULLY_CONNECTED weight format {fmt!r}")


def fc_weights_extra(fc_shapes, fmt: str) -> int:
    """Flash bytes `--fc-weights fmt` costs over int8 for layers [(out_features, in_features)]."""
    return sum(fc_weight_bytes(i, o, fmt) - fc_weight_bytes(i, o) for (o, i) in fc_shapes)


def replay_row_bytes(dim: int, bits: int) -> int:
    """TOL_REPLAY_ROW_BYTES (bits > 128: PQ, TOL_REPLAY_PQ(sub), one byte per sub-vector)."""
    if bits > 128:
        return dim // (bits - 128)
    return (4 * dim if bits == 32 else dim if bits == 8 else (dim + 1) // 2 if bits == 4
            else 7 * ((dim + 7) // 8))


def replay_storage(dim: int, bits: int) -> str:
    """How a replay storage is said: '8 bit', '4 bit', 'PQ pq:8 (8 B a latent)'."""
    if bits > 128:
        return f"PQ pq:{dim // (bits - 128)} ({replay_row_bytes(dim, bits)} B a latent)"
    return f"{bits} bit"


def replay_codec_flash(dim: int, bits: int) -> int:
    """Flash bytes of PQ's codebook (replay_codec.c, TOL_REPLAY_PQ_CODEBOOK_BYTES: 256 int8
    codewords per sub-vector, 256 B per latent value); 0 for every other storage (the 4-bit
    grids' 2 B per channel are left to the flash estimate's margin, as before)."""
    return 256 * dim if bits > 128 else 0


def replay_bytes(capacity: int, dim: int, bits: int, n_classes: int) -> int:
    """TOL_REPLAY_BYTES: rows, per-class seen counters, labels, per-class fill counters."""
    return (_a4(capacity * replay_row_bytes(dim, bits)) + 4 * n_classes + _a4(2 * capacity)
            + _a4(2 * n_classes))


def max_old(capacity: int, n_old: int) -> int:
    """The replayed samples per update the firmware makes room for (cfg.max_old in model.c):
    n_old with a buffer (at least 1), none without."""
    return max(n_old, 1) if capacity > 0 else 0


def head_bytes(dim: int, rows: int, batch: int, momentum: bool) -> int:
    """TOL_HEAD_BYTES: W, b, [momentum of both], [the gradient scratch of both when batch > 1],
    scores, batch errors and inputs, active flags."""
    copies = (2 if momentum else 1) + (1 if batch > 1 else 0)
    return 4 * (copies * (rows * dim + rows) + rows + batch * (rows + dim)) + _a4(rows)


def learner_bytes(dim: int, outputs: int, capacity: int, bits: int, n_new: int, n_old: int,
                  momentum: bool) -> int:
    """TOL_LEARNER_BYTES_EX with the max_old and no_momentum model.c passes."""
    mo = max_old(capacity, n_old)
    return (head_bytes(dim, outputs, n_new + mo, momentum)
            + (replay_bytes(capacity, dim, bits, outputs) if capacity else 0)
            + 4 * (dim + 2 * outputs) + _a4(2 * n_new))


# the adaptive stage (tol_stage.h): a layer is a tol_stage_layer_t as a tuple in the C field order
# (kind, act, kh, kw, sh, sw, pt, pl, in_h, in_w, in_c, out_h, out_w, out_c[, train]), as the
# manifest's stage.descriptors and tinyol.learn.stage.Layer.as_tuple() give it (train: 0 all, 1 biases
# only, 2 frozen; absent in exports before the lean stage = 0)
STAGE_DENSE, STAGE_CONV, STAGE_DWCONV, STAGE_GAP = 0, 1, 2, 3


def stage_layer_trained(t) -> int:
    """tol_stage_layer_trained: the parameters of one layer that train (and take RAM)."""
    train = t[14] if len(t) > 14 else 0
    p = stage_layer_params(t)
    if p == 0 or train == 2:
        return 0
    return t[13] if train == 1 else p


def stage_layer_params(t) -> int:
    """tol_stage_layer_params: weights + biases of one layer."""
    kind, kh, kw, in_h, in_w, in_c, out_c = t[0], t[2], t[3], t[8], t[9], t[10], t[13]
    if kind == STAGE_DENSE:
        return out_c * in_h * in_w * in_c + out_c
    if kind == STAGE_CONV:
        return out_c * kh * kw * in_c + out_c
    if kind == STAGE_DWCONV:
        return kh * kw * out_c + out_c
    return 0


def stage_parts(layers, capacity: int, bits: int, n_new: int, momentum: bool) -> dict[str, int]:
    """tol_stage_bytes() part by part (they add up to it): weights (int16 in an int16 stage,
    whose descriptors carry exponents: then no gradients and no momentum), gradients, momentum (only
    with momentum > 0), activations kept for backprop (every layer's output, two delta
    buffers of the largest layer input/output, the probabilities), the queue of n_new fresh
    latents (+ one replayed latent), per-class counters and flags, the replay buffer. The
    batch is processed sample by sample: n_old costs no memory."""
    p = sum(stage_layer_trained(t) for t in layers)  # what does not train stays in flash
    ins = [t[8] * t[9] * t[10] for t in layers]
    outs = [t[11] * t[12] * t[13] for t in layers]
    rows, d, max_new = layers[-1][13], ins[0], n_new
    if any(len(t) > 16 and (t[15] or t[16]) for t in layers):
        # an int16 stage (descriptor exponents wq, bq): int16 weights, no gradient, no momentum
        weights, grads, momentum = _a4(2 * p), 0, False
    else:
        weights, grads = 4 * p, 4 * p
    return {"stage weights": weights, "gradients": grads, "momentum": 4 * p if momentum else 0,
            "activations": 4 * (sum(outs) + 2 * max(ins + outs) + rows),
            "queue": 4 * (max_new * d + d) + _a4(2 * max_new),
            "counters": 4 * rows + _a4(rows),
            "replay buffer": replay_bytes(capacity, d, bits, rows) if capacity else 0}


def stage_bytes(layers, capacity: int, bits: int, n_new: int, momentum: bool) -> int:
    """tol_stage_bytes() with the configuration mcu/embed/tinyol_stage.c fills (tinyol_stage_config)."""
    return sum(stage_parts(layers, capacity, bits, n_new, momentum).values())


def _wire_max(payload: int) -> int:
    n = payload + 10  # TOL_PROTO_OVERHEAD
    return n + n // 254 + 1 + 1  # TOL_COBS_ENCODED_MAX + delimiter


def app_bytes(input_size: int, latent_dim: int, stats_classes: int) -> int:
    """sizeof(tol_server_t) (mcu/include/tol_server.h): receive/reply buffers sized by the model."""
    float_input = 4 * input_size + 3 <= 8192
    max_request = max(256, 3 + (4 if float_input else 1) * input_size)
    max_reply = max(512, 128 + 6 * stats_classes, latent_dim + 16)
    off = _wire_max(max_request)                  # rx
    off = _a4(off) + 4 + 1                        # rx_len, rx_overflow
    off += (max_reply + 10) + _wire_max(max_reply)  # scratch, tx
    off = _a4(off) + 4                            # tx_len
    off += 8 * 60                                 # reply cache (8 x {seq, crc, len, wire[48]})
    off += 1                                      # cache_next
    off = _a4(off) + 2 * 8                        # seqs[2] (handled u32, newest u16, used u16): the order check
    off = _a4(off) + 16 + 4                       # link stats, boot_cycles
    off += 4                                      # model: the application's tol_model_if_t *
    return _a4(off)


# ---------------------------------------------------------------------------------------------

@dataclass
class Model:
    """What the memory depends on: the exported model and the learner's configuration."""
    input_size: int
    latent_dim: int
    outputs: int                 # classifier: max classes; autoencoder: output size
    autoencoder: bool
    arena_bytes: int
    replay_capacity: int
    replay_bits: int = 8
    n_new: int = 1
    n_old: int = 16
    momentum: bool = False       # momentum > 0: the firmware keeps momentum buffers
    flash_model_bytes: int = 0   # weights + head init (flash estimate)
    stage: tuple | None = None   # adaptive stage layers (stage_layer_params' tuples); None: the head

    @classmethod
    def from_manifest(cls, m: dict, **override) -> "Model":
        L, mem, head = m["learner"], m["memory"], m["head"]
        ae = head["mode"] == "autoencoder"
        kw = dict(input_size=int(m["input"]["size"]), latent_dim=int(m["latent"]["dim"]),
                  outputs=int(head["out_dim"] if ae else head["max_classes"]), autoencoder=ae,
                  arena_bytes=int(mem["arena_bytes"]), replay_capacity=int(L["replay_capacity"]),
                  replay_bits=int(L["replay_bits"]), n_new=int(L["replay_n_new"]),
                  n_old=int(L["replay_n_old"]), momentum=float(L["momentum"]) != 0.0,
                  flash_model_bytes=int(mem.get("weights_bytes", 0)) + int(mem.get("head_init_bytes", 0)))
        if m.get("stage"):
            kw["stage"] = tuple(tuple(int(v) for v in t) for t in m["stage"]["descriptors"])
        kw.update(override)
        return cls(**kw)

    def learner(self) -> int:
        if self.stage:
            return stage_bytes(self.stage, self.replay_capacity, self.replay_bits, self.n_new,
                               self.momentum)
        return learner_bytes(self.latent_dim, self.outputs, self.replay_capacity, self.replay_bits,
                             self.n_new, self.n_old, self.momentum)

    @property
    def stage_params(self) -> int:
        return sum(stage_layer_params(t) for t in self.stage) if self.stage else 0

    def parts(self) -> dict[str, int]:
        """The learner block's parts (they add up to learner())."""
        if self.stage:
            return stage_parts(self.stage, self.replay_capacity, self.replay_bits, self.n_new,
                               self.momentum)
        mo = max_old(self.replay_capacity, self.n_old)
        d, c = self.latent_dim, self.outputs
        out = {"head weights": 4 * (c * d + c),
               "momentum": 4 * (c * d + c) if self.momentum else 0,
               "gradient rows": 4 * (self.n_new + mo) * (c + d),
               "gradient scratch": 4 * (c * d + c) if self.n_new + mo > 1 else 0,
               "replay buffer": (replay_bytes(self.replay_capacity, d, self.replay_bits, c)
                                 if self.replay_capacity else 0)}
        out["learner scratch"] = self.learner() - sum(out.values())
        return out


@dataclass
class Region:
    name: str                    # linker region: RAM, RAM2, RAM3
    size: int
    items: dict[str, int] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return REGION_TITLES.get(self.name, self.name)

    @property
    def used(self) -> int:
        return sum(self.items.values())

    @property
    def over(self) -> int:
        """Bytes over the region's size (SRAM1: with the padding slack); <= 0 when it fits."""
        return self.used + (SLACK_BYTES if self.name == "RAM" else 0) - self.size


@dataclass
class Plan:
    board: str
    model: Model
    regions: list[Region]
    learner_region: str          # the learner block (head or stage, scratch, counters)
    flash_needed: int            # estimate
    flash_room: int              # flash minus the persistence store
    replay_region: str = ""      # the replay buffer's region: learner_region unless split

    def __post_init__(self):
        self.replay_region = self.replay_region or self.learner_region

    @property
    def split(self) -> bool:
        """The replay buffer lives in another region than the rest of the learner."""
        return self.replay_region != self.learner_region

    @property
    def replay_region_id(self) -> int:
        return REGION_IDS[self.replay_region]

    @property
    def fits(self) -> bool:
        return all(r.over <= 0 for r in self.regions)

    @property
    def over(self) -> tuple[str, int]:
        r = max(self.regions, key=lambda r: r.over)
        return r.title, r.over

    @property
    def learner_region_id(self) -> int:
        return REGION_IDS[self.learner_region]

    def lines(self) -> list[str]:
        out = []
        for r in self.regions:
            parts = ", ".join(f"{k} {v}" for k, v in r.items.items() if v)
            state = (f"over by {r.over} bytes" if r.over > 0 else f"{r.size - r.used} free")
            out.append(f"{r.title:<6} {r.used:>7} / {r.size:>7} bytes ({state}): {parts or 'empty'}")
        learner = ", ".join(f"{k} {v}" for k, v in self.model.parts().items() if v)
        what = "learner (adaptive stage)" if self.model.stage else "learner"
        where = REGION_TITLES[self.learner_region]
        if self.split:
            where += f", its replay buffer in {REGION_TITLES[self.replay_region]}"
        out.append(f"{what} {self.model.learner()} bytes in {where}: {learner}")
        book = (replay_codec_flash(self.model.latent_dim, self.model.replay_bits)
                if self.model.replay_capacity else 0)
        book = f", the PQ codebook {book} of them" if book else ""
        out.append(f"flash  ~{self.flash_needed} / {self.flash_room} bytes (estimate{book}; the last "
                   f"1/8 of flash holds the saved state)")
        return out

    def advice(self) -> str:
        """Which knobs to turn, the biggest contributor first."""
        m = self.model
        p = m.parts()
        tips = []
        if m.stage:
            last_in = m.stage[-1][8] * m.stage[-1][9] * m.stage[-1][10]
            per = 4 * (last_in + 1) * (3 if m.momentum else 2)
            trained = sum(stage_layer_trained(t) for t in m.stage)
            lean = "" if trained < m.stage_params else " or --stage-train bias (what does not train stays in flash)"
            tips.append((p["stage weights"] + p["gradients"],
                         f"cut later (--split nearer the head){lean}: the adaptive stage's "
                         f"{trained} trained parameters take {p['stage weights'] + p['gradients']} B "
                         f"(weights + gradients)"))
            tips.append((per * m.outputs, f"lower --max-classes (now {m.outputs}: {per} B per class)"))
        if p["replay buffer"]:
            tips.append((p["replay buffer"], f"lower --replay-capacity (now {m.replay_capacity}, "
                                             f"{replay_row_bytes(m.latent_dim, m.replay_bits) + 2} B "
                                             f"each) or use --replay-bits 7"))
        if p["momentum"]:
            tips.append((p["momentum"], f"export with --momentum 0 (saves {p['momentum']} B)"))
        if m.n_old > 1 and m.replay_capacity and not m.stage:
            tips.append((p["gradient rows"], f"lower --replay-n-old (now {m.n_old}: "
                                             f"{4 * (m.outputs + m.latent_dim)} B per row)"))
        if m.stage:
            pass
        elif m.autoencoder:
            tips.append((p["head weights"], f"use a smaller latent (the head is {m.latent_dim} x "
                                            f"{m.outputs} floats: {p['head weights']} B)"))
        else:
            tips.append((p["head weights"], f"lower --max-classes (now {m.outputs}: "
                                            f"{4 * (m.latent_dim + 1)} B per class)"))
        arena = f"arena {m.arena_bytes} B, " if m.arena_bytes else ""
        tips.append((m.arena_bytes + 2 * m.input_size, f"use a smaller backbone or input ({arena}"
                                                      f"input {m.input_size} B)"))
        tips.sort(key=lambda t: -t[0])
        return "; or ".join(t[1] for t in tips)


def board_regions(board) -> dict[str, int]:
    """Region sizes of a tinyol.boards.Board."""
    r = {"RAM": board.ram_bytes, "RAM2": board.ram2_bytes}
    if getattr(board, "ram3_bytes", 0):
        r["RAM3"] = board.ram3_bytes
    return r


def plan(model: Model, board: str, regions: dict[str, int], *, flash_bytes: int = 0,
         test_build: bool = False, learner_region: str | None = None,
         replay_region: str | None = None) -> Plan:
    """Where everything goes on `board` (regions: name -> bytes). The learner goes whole to the
    largest extra region (SRAM3, SRAM2) where it fits, else to SRAM1; when it fits nowhere whole,
    its replay buffer goes to a region of its own (the rest of the learner in the largest region
    where it fits, the buffer in the largest other one). The plan of the first placement that fits
    is returned, or the one that misses by the fewest bytes. learner_region / replay_region force
    a placement (the linker tests)."""
    fixed = (FIXED_RAM1.get((board, test_build), max(FIXED_RAM1.values()))
             + (FIXED_RAM1_STAGE_DELTA if model.stage else 0))
    stats_classes = 0 if model.autoencoder else model.outputs
    base = {"firmware": fixed, "stack": STACK_BYTES,
            "protocol buffers": app_bytes(model.input_size, model.latent_dim, stats_classes),
            "input + latent": model.input_size + model.latent_dim, "arena": model.arena_bytes}
    names = sorted((n for n in regions if n != "RAM"), key=lambda n: -regions[n]) + ["RAM"]
    replay = model.parts()["replay buffer"]
    if learner_region:
        order = [(learner_region, replay_region or learner_region)]
    else:  # whole first, as before; then split (only with a buffer to split off)
        order = [(n, n) for n in names] + ([(a, b) for a in names for b in names if a != b]
                                           if replay and len(names) > 1 else [])
    flash_room = flash_bytes - flash_bytes // 8
    flash_needed = (model.flash_model_bytes + FLASH_BASE_BYTES
                    + (replay_codec_flash(model.latent_dim, model.replay_bits)
                       if model.replay_capacity else 0))
    best = None
    for where, rwhere in order:
        regs = [Region(n, regions[n], dict(base) if n == "RAM" else {}) for n in regions]
        if where == rwhere:
            next(r for r in regs if r.name == where).items["learner"] = model.learner()
        else:
            next(r for r in regs if r.name == where).items["learner"] = model.learner() - replay
            next(r for r in regs if r.name == rwhere).items["replay buffer"] = replay
        p = Plan(board, model, regs, where, flash_needed, flash_room, rwhere)
        if p.fits:
            return p
        if best is None or p.over[1] < best.over[1]:
            best = p
    return best


def largest_capacity(model: Model, board: str, regions: dict[str, int], *,
                     test_build: bool = False, limit: int = MAX_CAPACITY) -> int:
    """The largest replay capacity (<= limit) with which `model` fits; -1 if none does, not even 0."""
    def fits(c):
        model.replay_capacity = c
        return plan(model, board, regions, test_build=test_build).fits

    saved = model.replay_capacity
    try:
        if not fits(0):
            return -1
        lo, hi = 0, limit
        if fits(hi):
            return hi
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo
    finally:
        model.replay_capacity = saved


# ---------------------------------------------------------------------------------------------
# the flash store (mcu/src/tol_store.c, mcu/include/tol_persist.h, mcu/app/learner_stage.c)

STORE_HEADER_BYTES = 40          # TOL_STORE_HEADER_BYTES
STORE_MAX_SLOTS = 64             # TOL_STORE_MAX_SLOTS
LEARNER_STATE_HEADER = 104       # TOL_LEARNER_STATE_HEADER
STAGE_STATE_HEADER = 72          # TOL_STAGE_STATE_HEADER


def state_bytes(model: Model, *, replay_fill: int | None = None, momentum: bool | None = None,
                queued: int = 0) -> int:
    """A learner state's bytes as SAVE writes it (tol_learner_state_* / tol_stage_state_*): with
    the replay buffer holding `replay_fill` latents (None: no buffer in the record), momentum
    buffers when momentum (default: the model's), `queued` fresh latents waiting for a batch."""
    mom = model.momentum if momentum is None else momentum
    d = model.latent_dim
    if model.stage:
        rows = model.stage[-1][13]
        trained = sum(stage_layer_trained(t) for t in model.stage)
        n = STAGE_STATE_HEADER + 4 * trained * (2 if mom else 1) + 5 * rows
    else:
        rows = model.outputs
        n = LEARNER_STATE_HEADER + 4 * (rows * d + rows) * (2 if mom else 1) + 5 * rows
    n += queued * (4 * d + 2)
    if replay_fill is not None and model.replay_capacity:
        n += replay_fill * (replay_row_bytes(d, model.replay_bits) + 2) + 6 * rows
    return n


def record_max(model: Model) -> int:
    """The largest record (header + the largest state: momentum, a full queue, a full buffer):
    TOL_PERSIST_RECORD_MAX / tol_model_learner_record_max(), the slot size the store asks for."""
    return STORE_HEADER_BYTES + state_bytes(model, replay_fill=model.replay_capacity,
                                            momentum=True, queued=model.n_new)


def default_store_bytes(flash_bytes: int) -> int:
    """TOL_STORE_BYTES's default: the last 1/8 of flash (stm32l4_common.ld)."""
    return flash_bytes // 8


@dataclass
class StoreLayout:
    store_bytes: int             # the region
    page_bytes: int
    slot_bytes: int
    slots: int
    record_max: int              # what the store sizes its slots for
    full_record: int             # header + state with a full buffer (momentum as exported, no queue)
    head_record: int             # header + state without the buffer
    replay_capacity: int
    replay_saved: int            # latents a save keeps at most (capacity when it fits whole)

    @property
    def whole(self) -> bool:
        """A save keeps everything, the full replay buffer included."""
        return self.replay_saved >= self.replay_capacity

    @property
    def capacity(self) -> int:
        """Payload bytes a slot holds (tol_store_capacity)."""
        return self.slot_bytes - STORE_HEADER_BYTES

    def store_bytes_for_whole(self) -> int:
        """The smallest TOL_STORE_BYTES (a multiple of two pages) whose slots hold the state with
        a full replay buffer: two slots of it (tol_store_init makes at least two)."""
        slot = -(-self.full_record // self.page_bytes) * self.page_bytes
        need = 2 * slot
        return -(-need // (2 * self.page_bytes)) * (2 * self.page_bytes)

    stage: bool = False          # an adaptive stage (what stays when the buffer does not)

    def line(self) -> str:
        rest = "the stage" if self.stage else "the head"
        if self.whole:
            return (f"store: {self.slots} slots of {self.slot_bytes} bytes in {self.store_bytes}; a save "
                    f"keeps everything ({self.full_record} bytes with a full replay buffer)")
        if self.head_record > self.slot_bytes:
            return (f"store: a slot of {self.slot_bytes} bytes cannot hold even {rest} "
                    f"({self.head_record} bytes): SAVE will fail")
        return (f"store: {self.slots} slots of {self.slot_bytes} bytes in {self.store_bytes}; a save keeps "
                f"the replay buffer only while it holds at most {self.replay_saved} of its "
                f"{self.replay_capacity} latents ({self.full_record} bytes when full), then {rest} "
                f"alone ({self.head_record} bytes)")

    def advice(self, model: Model) -> str:
        return (f"build with a larger store (TOL_STORE_BYTES={self.store_bytes_for_whole()}: "
                f"`tinyol build --store-bytes {self.store_bytes_for_whole()}`) or export with "
                f"--replay-capacity {self.replay_saved} (a buffer a slot holds whole)")


def store_layout(model: Model, flash_bytes: int, page_bytes: int, store_bytes: int | None = None) -> StoreLayout:
    """The slots tol_store_init() makes for `model` in a store of store_bytes (default: the last
    1/8 of flash) and what a save keeps: tol_persist_save / learner_stage.c leave the replay
    buffer out of a state that does not fit a slot."""
    region = default_store_bytes(flash_bytes) if store_bytes is None else store_bytes
    rmax = record_max(model)
    slot = -(-rmax // page_bytes) * page_bytes
    if slot == 0 or slot > region // 2:
        slot = region // 2 // page_bytes * page_bytes
    slots = min(region // slot, STORE_MAX_SLOTS) if slot else 0
    cap = slot - STORE_HEADER_BYTES
    full = STORE_HEADER_BYTES + state_bytes(model, replay_fill=model.replay_capacity)
    head = STORE_HEADER_BYTES + state_bytes(model)
    if not model.replay_capacity:
        saved = 0
    else:
        per = replay_row_bytes(model.latent_dim, model.replay_bits) + 2
        base = state_bytes(model, replay_fill=0)
        saved = max(0, min(model.replay_capacity, (cap - base) // per)) if cap >= base else 0
    return StoreLayout(region, page_bytes, slot, slots, rmax, full, head, model.replay_capacity, saved,
                       bool(model.stage))
