"""`--stage-train auto`: what of the adaptive stage trains, chosen from data at export
(docs/adaptive.md, "Choosing what trains from data"). C twin: none (host only; the choice is
an ordinary `--stage-train LAYER:MODE,...` spec, which tol_stage.c runs as if given by hand).

Contribution analysis after Lin et al. (2022): for every layer below the classifier, the gain
in accuracy that training its biases, or its weights and biases, brings over training the
classifier alone, measured with the stage's numpy twin (tinyol.learn.stage, bit-identical with
the device, the mean over ORDERS stream orders) on the task the device will face: learning new classes from one pass over a stream
with the known classes in its replay buffer. The new classes are the labelled data's classes
the network does not know yet (`--stage-data`) when it has any; else some known classes are
left out (their classifier rows start at zero, as a new class's row does on the device).
Accuracy is taken on held-out halves of every class. A candidate's cost is the RAM it adds by
tinyol.memory (weights, gradients and momentum of what trains). The choice is greedy on gain
per byte, gains taken as additive (Lin et al.'s assumption; they search, we have at most 15
layers), gains below MIN_GAIN left out as noise, each step kept only if the whole firmware
still fits the board (the caller's ``fits``: tinyol.memory's board plan, the one the linker is
held to) and the optional budget.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..errors import TinyolError
from ..learn import learner as L
from ..learn.stage import (
    LINEAR,
    TRAIN_ALL,
    TRAIN_BIAS,
    TRAIN_FROZEN,
    TRAINS,
    Layer,
    Stage,
    StageConfig,
)

MAX_SAMPLES_PER_CLASS = 200  # of the calibration data, per class (a fixed-seed draw)
MIN_GAIN = 0.005  # a gain below half a point of accuracy is taken as noise
ORDERS = 3  # stream orders each configuration is measured on (the mean is its accuracy)
_MODE_RANK = {TRAIN_FROZEN: 0, TRAIN_BIAS: 1, TRAIN_ALL: 2}


@dataclasses.dataclass(frozen=True)
class Task:
    """The task the candidates are measured on (int8 latents). Every class's samples are split
    by position (file order): the first half trains (the kept classes' in the replay buffer,
    the new classes' streamed once), the next quarter is the validation part the choice is made
    on, the last quarter the test part the expected accuracy is reported on (never used to
    choose). By position, not at random, so that overlapping windows of one recording do not
    land on both sides of a split."""

    prefill: tuple[np.ndarray, np.ndarray]   # the kept classes' training part -> replay
    stream: tuple[np.ndarray, np.ndarray]    # the "new" classes' training part, in order
    val: tuple[np.ndarray, np.ndarray]       # the validation part of every class (choose)
    test: tuple[np.ndarray, np.ndarray]      # the test part of every class (report)
    order: np.ndarray                        # classifier row of each task label (kept first)
    n_kept: int
    held_out: tuple[int, ...]                # the original labels that play the new classes
    truly_new: bool = False                  # they are classes the network does not know
    index: dict = dataclasses.field(default_factory=dict)  # part -> indices into the latents

    def over(self, Q: np.ndarray) -> "Task":
        """The same task (same samples, parts and order) over other latents of those samples
        (e.g. the last layer's input instead of the cut's)."""
        parts = {k: (Q[i], getattr(self, k)[1]) for k, i in self.index.items()}
        return dataclasses.replace(self, **parts)


def make_task(Q: np.ndarray, y: np.ndarray, n_known: int, n_rows: int, seed: int) -> Task:
    """Split labelled int8 latents into the task. Labels n_known..n_rows-1 (classes the
    network does not know yet, rows that start at zero on the device) are the new classes
    when the data has any: the known ones fill the replay buffer. Without them, leave classes
    out: a third of the known classes (at least one, a seeded draw) play the new ones. Every
    class's samples are split by position: half trains, a quarter validates, a quarter tests.
    Raises TinyolError when the data has fewer than two usable classes."""
    y = np.asarray(y, np.int64)
    known = [c for c in range(n_known) if np.sum(y == c) >= 4]
    new = [c for c in range(n_known, n_rows) if np.sum(y == c) >= 4]
    if not known or (not new and len(known) < 2):
        raise TinyolError("--stage-train auto needs labelled data of at least two classes, one the "
                          f"model knows (rows 0..{n_known - 1}), four samples each",
                          hint="give --calib (or --stage-data) a labelled source, e.g. "
                               "digits:0-4@train, or name what trains: --stage-train bias")
    rng = np.random.default_rng(seed)
    if new:
        held, kept = new, known
    else:
        n_out = max(1, len(known) // 3)
        held = sorted(int(c) for c in rng.choice(known, n_out, replace=False))
        kept = [c for c in known if c not in held]
    order = np.array(kept + held + [c for c in range(n_rows) if c not in kept + held], np.int64)
    relabel = np.empty(n_rows, np.int64)
    relabel[order] = np.arange(n_rows)
    tr, va, te = [], [], []
    for c in kept + held:
        idx = np.flatnonzero(y == c)[:MAX_SAMPLES_PER_CLASS]   # file order
        h, q = len(idx) // 2, (3 * len(idx)) // 4
        tr.append(idx[:h])
        va.append(idx[h:q])
        te.append(idx[q:])
    tr_i, va_i, te_i = np.concatenate(tr), np.concatenate(va), np.concatenate(te)
    is_held = np.isin(y[tr_i], held)
    pre_i = rng.permutation(tr_i[~is_held])
    st_i = rng.permutation(tr_i[is_held])
    index = {"prefill": pre_i, "stream": st_i, "val": va_i, "test": te_i}
    return Task((Q[pre_i], relabel[y[pre_i]]), (Q[st_i], relabel[y[st_i]]),
                (Q[va_i], relabel[y[va_i]]), (Q[te_i], relabel[y[te_i]]), order, len(kept),
                tuple(held), bool(new), index)


SATURATED = 0.99  # the classifier alone at or above this on the validation part: nothing can gain


def saturation_error(task: Task, acc0: float, src: str, n_known: int, n_rows: int) -> TinyolError:
    """The error `--stage-train auto` stops with when its task cannot tell candidates apart:
    the classifier alone already scores ``acc0`` >= SATURATED on held-out samples."""
    held = ", ".join(str(c) for c in task.held_out)
    new_rows = (f"labels {n_known}..{n_rows - 1}" if n_rows - n_known > 1 else f"label {n_known}")
    if task.truly_new:
        return TinyolError(
            f"--stage-train auto: the last layer already separates the new classes of {src}: the "
            f"classifier alone scores {100 * acc0:.1f}% on their held-out samples, so no deeper "
            "layer can show a gain",
            hint="export without --split (the last layer learns alone, with the most replay slots), "
                 "or name what trains: --stage-train bias|all|LAYER")
    more = (f"give --stage-data a labelled source with samples of the classes the device will "
            f"learn ({new_rows}, --max-classes {n_rows}), recorded apart from the pre-training data"
            if n_rows > n_known else
            f"export with --max-classes above {n_known} and give --stage-data labelled samples of "
            "the new classes")
    return TinyolError(
        f"--stage-train auto: its task is saturated: with class{'es' if len(task.held_out) > 1 else ''} "
        f"{held} of {src} left out, the classifier alone already scores {100 * acc0:.1f}% on held-out "
        "samples (the network was trained on these classes: every candidate would score the same), so "
        "it measured nothing to choose on",
        hint=f"{more}; or name what trains: --stage-train bias|all|LAYER")


def permute_rows(layers: list[Layer], params: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The flat parameters with the classifier's rows in ``order`` (row r <- row order[r])."""
    last = layers[-1]
    off = params.size - last.n_params
    W = params[off:off + last.n_weights].reshape(last.out_c, last.in_size)[order]
    b = params[off + last.n_weights:][order]
    return np.concatenate([params[:off], W.ravel(), b]).astype(np.float32)


def run_task(layers: list[Layer], params: np.ndarray, task: Task, *, latent_q: tuple[float, int],
             settings: L.Settings, capacity: int, bits: int, seed: int, orders: int = ORDERS,
             part: str = "val", codec=None, stage_lr_scale: float = 0.0) -> float:
    """Accuracy on the task's ``part`` ("val" or "test") after the twin (init: the kept classes
    active, the held-out ones at zero) learned the stream with the kept classes in its replay
    buffer: the mean over ``orders`` stream orders (the task's, then seeded shuffles; replay
    seed + k). ``layers`` may be an int16 stage (tinyol.learn.stage.int16_stage, with its
    rounded ``params``); ``stage_lr_scale``: the export's --stage-lr-scale."""
    return float(np.mean([_run_once(layers, params, task, latent_q=latent_q, settings=settings,
                                    capacity=capacity, bits=bits, seed=seed, order=k, part=part,
                                    codec=codec, stage_lr_scale=stage_lr_scale)
                          for k in range(orders)]))


def run_last_layer(W: np.ndarray, b: np.ndarray, task: Task, *, latent_q: tuple[float, int],
                   settings: L.Settings, capacity: int, bits: int, seed: int, orders: int = ORDERS,
                   part: str = "val", codec=None) -> float:
    """:func:`run_task` for the one-layer learner (the last layer alone, tinyol.learn.learner,
    the twin of tol_learner.c): ``task`` over the latents at the head's input (Task.over),
    W [rows][dim] and b [rows] the head with its rows grown to the device's."""
    order = task.order
    return float(np.mean([_run_once(None, (np.asarray(W, np.float32)[order],
                                           np.asarray(b, np.float32)[order]), task,
                                    latent_q=latent_q, settings=settings, capacity=capacity,
                                    bits=bits, seed=seed, order=k, part=part, codec=codec)
                          for k in range(orders)]))


def _learner(layers, params, task: Task, *, latent_q, settings, capacity, bits, seed, codec=None,
             stage_lr_scale: float = 0.0):
    s = dataclasses.replace(settings, rehearse=0)
    common = dict(init_classes=task.n_kept, latent_scale=latent_q[0],
                  latent_zero_point=latent_q[1], replay_capacity=capacity, replay_bits=bits,
                  replay_codec=codec if bits == 4 else None,
                  max_new=s.n_new, max_old=s.n_old, no_momentum=s.momentum == 0,
                  seed=seed & 0xFFFFFFFF, settings=s)
    if layers is None:  # the last layer alone
        W, b = params
        return L.Learner(L.Config(W.shape[1], W.shape[0], init_weight=W, init_bias=b, **common))
    return Stage(StageConfig(layers=layers, init_params=permute_rows(layers, params, task.order),
                             stage_lr_scale=stage_lr_scale, **common))


def _run_once(layers, params, task: Task, *, latent_q, settings, capacity, bits, seed,
              order, part="val", codec=None, stage_lr_scale: float = 0.0) -> float:
    st = _learner(layers, params, task, latent_q=latent_q, settings=settings, capacity=capacity,
                  bits=bits, seed=seed + order, codec=codec, stage_lr_scale=stage_lr_scale)
    if st.replay is not None:
        for q, t in zip(*task.prefill):
            st.replay_add(q, int(t))
    Qs, ys = task.stream
    perm = (np.arange(len(ys)) if order == 0
            else np.random.default_rng([seed, order]).permutation(len(ys)))
    for q, t in zip(Qs[perm], ys[perm]):
        st.learn(q, int(t))
    Qt, yt = getattr(task, part)
    X = L.dequantize(Qt, *latent_q)
    pred = np.array([st.predict_f(x)[0] for x in X])
    return float(np.mean(pred == yt))


@dataclasses.dataclass
class Row:
    """One line of the contribution table."""

    layer: str
    mode: str          # "bias" or "all" (weights and biases)
    params: int        # parameters it trains
    bytes: int         # RAM it adds over the layer frozen (tinyol.memory)
    accuracy: float
    gain: float        # over the classifier alone


def _with(layers: list[Layer], modes: dict[int, int]) -> list[Layer]:
    return [dataclasses.replace(l, train=modes.get(i, l.train)) for i, l in enumerate(layers)]


def select(layers: list[Layer], names: list[str], measure: Callable[[list[Layer]], float],
           ram: Callable[[list[Layer]], int], fits: Callable[[list[Layer]], bool],
           echo: Callable[[str], None] = lambda s: None,
           on_baseline: Callable[[float], None] = lambda a: None) -> tuple[str, list[Row], dict]:
    """The spec (for :func:`tinyol.model.stage_export.apply_train`), its table and a summary.
    ``measure(layers)``: accuracy of a stage with those train modes; ``ram(layers)``: its
    learner bytes; ``fits(layers)``: whether the firmware with it fits the board. Every layer
    below the classifier starts frozen; raises TinyolError if even that does not fit.
    ``on_baseline(acc)``: called with the classifier alone's accuracy before any other run (it
    raises when the task is saturated: nothing else is then measured)."""
    cand = [i for i, l in enumerate(layers[:-1]) if l.kind in LINEAR]
    base_modes = {i: TRAIN_FROZEN for i in cand}
    base = _with(layers, base_modes)
    if not fits(base):
        raise TinyolError("--stage-train auto: nothing fits the board: the classifier alone "
                          f"({ram(base)} B of learner RAM with the requested replay slots) is "
                          "already over", hint="lower --replay-capacity or --max-classes, cut later "
                                               "(--split nearer the head), or use a larger --board")
    runs = 1 + 2 * len(cand)
    echo(f"stage-train auto: measuring {runs} configurations on the twin, {ORDERS} stream orders "
         f"each (1/{runs}: classifier alone)")
    acc0 = measure(base)
    on_baseline(acc0)
    rows: list[Row] = []
    gain: dict[tuple[int, int], float] = {}
    k = 1
    for i in cand:
        for mode in (TRAIN_BIAS, TRAIN_ALL):
            k += 1
            echo(f"stage-train auto: {k}/{runs}: {names[i]} {TRAINS[mode]}")
            cfg = _with(layers, {**base_modes, i: mode})
            a = measure(cfg)
            gain[i, mode] = a - acc0
            rows.append(Row(names[i], TRAINS[mode], cfg[i].n_train, ram(cfg) - ram(base), a,
                            a - acc0))
    cur = dict(base_modes)
    picked: list[str] = []
    while True:
        best = None
        for i in cand:
            g_cur = gain.get((i, cur[i]), 0.0)
            for mode in (TRAIN_BIAS, TRAIN_ALL):
                if _MODE_RANK[mode] <= _MODE_RANK[cur[i]]:
                    continue
                dg = gain[i, mode] - g_cur
                if gain[i, mode] < MIN_GAIN or dg <= 0:
                    continue
                trial = _with(layers, {**cur, i: mode})
                db = ram(trial) - ram(_with(layers, cur))
                score = dg / max(db, 1)
                if (best is None or score > best[0]) and fits(trial):
                    best = (score, i, mode)
        if best is None:
            break
        _, i, mode = best
        cur[i] = mode
        picked.append(f"{names[i]}:{TRAINS[mode]}")
    spec = ",".join(f"{names[i]}:{TRAINS[cur[i]]}" for i in cand)
    chosen = _with(layers, cur)
    est = acc0 + sum(gain.get((i, cur[i]), 0.0) for i in cand)
    summary = {"spec": spec, "baseline_accuracy": acc0, "estimated_accuracy": est,
               "measured_accuracy": None, "learner_bytes": ram(chosen),
               "baseline_learner_bytes": ram(base), "order": picked}
    return spec, rows, summary


def table_lines(rows: list[Row], acc0: float) -> list[str]:
    """The contribution table as printed by the export."""
    out = [f"{'layer':<16} {'trains':<7} {'params':>7} {'+RAM (B)':>9} {'accuracy':>9} {'gain':>7} "
           f"{'gain/KB':>8}",
           f"{'(classifier)':<16} {'-':<7} {'':>7} {'':>9} {100 * acc0:>8.1f}% {'':>7} {'':>8}"]
    for r in rows:
        per_kb = 1024 * 100 * r.gain / max(r.bytes, 1)
        out.append(f"{r.layer:<16} {r.mode:<7} {r.params:>7} {r.bytes:>9} {100 * r.accuracy:>8.1f}% "
                   f"{100 * r.gain:>+6.1f}  {per_kb:>+8.2f}")
    return out


def least(layers: list[Layer]) -> list[Layer]:
    """The least a stage can train: the classifier alone (every other layer frozen)."""
    return [dataclasses.replace(l, train=TRAIN_FROZEN) if l.kind in LINEAR and i < len(layers) - 1
            else l for i, l in enumerate(layers)]


def check_least(model, plan, replay_slots: int, budget: int | None) -> None:
    """Refuse `--stage-train auto` before quantizing when even the classifier alone does not
    fit: ``model`` (tinyol.memory.Model with :func:`least`'s stage), ``plan`` its board plan."""
    if not plan.fits:
        where, over = plan.over
        raise TinyolError(f"--stage-train auto: nothing fits: with only the classifier training "
                          f"and {replay_slots} replay slots, {where} is over by at least {over} bytes",
                          hint="give fewer --replay-capacity slots, lower --max-classes, cut later "
                               "(--split nearer the head) or choose a larger --board")
    own = model.learner() - model.parts()["replay buffer"]
    if budget is not None and own > budget:
        raise TinyolError(f"--stage-train auto: nothing fits --stage-budget {budget} B: the stage "
                          f"with only the classifier training takes {own} B (without replay)",
                          hint="raise --stage-budget, or cut later (--split nearer the head)")


def subsample(y: np.ndarray, n_rows: int, seed: int) -> np.ndarray:
    """Indices of up to MAX_SAMPLES_PER_CLASS samples of each known class (labels < n_rows),
    a fixed-seed draw, in ascending order."""
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    keep = [rng.permutation(np.flatnonzero(y == c))[:MAX_SAMPLES_PER_CLASS] for c in range(n_rows)]
    return np.sort(np.concatenate(keep)).astype(np.int64)


def latents(tfl: bytes, X: np.ndarray, inp, lat) -> np.ndarray:
    """int8 backbone outputs [N, D] of float inputs X, quantized as the host sends them, in
    TFLM's own runtime (the bit-exact oracle of the device's backbone)."""
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        raise TinyolError("--stage-train auto runs the backbone in TFLM's Python runtime",
                          hint="pip install --pre tflite-micro (the 'ml' extra)") from None
    interp = runtime.Interpreter.from_bytes(tfl)
    scale, zp = np.float32(inp.scale), int(inp.zero_point)
    Xq = np.clip(np.round(np.asarray(X, np.float32) / scale) + zp, -128, 127).astype(np.int8)
    out = np.empty((len(Xq), int(np.prod(lat.shape[1:]))), np.int8)
    for i, x in enumerate(Xq):
        interp.set_input(x.reshape((1,) + x.shape), 0)
        interp.invoke()
        out[i] = interp.get_output(0).reshape(-1)
    return out
