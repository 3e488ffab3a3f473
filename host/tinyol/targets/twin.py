"""The numpy twin of a board, as a library: an exported model's backbone in TFLM's own
runtime on ``backbone.tflite`` (int8 input quantized with the manifest's input scale and zero
point) and its head (or adaptive stage) in :mod:`tinyol.learn.learner` / :mod:`tinyol.learn.stage`, the
same algorithm, PRNG and order of operations as the firmware. Prequential: every sample is
first predicted (or scored), then learned.

Used by `tinyol simulate` (commands/simulate.py), the studies and the fleet.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.datasets import load_source
from ..errors import TinyolError
from ..learn import learner as L
from ..learn.anomaly import flags_vs_labels, roc_auc, score_stats  # noqa: F401 (roc_auc: S.roc_auc)
from ..learn.stage import Layer, Stage, StageConfig, chain_ok
from ..model.folder import check_learner, check_manifest, read_manifest

# Lazy on purpose: TFLM's runtime and scipy are imported where they are used; they take
# seconds to load and `tinyol simulate` on stored latents needs neither.


# --------------------------------------------------------------------------- model dir
@dataclass
class Model:
    path: Path
    manifest: dict
    tflite: bytes
    W: np.ndarray          # [rows, D] float32
    b: np.ndarray          # [rows]
    n_init: int
    stage: tuple | None = None  # (layers, params) of an adaptive stage (stage_init.npz)

    @property
    def autoencoder(self) -> bool:
        return self.manifest["head"]["mode"] in ("autoencoder", 1)

    @property
    def input_q(self) -> tuple[float, int]:
        i = self.manifest["input"]
        return float(i["scale"]), int(i["zero_point"])

    @property
    def latent_q(self) -> tuple[float, int]:
        la = self.manifest["latent"]
        return float(la["scale"]), int(la["zero_point"])

    @property
    def class_names(self) -> list[str]:
        return list(self.manifest["head"].get("classes", []))


def load_model(model_dir: str | os.PathLike) -> Model:
    """Read manifest.json, head_init.npz and backbone.tflite of an export directory."""
    p = Path(model_dir)
    if (p / "stage_init.npz").exists():
        return _load_stage_model(p)
    try:
        manifest = read_manifest(p)
        tflite = (p / "backbone.tflite").read_bytes()
        npz = np.load(p / "head_init.npz")
    except FileNotFoundError as e:
        raise TinyolError(f"{p}: not a tinyol model directory (missing {Path(e.filename).name})",
                          hint="create one with `tinyol export`") from None
    except ValueError as e:
        raise TinyolError(f"{p}: unreadable model files ({e})") from None
    check_manifest(manifest, f"{p}/manifest.json")
    check_learner(manifest, f"{p}/manifest.json")
    W = np.asarray(npz["W"], np.float32)
    b = np.asarray(npz["b"], np.float32)
    n_init = int(npz["n_classes"]) if "n_classes" in npz.files else W.shape[0]
    if W.ndim != 2 or b.shape != (W.shape[0],) or W.shape[1] != manifest["latent"]["dim"]:
        raise TinyolError(f"{p}: head_init.npz shapes {W.shape}/{b.shape} do not match the "
                          f"manifest's latent dim {manifest['latent']['dim']}")
    return Model(p, manifest, tflite, W, b, n_init)


def _load_stage_model(p: Path) -> Model:
    """A model directory with an adaptive stage (export --split before the head)."""
    try:
        manifest = read_manifest(p)
        tflite = (p / "backbone.tflite").read_bytes()
        npz = np.load(p / "stage_init.npz")
        layers = [Layer(*[int(v) for v in (row[0], row[8], row[9], row[10], row[11], row[12],
                                           row[13], row[1], row[2], row[3], row[4], row[5],
                                           row[6], row[7], *row[14:17])]) for row in npz["layers"]]
        params = np.asarray(npz["params"], np.float32)
    except (FileNotFoundError, KeyError, ValueError) as e:
        raise TinyolError(f"{p}: unreadable model files ({e})",
                          hint="re-create it with `tinyol export`") from None
    if not chain_ok(layers) or params.size != sum(l.n_params for l in layers) \
            or layers[0].in_size != manifest["latent"]["dim"]:
        raise TinyolError(f"{p}: stage_init.npz does not match the manifest")
    last = layers[-1]
    off = params.size - last.n_params
    W = params[off:off + last.n_weights].reshape(last.out_c, last.in_size)
    b = params[off + last.n_weights:]
    return Model(p, manifest, tflite, W, b, int(npz["n_classes"]), (layers, params))


def quantize_input(X: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """q = clip(round(x / scale) + zero_point, -128, 127) (the host-side input path)."""
    X = np.asarray(X, np.float32)
    return np.clip(np.round(X / np.float32(scale)) + zero_point, -128, 127).astype(np.int8)


def latents(model: Model, Xq: np.ndarray) -> np.ndarray:
    """int8 backbone outputs [N, D] from TFLM's Python runtime (the bit-exact oracle)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError as e:
        raise TinyolError("TFLM's Python runtime is needed to run the backbone",
                          hint="pip install 'tinyol[ml]'") from e
    # the runtime's default arena (10 x the model's bytes) is too small for a model of few
    # weights and large activations: sized from what export measured with this runtime
    need = int((model.manifest.get("memory") or {}).get("tflm_arena_bytes") or 0)
    interp = runtime.Interpreter.from_bytes(model.tflite, arena_size=max(1 << 20, 16 * len(model.tflite), 2 * need))
    shape = tuple(model.manifest["input"]["shape"])
    out = np.empty((len(Xq), int(model.manifest["latent"]["dim"])), np.int8)
    for i, x in enumerate(Xq):
        interp.set_input(np.asarray(x, np.int8).reshape((1,) + shape), 0)
        interp.invoke()
        out[i] = interp.get_output(0).reshape(-1)
    return out


# --------------------------------------------------------------------------- learner
def learner_settings(model: Model, **over) -> tuple[L.Settings, dict]:
    """Settings from the manifest's learner section, overridden by non-None keywords.

    Returns (settings, replay dict with capacity/bits/policy/seed/max_new)."""
    m = dict(model.manifest.get("learner", {}))
    get = lambda k, d: over[k] if over.get(k) is not None else m.get(k, d)  # noqa: E731
    cap = int(get("replay_capacity", 0))
    mode = over.get("mode")
    mode = L.MODES[mode] if mode is not None else (L.MODE_REPLAY if cap > 0 else L.MODE_SGD)
    n_new = int(get("replay_n_new", 1))
    s = L.Settings(lr=float(get("lr", 0.05)), momentum=float(get("momentum", 0.0)),
                   weight_decay=float(get("weight_decay", 0.0)),
                   clip_norm=float(get("clip_norm", 0.0)), n_new=n_new,
                   n_old=int(get("replay_n_old", 4)), mode=mode,
                   threshold_k=float(get("threshold_k", 3.0)),
                   ema_alpha=float(get("ema_alpha", 0.01)), warmup=int(get("warmup", 50)),
                   rehearse=int(get("rehearse", 0)))
    # the export's policy (manifest learner.replay_policy; before it was a setting: reservoir)
    policy = over.get("policy") or m.get("replay_policy") or m.get("policy") or "reservoir"
    replay = dict(capacity=cap, bits=int(get("replay_bits", 8)),
                  policy=L.POLICIES[policy], seed=int(get("seed", 1)), max_new=n_new)
    return s, replay


def replay_codec(model: Model, bits: int):
    """The export's replay codec (manifest learner.replay_codec) for a run at ``bits``: the
    4-bit (lo, step), the PQ codebook int8 [M, 256, sub], or None at 32, 8 or 7 bits."""
    c = model.manifest.get("learner", {}).get("replay_codec")
    if L.is_pq(bits):
        if c is None or c.get("kind") != "pq" or bits != L.PQ_BASE + int(c["sub"]):
            dim = int(model.manifest["latent"]["dim"])
            raise TinyolError(f"PQ replay ({L.codec_name(bits, dim)}) needs the codebook "
                              "its export learned from the calibration latents",
                              hint="export with --replay-codec pq:M, and run at the export's storage")
        import base64

        raw = np.frombuffer(base64.b64decode(c["codebook"]), np.int8)
        return raw.reshape(int(c["m"]), int(c["codewords"]), int(c["sub"])).copy()
    if bits != 4:
        return None
    if c is not None and c.get("kind") == "pq":
        c = None
    if c is None:
        raise TinyolError("4-bit replay needs the codec the export fits to the calibration latents",
                          hint="export with --replay-bits 4")
    return np.asarray(c["lo"], np.int8), np.asarray(c["step"], np.uint8)


def make_learner(model: Model, settings: L.Settings, replay: dict) -> L.Learner:
    ls, lz = model.latent_q
    codec = replay_codec(model, replay["bits"]) if replay.get("capacity") else None
    if model.stage is not None:  # the adaptive stage's twin (tinyol.learn.stage)

        layers, params = model.stage
        scfg = StageConfig(layers=layers, init_params=params, init_classes=model.n_init,
                           latent_scale=ls, latent_zero_point=lz,
                           replay_capacity=replay["capacity"], replay_bits=replay["bits"],
                           replay_codec=codec,
                           replay_policy=replay["policy"], max_new=max(1, replay["max_new"]),
                           max_old=settings.n_old, no_momentum=settings.momentum == 0,
                           seed=replay["seed"], settings=settings,
                           stage_lr_scale=float(model.manifest["learner"].get("stage_lr_scale", 0.0)))
        try:
            return Stage(scfg)
        except L.LearnerError as e:
            raise TinyolError(f"invalid learner settings ({e.status})") from None
    is_, iz = model.input_q
    rows = model.W.shape[0]
    cfg = L.Config(latent_dim=model.W.shape[1], n_outputs=rows,
                   head_kind=L.HEAD_AUTOENCODER if model.autoencoder else L.HEAD_CLASSIFIER,
                   init_classes=rows if model.autoencoder else model.n_init,
                   init_weight=model.W, init_bias=model.b, latent_scale=ls, latent_zero_point=lz,
                   target_scale=is_, target_zero_point=iz,
                   replay_capacity=0 if model.autoencoder else replay["capacity"],
                   replay_bits=replay["bits"], replay_policy=replay["policy"],
                   replay_codec=None if model.autoencoder else codec,
                   max_new=max(1, replay["max_new"]), max_old=settings.n_old,
                   no_momentum=settings.momentum == 0, seed=replay["seed"],
                   settings=settings)
    try:
        return L.Learner(cfg)
    except L.LearnerError as e:
        raise TinyolError(f"invalid learner settings ({e.status})") from None


def evaluate(lrn: L.Learner, Q: np.ndarray) -> np.ndarray:
    """Predictions of the current head for int8 latents Q (vectorised, no learning)."""
    if not hasattr(lrn, "head"):  # an adaptive stage
        return np.array([lrn.predict_f(x)[0] for x in
                         L.dequantize(Q, lrn.cfg.latent_scale, lrn.cfg.latent_zero_point)])
    h = lrn.head
    X = L.dequantize(Q, lrn.cfg.latent_scale, lrn.cfg.latent_zero_point)
    z = X @ h.w.T + h.b
    z[:, ~h.active] = -np.inf
    return np.argmax(z, axis=1)


def per_class(y_true, y_pred, labels) -> dict[int, float]:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return {int(c): float(np.mean(y_pred[y_true == c] == c)) for c in labels
            if np.any(y_true == c)}


def run_classifier(lrn: L.Learner, Q: np.ndarray, y: np.ndarray, *, prefill=None,
                   eval_set=None, on_sample=None) -> dict:
    """Prefill the buffer (Q, y), stream (predict then learn), evaluate at the end.
    on_sample(i, record dict): called per streamed sample with what the device's SAMPLE reply
    holds (prediction, confidence, loss, learned, new_class, samples_seen).
    before_accuracy: the exported head on the evaluation set (the stream without one), before
    anything is learned."""
    Qe, ye = eval_set if eval_set is not None else (Q, y)
    pb = evaluate(lrn, Qe)
    before = {"before_accuracy": float(np.mean(pb == ye)),
              "before_per_class": per_class(ye, pb, sorted(set(int(v) for v in ye)))}
    if prefill is not None:
        for q, t in zip(*prefill):
            if lrn.replay is not None and t < lrn.cfg.n_outputs:
                lrn.replay_add(q, int(t))
    preds, errors = [], {}
    for i, (q, t) in enumerate(zip(Q, y)):
        pred, conf = lrn.predict(q)
        preds.append(pred)
        r = lrn.learn_result(q, int(t), pred, conf)  # what the device's SAMPLE reply says
        if r.error is not None:
            errors[r.error] = errors.get(r.error, 0) + 1
        if getattr(lrn.settings, "rehearse", 0) and hasattr(lrn, "idle"):
            lrn.idle()  # the device idles between samples: its whole rehearsal budget
        if on_sample is not None:
            on_sample(i, dict(prediction=r.prediction, confidence=r.probability, loss=r.loss,
                              learned=r.learned, new_class=r.new_class, error=r.error,
                              samples_seen=r.samples_seen))
    preds = np.array(preds)
    labels = sorted(set(int(v) for v in y))
    res = {
        "samples": int(len(y)),
        "prequential_accuracy": float(np.mean(preds == y)) if len(y) else math.nan,
        "prequential_per_class": per_class(y, preds, labels),
        "errors": errors,
        "stats": lrn.stats(),
        **before,
    }
    pe = evaluate(lrn, Qe)
    res["final_accuracy"] = float(np.mean(pe == ye))
    res["final_per_class"] = per_class(ye, pe, sorted(set(int(v) for v in ye)))
    return res


def run_anomaly(lrn: L.Learner, Qlat: np.ndarray, Qin: np.ndarray, y: np.ndarray,
                on_sample=None) -> dict:
    """Stream (score, flag, train) through the autoencoder head; y != 0 = anomalous.
    on_sample(i, record dict) as in run_classifier (learned: the head was updated)."""
    scores, flags, thresholds = [], [], []
    for i, (ql, qi) in enumerate(zip(Qlat, Qin)):
        updates = lrn.updates
        thr = lrn.anomaly_stats.threshold()  # the one this score meets (the device's reply)
        s, f = lrn.anomaly(ql, qi.reshape(-1))
        scores.append(s)
        flags.append(f)
        thresholds.append(thr)
        if on_sample is not None:
            on_sample(i, dict(prediction=int(f), confidence=float(s), loss=float(thr),
                              learned=lrn.updates != updates, new_class=False, error=None,
                              samples_seen=lrn.samples_seen))
    scores, flags = np.array(scores), np.array(flags, bool)
    anom = np.asarray(y) != 0
    warm = lrn.settings.warmup
    idx = np.arange(len(y))
    after = idx >= warm
    # onset = first anomalous sample after the warm-up (nothing is flagged before)
    onset = int(np.argmax(anom & after)) if (anom & after).any() else None
    delay_samples = delay_anomalies = None
    if onset is not None:
        hits = np.flatnonzero(flags & anom & (idx >= onset))
        if len(hits):
            delay_samples = int(hits[0] - onset)
            delay_anomalies = int(np.sum(anom[onset:hits[0]]))
    det = flags_vs_labels(flags[after], anom[after])
    return {
        "samples": int(len(y)),
        "anomalous": int(anom.sum()),
        "warmup": int(warm),
        "threshold_k": float(lrn.settings.threshold_k),
        "flagged": int(flags.sum()),
        "roc_auc": roc_auc(scores, anom),
        "roc_auc_after_warmup": roc_auc(scores[after], anom[after]),
        "precision": det["precision"], "recall": det["recall"], "f1": det["f1"],
        "detection_rate": det["recall"],
        "false_positive_rate": det["false_positive_rate"],
        "counts_after_warmup": {k: det[k] for k in ("tp", "fp", "fn", "tn")},
        "onset_index": onset,
        "detection_delay": delay_samples,
        "missed_before_detection": delay_anomalies,
        "final_threshold": lrn.anomaly_stats.threshold(),
        "scores": score_stats(scores, anom),
        "stats": lrn.stats(),
        "trace": {"score": scores, "threshold": np.array(thresholds), "flag": flags,
                  "label": np.asarray(y)},
    }


def load_data(spec: str):
    return load_source(spec)


