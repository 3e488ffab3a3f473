"""`tinyol compare A.jsonl B.jsonl`: two per-sample logs, line by line.

Both `tinyol stream --log` (the device) and `tinyol simulate --log` (the numpy reference learner)
write one JSON record per sample with the source row index; when the device and the reference
learn bit-identically, predictions, learned/new-class flags and labels agree on every line and the
float fields (classifier: confidence, loss; autoencoder: score, threshold) agree to within float32
rounding.
"""
from __future__ import annotations

import json
import math

import click

from ..checks import Number
from ..errors import TinyolError
from ..options import emit_json, json_option

EXACT = ("index", "label", "prediction", "learned", "new_class", "error")
FLOATS = ("confidence", "loss", "score", "threshold")


def read_log(path: str) -> list[dict]:
    """The records of a per-sample log; anything else is one clear error naming the line."""
    hint = "give logs written by `tinyol stream --log` or `tinyol simulate --log`"
    out = []
    try:
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise TinyolError(f"{path}, line {n}: not text (a binary file?)", hint=hint) from None
                except json.JSONDecodeError as e:
                    raise TinyolError(f"{path}, line {n}: not JSON ({e.msg})", hint=hint) from None
                why = _bad_record(rec)
                if why:
                    raise TinyolError(f"{path}, line {n}: {why} (not a tinyol per-sample record)", hint=hint)
                out.append(rec)
    except FileNotFoundError:
        raise TinyolError(f"log {path!r} not found") from None
    except IsADirectoryError:
        raise TinyolError(f"log {path!r} is a folder, not a file", hint=hint) from None
    except OSError as e:
        raise TinyolError(f"cannot read log {path!r}: {e.strerror or e}") from None
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bad_record(rec) -> str | None:
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__ if rec is not None else 'null'}, not an object"
    if "index" not in rec:
        return "no 'index' field"
    for k in ("index", "samples_seen"):
        if rec.get(k) is not None and not (isinstance(rec[k], int) and not isinstance(rec[k], bool)):
            return f"{k} is {rec[k]!r}, not a whole number"
    for k in FLOATS:
        if rec.get(k) is not None and not _number(rec[k]):
            return f"{k} is {rec[k]!r}, not a number"
    return None


def _close(a, b, rtol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)  # NaN is NaN: the same record agrees with itself
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-12)


def compare(a: list[dict], b: list[dict], rtol: float = 1e-5) -> dict:
    """Differences per field; samples_seen is compared as the count since each log's first line."""
    diffs: list[dict] = []
    counts = {k: 0 for k in (*EXACT, *FLOATS, "samples_seen")}
    base_a = a[0].get("samples_seen") if a else None
    base_b = b[0].get("samples_seen") if b else None
    for n, (ra, rb) in enumerate(zip(a, b), 1):
        bad = [k for k in EXACT if k in ra and k in rb and ra[k] != rb[k]]
        bad += [k for k in FLOATS if k in ra and k in rb and not _close(ra[k], rb[k], rtol)]
        if None not in (base_a, base_b, ra.get("samples_seen"), rb.get("samples_seen")):
            if ra["samples_seen"] - base_a != rb["samples_seen"] - base_b:
                bad.append("samples_seen")
        for k in bad:
            counts[k] += 1
        if bad:
            diffs.append({"line": n, "index": ra.get("index"), "fields": bad,
                          "a": {k: ra.get(k) for k in bad}, "b": {k: rb.get(k) for k in bad}})
    same = not diffs and len(a) == len(b)
    return {"lines_a": len(a), "lines_b": len(b), "compared": min(len(a), len(b)),
            "differing_lines": len(diffs), "per_field": {k: v for k, v in counts.items() if v},
            "first_differences": diffs[:20], "same": same}


@click.command("compare")
@click.argument("log_a", metavar="A.jsonl")
@click.argument("log_b", metavar="B.jsonl")
@click.option("--rtol", type=Number(0.0), default=1e-5, show_default=True,
              help="Relative tolerance for the float fields (confidence, loss, score, threshold).")
@click.option("--show", type=click.IntRange(0), default=5, show_default=True, help="Differences to print.")
@json_option
def cmd(log_a, log_b, rtol, show, as_json):
    """Compare two per-sample logs line by line (exit 1 when they differ).

    \b
    Example (device vs the reference learner, same stream):
      tinyol stream -p socket://127.0.0.1:4321 --data digits:5-9@train --log dev.jsonl
      tinyol simulate --model models/digits --data digits:5-9@train --log sim.jsonl
      tinyol compare dev.jsonl sim.jsonl
    """
    a, b = read_log(log_a), read_log(log_b)
    for path, recs in ((log_a, a), (log_b, b)):
        if not recs:
            raise TinyolError(f"{path} holds no records: nothing to compare",
                              hint="an empty log proves nothing; check that the run wrote its --log")
    res = compare(a, b, rtol)
    if as_json:
        emit_json(res)
    else:
        click.echo(f"{res['compared']} lines compared ({log_a}: {res['lines_a']}, "
                   f"{log_b}: {res['lines_b']})")
        if res["same"]:
            click.echo("same: every line agrees (floats within rtol %g)" % rtol)
        else:
            click.echo(f"{res['differing_lines']} lines differ"
                       + (": " + ", ".join(f"{k} {v}" for k, v in res["per_field"].items())
                          if res["per_field"] else ""))
            if res["lines_a"] != res["lines_b"]:
                click.echo("the logs have different lengths")
            for d in res["first_differences"][:show]:
                click.echo(f"  line {d['line']} (row {d['index']}): "
                           + "; ".join(f"{k} {d['a'][k]!r} vs {d['b'][k]!r}" for k in d["fields"]))
    if not res["same"]:
        raise click.exceptions.Exit(1)  # like diff: 1 = the logs differ
