"""An export's memory plan: what is being exported as a :class:`tinyol.memory.Model`, placed on
one board (a :class:`tinyol.boards.Board` the caller resolved once), checked, and written down
as the manifest's "memory" numbers.

The numbers themselves come from :mod:`tinyol.memory`, the one memory model the firmware build
(mcu/platform/common/tinyol_build.py) and `tinyol info` share; this module only asks it the
questions an export asks: does it fit (:func:`check_fit`), how many replay slots fit
(:func:`max_replay_slots`, :func:`choose_replay_capacity`), what does a SAVE keep
(:func:`warn_store`), what goes into the manifest (:func:`budget`). A plan is the larger of the
release and the test build (the test build's firmware reserves as much or more).
"""
from __future__ import annotations

from typing import Callable

from .. import memory
from ..boards import BOARDS, Board
from ..errors import TinyolError
from ..memory import Model

Echo = Callable[[str], None]


def memory_model(*, input_size: int, dim: int, rows: int, autoencoder: bool, arena_bytes: int,
                 replay_capacity: int, replay_bits: int, replay_n_new: int, replay_n_old: int,
                 momentum: float, flash_model_bytes: int = 0, stage=None) -> Model:
    """A tinyol.memory.Model; stage: the adaptive stage's layers (tinyol.learn.stage.Layer or C-order
    tuples, the last one grown to `rows`), None for the one-layer head."""
    if stage is not None:
        stage = tuple(tuple(l.as_tuple()) if hasattr(l, "as_tuple") else tuple(l) for l in stage)
    return Model(input_size=input_size, latent_dim=dim, outputs=rows, autoencoder=autoencoder,
                 arena_bytes=arena_bytes, replay_capacity=replay_capacity, replay_bits=replay_bits,
                 n_new=replay_n_new, n_old=replay_n_old, momentum=float(momentum) != 0.0,
                 flash_model_bytes=flash_model_bytes, stage=stage)


def board_plan(model: Model, board: Board) -> memory.Plan:
    """tinyol.memory's plan of `model` on `board` (the larger of the release and test builds)."""
    plans = [memory.plan(model, board.name, memory.board_regions(board), flash_bytes=board.flash_bytes,
                         test_build=t) for t in (False, True)]
    return max(plans, key=lambda p: p.over[1])


def max_replay_slots(model: Model, board: Board) -> int:
    """The most replay slots with which `model` fits `board` in both builds; -1 when it does not
    fit even without a buffer."""
    regions = memory.board_regions(board)
    return min(memory.largest_capacity(model, board.name, regions, test_build=t) for t in (False, True))


def check_fit(model: Model, board: Board, *, name: str = "the model", arena_known: bool = True) -> None:
    """Raise a TinyolError saying by how many bytes and which knob to turn when `model` does not
    fit `board` (RAM exactly as the firmware reserves it; flash as an estimate)."""
    p = board_plan(model, board)
    if not p.fits:
        where, over = p.over
        detail = "; ".join(p.lines()[:-1])
        others = [b for b in BOARDS.values() if b.name != board.name and board_plan(model, b).fits]
        raise TinyolError(
            f"{name} does not fit {board.name}: {where} over by {'at least ' if not arena_known else ''}"
            f"{over} bytes ({detail})",
            hint=p.advice() + (f"; or use --board {others[0].name} (it fits there)" if others else ""))
    if p.flash_needed > p.flash_room:
        raise TinyolError(
            f"{name} does not fit {board.name}: flash needs ~{p.flash_needed} bytes, {p.flash_room} "
            f"are free for the image (the last 1/8 holds the saved state), over by "
            f"{p.flash_needed - p.flash_room} bytes",
            hint="use a smaller backbone or a board with more flash (nucleo_l4r5zi: 2 MB)")


def warn_store(model: Model, board: Board, echo: Echo) -> memory.StoreLayout:
    """Say up front what a SAVE on `board` keeps (tinyol.memory.store_layout): everything, or
    the head alone once the replay buffer outgrows a store slot, with the knobs."""
    lay = memory.store_layout(model, board.flash_bytes, board.page_bytes)
    if lay.whole:
        echo(f"persistence: {lay.line()}")
    else:
        echo(f"warning: persistence: {lay.line()}")
        echo(f"hint: {lay.advice(model)}")
    return lay


def choose_replay_capacity(model: Model, board: Board | None, given: int | None, echo: Echo) -> int:
    """The replay capacity to export: the user's, else none for an autoencoder, else the largest
    that fits the board (memory.DEFAULT_CAPACITY without a board), for the one-layer head and for
    an adaptive stage alike. Says what it chose."""
    if given is not None:
        return given
    if model.autoencoder:
        echo("replay: none (autoencoder; give --replay-capacity N to keep N latents for replay)")
        return 0
    if board is None:
        cap = memory.DEFAULT_CAPACITY
        echo(f"replay: capacity {cap} (the default; give --board to size it to a board, or "
             f"--replay-capacity)")
        return cap
    cap = max_replay_slots(model, board)
    if cap < 0:
        model.replay_capacity = 0
        check_fit(model, board)  # raises, saying by how much even without a buffer
    model.replay_capacity = cap
    bp = board_plan(model, board)
    where = memory.REGION_TITLES[bp.learner_region] + (
        f", its replay buffer in {memory.REGION_TITLES[bp.replay_region]}" if bp.split else "")
    echo(f"replay: capacity {cap}, the largest that fits {board.name} (learner in {where}; give "
         f"--replay-capacity N to choose)")
    return cap


def budget(model: Model, board: Board | None, *, weights_bytes: int, head_init_bytes: int) -> dict:
    """The manifest's "memory" numbers for `model` (and its plan on `board`)."""
    parts = model.parts()
    out = dict(learner_bytes=model.learner(), learner_parts=parts,
               head_bytes=parts.get("head weights", parts.get("stage weights", 0)) + parts["momentum"],
               replay_bytes=parts["replay buffer"],
               weights_bytes=weights_bytes, head_init_bytes=head_init_bytes,
               firmware_flash_base_bytes=memory.FLASH_BASE_BYTES,
               flash_bytes=weights_bytes + head_init_bytes + memory.FLASH_BASE_BYTES)
    if board is None:
        fixed = max(memory.FIXED_RAM1.values()) + (memory.FIXED_RAM1_STAGE_DELTA if model.stage else 0)
        out["ram_bytes"] = (fixed + memory.STACK_BYTES + model.arena_bytes + model.input_size
                            + model.latent_dim + model.learner()
                            + memory.app_bytes(model.input_size, model.latent_dim,
                                               0 if model.autoencoder else model.outputs))
        out["firmware_ram_base_bytes"] = fixed + memory.STACK_BYTES
        return out
    p = board_plan(model, board)
    out["ram_bytes"] = sum(r.used for r in p.regions)
    out["firmware_ram_base_bytes"] = p.regions[0].items["firmware"] + memory.STACK_BYTES
    out["regions"] = {r.title: {"used": r.used, "size": r.size} for r in p.regions}
    out["learner_region"] = memory.REGION_TITLES[p.learner_region]
    if p.split:  # the replay buffer in a region of its own (only then: older manifests stay as they were)
        out["replay_region"] = memory.REGION_TITLES[p.replay_region]
    return out
