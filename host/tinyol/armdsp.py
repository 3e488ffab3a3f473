"""The Cortex-M4 DSP/SIMD (and VFP) instructions tinyol's kernels and learner run, as the
ARMv7-M Architecture Reference Manual (DDI 0403E, chapter A7 "Instruction Details" and the
A2 pseudo-code library: SignedSatQ, UnsignedSatQ, Shift, ROR, FPAdd, FPMul, ...) defines them.

The oracle of every instruction test (tests/device/test_cpu_instructions.py runs each on QEMU, unicorn
and Renode against it) and the source of the device's boot self-test answers
(`python -m tinyol.gen_defs` writes mcu/src/kernels/tol_cpu_kat.h from CPU_CHECKS).

An instruction is run as `msr APSR_nzcvqg, f; <asm>; mrs f, APSR` with four registers in:
`a`, `b` (read only) and `lo`, `hi` (read and written: the destination, the accumulator, the
64-bit RdLo/RdHi pair). Each oracle maps (a, b, lo, hi, apsr) to (lo, hi, apsr) after it.
Floating-point operands travel as their binary32 bit patterns; FPSCR is the reset value
(round to nearest, no flush-to-zero, no default-NaN mode), as on a Cortex-M4F after boot.
No code here comes from an emulator: it is the manual's pseudo-code, written out.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

M32 = 0xFFFFFFFF
Q_BIT = 1 << 27
GE_SHIFT = 16
APSR_MASK = 0xF80F0000   # N Z C V Q and GE[3:0]: what MRS APSR shows of them


# ---- the manual's helper functions (A2.2, A2.3) ------------------------------------------
def field(x: int, hi: int, lo: int) -> int:
    return (x >> lo) & ((1 << (hi - lo + 1)) - 1)


def sint(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def signed_sat_q(i: int, n: int) -> tuple[int, bool]:
    hi, lo = (1 << (n - 1)) - 1, -(1 << (n - 1))
    if i > hi:
        return hi, True
    if i < lo:
        return lo, True
    return i, False


def unsigned_sat_q(i: int, n: int) -> tuple[int, bool]:
    hi = (1 << n) - 1
    if i > hi:
        return hi, True
    if i < 0:
        return 0, True
    return i, False


def ror(x: int, n: int) -> int:
    n %= 32
    return ((x >> n) | (x << (32 - n))) & M32 if n else x & M32


def half(x: int, k: int) -> int:
    return field(x, 16 * k + 15, 16 * k)


def byte(x: int, k: int) -> int:
    return field(x, 8 * k + 7, 8 * k)


def pack(vals, width: int) -> int:
    r = 0
    for k, v in enumerate(vals):
        r |= (v & ((1 << width) - 1)) << (width * k)
    return r


def set_ge(apsr: int, ge: int) -> int:
    return (apsr & ~(0xF << GE_SHIFT)) | ((ge & 0xF) << GE_SHIFT)


def set_q(apsr: int, sat: bool) -> int:
    return apsr | Q_BIT if sat else apsr


@dataclass(frozen=True)
class Op:
    name: str        # the test's id, e.g. "ssub8" or "sxtb16_ror8"
    asm: str         # the instruction with operands %[lo] %[hi] %[a] %[b]
    fn: Callable     # (a, b, lo, hi, apsr) -> (lo, hi, apsr)
    kind: str = "int"   # "int" or "f32" (operands are binary32 bit patterns)
    mnemonic: str = ""  # the instruction (for reports); defaults to the name's first word

    @property
    def insn(self) -> str:
        return (self.mnemonic or self.asm.split()[0]).upper()


OPS: list[Op] = []


def _op(name, asm, kind="int", mnemonic=""):
    def deco(fn):
        OPS.append(Op(name, asm, fn, kind, mnemonic))
        return fn
    return deco


# ---- A7.7: parallel addition and subtraction, setting GE (SADD8 ... USAX) ----------------
def _par_ge(signed: bool, width: int, ops_):
    """ops_: per lane, ('+' | '-', lane of Rn, lane of Rm). GE per lane (2 bits for 16-bit)."""
    def fn(a, b, lo, hi, apsr):
        get = (lambda x, k: sint(half(x, k), 16)) if width == 16 else (lambda x, k: sint(byte(x, k), 8))
        if not signed:
            get = (lambda x, k: half(x, k)) if width == 16 else (lambda x, k: byte(x, k))
        res, ge = [], 0
        for lane, (sign, kn, km) in enumerate(ops_):
            v = get(a, kn) + get(b, km) if sign == "+" else get(a, kn) - get(b, km)
            res.append(v)
            if signed or sign == "-":
                ok = v >= 0
            else:
                ok = v >= (1 << width)
            if ok:
                ge |= (0b11 if width == 16 else 0b1) << (lane * (2 if width == 16 else 1))
        return pack(res, width), hi, set_ge(apsr, ge)
    return fn


_LANES8 = [(0, 0), (1, 1), (2, 2), (3, 3)]
_LANES16 = [(0, 0), (1, 1)]
for _s, _p in (("s", True), ("u", False)):
    OPS.append(Op(f"{_s}add8", f"{_s}add8 %[lo], %[a], %[b]", _par_ge(_p, 8, [("+", n, m) for n, m in _LANES8])))
    OPS.append(Op(f"{_s}sub8", f"{_s}sub8 %[lo], %[a], %[b]", _par_ge(_p, 8, [("-", n, m) for n, m in _LANES8])))
    OPS.append(Op(f"{_s}add16", f"{_s}add16 %[lo], %[a], %[b]", _par_ge(_p, 16, [("+", n, m) for n, m in _LANES16])))
    OPS.append(Op(f"{_s}sub16", f"{_s}sub16 %[lo], %[a], %[b]", _par_ge(_p, 16, [("-", n, m) for n, m in _LANES16])))
    # ASX: low = Rn.lo - Rm.hi, high = Rn.hi + Rm.lo; SAX: low = Rn.lo + Rm.hi, high = Rn.hi - Rm.lo
    OPS.append(Op(f"{_s}asx", f"{_s}asx %[lo], %[a], %[b]", _par_ge(_p, 16, [("-", 0, 1), ("+", 1, 0)])))
    OPS.append(Op(f"{_s}sax", f"{_s}sax %[lo], %[a], %[b]", _par_ge(_p, 16, [("+", 0, 1), ("-", 1, 0)])))


@_op("sel", "sel %[lo], %[a], %[b]")
def _sel(a, b, lo, hi, apsr):
    ge = field(apsr, 19, 16)
    return pack([byte(a, k) if ge >> k & 1 else byte(b, k) for k in range(4)], 8), hi, apsr


def _then_sel(first: str):
    """`<first> hi, a, b; sel lo, a, b`: SEL picks by the GE flags the first one set (the
    pooling kernel's lane maximum is ssub8 + sel)."""
    base = next(op for op in OPS if op.name == first)

    def fn(a, b, lo, hi, apsr):
        d, _, f = base.fn(a, b, hi, hi, apsr)
        r, _, f = _sel(a, b, lo, d, f)
        return r, d, f
    OPS.append(Op(f"{first}_sel", f"{first} %[hi], %[a], %[b]\n\tsel %[lo], %[a], %[b]", fn,
                  mnemonic=f"{first.upper()}+SEL"))


for _first in ("sadd8", "ssub8", "sadd16", "ssub16", "sasx", "ssax", "uadd8", "usub8", "uadd16", "usub16", "uasx", "usax"):
    _then_sel(_first)

# MSR APSR_nzcvqg then MRS APSR with nothing between: the flags read back as written
OPS.append(Op("msr_mrs", "nop", lambda a, b, lo, hi, f: (lo, hi, f), mnemonic="MSR/MRS APSR"))


# ---- saturating and halving parallel arithmetic (no flags) --------------------------------
def _par(width: int, signed: bool, mode: str, ops_):
    def fn(a, b, lo, hi, apsr):
        if signed:
            get = (lambda x, k: sint(half(x, k), 16)) if width == 16 else (lambda x, k: sint(byte(x, k), 8))
        else:
            get = (lambda x, k: half(x, k)) if width == 16 else (lambda x, k: byte(x, k))
        res = []
        for sign, kn, km in ops_:
            v = get(a, kn) + get(b, km) if sign == "+" else get(a, kn) - get(b, km)
            if mode == "q":
                v = (signed_sat_q(v, width) if signed else unsigned_sat_q(v, width))[0]
            else:   # halving: the (width+1)-bit result shifted right by one (arithmetic)
                v >>= 1
            res.append(v)
        return pack(res, width), hi, apsr
    return fn


for _pre, _sg, _mode in (("q", True, "q"), ("uq", False, "q"), ("sh", True, "h"), ("uh", False, "h")):
    OPS.append(Op(f"{_pre}add8", f"{_pre}add8 %[lo], %[a], %[b]", _par(8, _sg, _mode, [("+", n, m) for n, m in _LANES8])))
    OPS.append(Op(f"{_pre}sub8", f"{_pre}sub8 %[lo], %[a], %[b]", _par(8, _sg, _mode, [("-", n, m) for n, m in _LANES8])))
    OPS.append(Op(f"{_pre}add16", f"{_pre}add16 %[lo], %[a], %[b]", _par(16, _sg, _mode, [("+", n, m) for n, m in _LANES16])))
    OPS.append(Op(f"{_pre}sub16", f"{_pre}sub16 %[lo], %[a], %[b]", _par(16, _sg, _mode, [("-", n, m) for n, m in _LANES16])))
    OPS.append(Op(f"{_pre}asx", f"{_pre}asx %[lo], %[a], %[b]", _par(16, _sg, _mode, [("-", 0, 1), ("+", 1, 0)])))
    OPS.append(Op(f"{_pre}sax", f"{_pre}sax %[lo], %[a], %[b]", _par(16, _sg, _mode, [("+", 0, 1), ("-", 1, 0)])))


# ---- QADD, QSUB, QDADD, QDSUB (A7.7.94-A7.7.104): Rd = sat(Rm op Rn), Q sticky -----------
def _q32(double: bool, sub: bool):
    def fn(a, b, lo, hi, apsr):
        sat1 = False
        y = sint(b, 32)
        if double:
            y, sat1 = signed_sat_q(2 * y, 32)
        r, sat2 = signed_sat_q(sint(a, 32) - y if sub else sint(a, 32) + y, 32)
        return r & M32, hi, set_q(apsr, sat1 or sat2)
    return fn


OPS += [Op("qadd", "qadd %[lo], %[a], %[b]", _q32(False, False)),
        Op("qsub", "qsub %[lo], %[a], %[b]", _q32(False, True)),
        Op("qdadd", "qdadd %[lo], %[a], %[b]", _q32(True, False)),
        Op("qdsub", "qdsub %[lo], %[a], %[b]", _q32(True, True))]


# ---- SSAT, USAT, SSAT16, USAT16 (A7.7.133, A7.7.189) ---------------------------------------
def _shift(a: int, kind: str, n: int) -> int:
    if kind == "lsl":
        return (a << n) & M32
    return (sint(a, 32) >> n) & M32   # asr


def _sat(unsigned: bool, bits: int, shift: str = "lsl", amount: int = 0):
    def fn(a, b, lo, hi, apsr):
        x = sint(_shift(a, shift, amount), 32)
        r, s = (unsigned_sat_q if unsigned else signed_sat_q)(x, bits)
        return r & M32, hi, set_q(apsr, s)
    return fn


def _sat16(unsigned: bool, bits: int):
    def fn(a, b, lo, hi, apsr):
        out, any_sat = [], False
        for k in range(2):
            r, s = (unsigned_sat_q if unsigned else signed_sat_q)(sint(half(a, k), 16), bits)
            out.append(r)
            any_sat |= s
        return pack(out, 16), hi, set_q(apsr, any_sat)
    return fn


for _n in (1, 8, 16, 32):
    OPS.append(Op(f"ssat{_n}", f"ssat %[lo], #{_n}, %[a]", _sat(False, _n)))
OPS += [Op("ssat8_lsl3", "ssat %[lo], #8, %[a], lsl #3", _sat(False, 8, "lsl", 3)),
        Op("ssat8_asr5", "ssat %[lo], #8, %[a], asr #5", _sat(False, 8, "asr", 5))]
for _n in (0, 8, 31):
    OPS.append(Op(f"usat{_n}", f"usat %[lo], #{_n}, %[a]", _sat(True, _n)))
OPS += [Op("usat8_asr2", "usat %[lo], #8, %[a], asr #2", _sat(True, 8, "asr", 2)),
        Op("ssat16_8", "ssat16 %[lo], #8, %[a]", _sat16(False, 8)),
        Op("ssat16_1", "ssat16 %[lo], #1, %[a]", _sat16(False, 1)),
        Op("usat16_8", "usat16 %[lo], #8, %[a]", _sat16(True, 8))]


# ---- dual 16-bit multiplies (A7.7.115 SMLAD ... A7.7.126 SMUSD) -----------------------------
def _dual(x: bool, sub: bool, acc: str):
    """acc: '' (SMUAD/SMUSD), '32' (SMLAD/SMLSD, Ra = lo), '64' (SMLALD/SMLSLD, hi:lo)."""
    def fn(a, b, lo, hi, apsr):
        m = ror(b, 16) if x else b
        p1 = sint(half(a, 0), 16) * sint(half(m, 0), 16)
        p2 = sint(half(a, 1), 16) * sint(half(m, 1), 16)
        s = p1 - p2 if sub else p1 + p2
        if acc == "64":
            r = s + sint((hi << 32) | lo, 64)
            return r & M32, (r >> 32) & M32, apsr
        if acc == "32":
            s += sint(lo, 32)
        # SMLAD/SMUAD/SMLSD: Q if the result does not fit; SMUSD cannot overflow
        return s & M32, hi, set_q(apsr, s != sint(s, 32))
    return fn


for _x in ("", "x"):
    OPS += [Op(f"smuad{_x}", f"smuad{_x} %[lo], %[a], %[b]", _dual(bool(_x), False, "")),
            Op(f"smusd{_x}", f"smusd{_x} %[lo], %[a], %[b]", _dual(bool(_x), True, "")),
            Op(f"smlad{_x}", f"smlad{_x} %[lo], %[a], %[b], %[lo]", _dual(bool(_x), False, "32")),
            Op(f"smlsd{_x}", f"smlsd{_x} %[lo], %[a], %[b], %[lo]", _dual(bool(_x), True, "32")),
            Op(f"smlald{_x}", f"smlald{_x} %[lo], %[hi], %[a], %[b]", _dual(bool(_x), False, "64")),
            Op(f"smlsld{_x}", f"smlsld{_x} %[lo], %[hi], %[a], %[b]", _dual(bool(_x), True, "64"))]


# ---- halfword multiplies SMULxy, SMLAxy, SMLALxy, SMULWy, SMLAWy (A7.7.116-A7.7.131) -------
def _hw(x: int, top: bool) -> int:
    return sint(half(x, 1 if top else 0), 16)


def _smulxy(nt: bool, mt: bool, acc: str):
    def fn(a, b, lo, hi, apsr):
        p = _hw(a, nt) * _hw(b, mt)
        if acc == "64":
            r = p + sint((hi << 32) | lo, 64)
            return r & M32, (r >> 32) & M32, apsr
        if acc == "32":
            r = p + sint(lo, 32)
            return r & M32, hi, set_q(apsr, r != sint(r, 32))
        return p & M32, hi, apsr
    return fn


def _smulwy(mt: bool, acc: bool):
    def fn(a, b, lo, hi, apsr):
        r = sint(a, 32) * _hw(b, mt) + ((sint(lo, 32) << 16) if acc else 0)
        d = (r >> 16) & M32
        return d, hi, set_q(apsr, acc and (r >> 16) != sint(d, 32))
    return fn


for _xy in ("bb", "bt", "tb", "tt"):
    _nt, _mt = _xy[0] == "t", _xy[1] == "t"
    OPS += [Op(f"smul{_xy}", f"smul{_xy} %[lo], %[a], %[b]", _smulxy(_nt, _mt, "")),
            Op(f"smla{_xy}", f"smla{_xy} %[lo], %[a], %[b], %[lo]", _smulxy(_nt, _mt, "32")),
            Op(f"smlal{_xy}", f"smlal{_xy} %[lo], %[hi], %[a], %[b]", _smulxy(_nt, _mt, "64"))]
for _y in ("b", "t"):
    OPS += [Op(f"smulw{_y}", f"smulw{_y} %[lo], %[a], %[b]", _smulwy(_y == "t", False)),
            Op(f"smlaw{_y}", f"smlaw{_y} %[lo], %[a], %[b], %[lo]", _smulwy(_y == "t", True))]


# ---- most-significant-word and long multiplies, divides ---------------------------------------
def _smm(acc: int, rnd: bool):
    """acc: 0 SMMUL, +1 SMMLA, -1 SMMLS (Ra = lo)."""
    def fn(a, b, lo, hi, apsr):
        p = sint(a, 32) * sint(b, 32)
        r = (sint(lo, 32) << 32) + acc * p if acc else p
        if rnd:
            r += 0x80000000
        return (r >> 32) & M32, hi, apsr
    return fn


for _r in ("", "r"):
    OPS += [Op(f"smmul{_r}", f"smmul{_r} %[lo], %[a], %[b]", _smm(0, bool(_r))),
            Op(f"smmla{_r}", f"smmla{_r} %[lo], %[a], %[b], %[lo]", _smm(1, bool(_r))),
            Op(f"smmls{_r}", f"smmls{_r} %[lo], %[a], %[b], %[lo]", _smm(-1, bool(_r)))]


def _long(signed: bool, acc: str):
    def fn(a, b, lo, hi, apsr):
        p = sint(a, 32) * sint(b, 32) if signed else a * b
        if acc == "acc":
            p += sint((hi << 32) | lo, 64) if signed else (hi << 32) | lo
        elif acc == "umaal":
            p += hi + lo
        return p & M32, (p >> 32) & M32, apsr
    return fn


OPS += [Op("smull", "smull %[lo], %[hi], %[a], %[b]", _long(True, "")),
        Op("umull", "umull %[lo], %[hi], %[a], %[b]", _long(False, "")),
        Op("smlal", "smlal %[lo], %[hi], %[a], %[b]", _long(True, "acc")),
        Op("umlal", "umlal %[lo], %[hi], %[a], %[b]", _long(False, "acc")),
        Op("umaal", "umaal %[lo], %[hi], %[a], %[b]", _long(False, "umaal")),
        Op("mla", "mla %[lo], %[a], %[b], %[lo]", lambda a, b, lo, hi, f: ((a * b + lo) & M32, hi, f)),
        Op("mls", "mls %[lo], %[a], %[b], %[lo]", lambda a, b, lo, hi, f: ((lo - a * b) & M32, hi, f))]


def _div(signed: bool):
    def fn(a, b, lo, hi, apsr):
        # CCR.DIV_0_TRP is 0 after reset: a division by zero gives 0
        if b == 0:
            return 0, hi, apsr
        n, m = (sint(a, 32), sint(b, 32)) if signed else (a, b)
        q = abs(n) // abs(m)   # RoundTowardsZero
        if (n < 0) != (m < 0):
            q = -q
        return q & M32, hi, apsr
    return fn


OPS += [Op("sdiv", "sdiv %[lo], %[a], %[b]", _div(True)), Op("udiv", "udiv %[lo], %[a], %[b]", _div(False))]


# ---- extend and add, pack, byte sums, reversals (A7.7.176 SXTAB16, A7.7.90 PKHBT, ...) ------
def _xt16(signed: bool, add: bool, rot: int):
    def fn(a, b, lo, hi, apsr):
        src = b if add else a
        r = ror(src, rot)
        ext = (lambda v: sint(v, 8)) if signed else (lambda v: v)
        l0, l1 = ext(byte(r, 0)), ext(byte(r, 2))
        if add:
            l0, l1 = half(a, 0) + l0, half(a, 1) + l1
        return pack([l0, l1], 16), hi, apsr
    return fn


def _xta(signed: bool, width: int, rot: int):
    def fn(a, b, lo, hi, apsr):
        v = field(ror(b, rot), width - 1, 0)
        if signed:
            v = sint(v, width)
        return (a + v) & M32, hi, apsr
    return fn


def _xt(signed: bool, width: int):
    def fn(a, b, lo, hi, apsr):
        v = field(a, width - 1, 0)
        return (sint(v, width) if signed else v) & M32, hi, apsr
    return fn


for _rot in (0, 8, 16, 24):
    _sfx = f", ror #{_rot}" if _rot else ""
    _id = f"_ror{_rot}" if _rot else ""
    OPS += [Op(f"sxtb16{_id}", f"sxtb16 %[lo], %[a]{_sfx}", _xt16(True, False, _rot)),
            Op(f"sxtab16{_id}", f"sxtab16 %[lo], %[a], %[b]{_sfx}", _xt16(True, True, _rot))]
for _rot in (0, 8):
    _sfx = f", ror #{_rot}" if _rot else ""
    _id = f"_ror{_rot}" if _rot else ""
    OPS += [Op(f"uxtb16{_id}", f"uxtb16 %[lo], %[a]{_sfx}", _xt16(False, False, _rot)),
            Op(f"uxtab16{_id}", f"uxtab16 %[lo], %[a], %[b]{_sfx}", _xt16(False, True, _rot)),
            Op(f"sxtab{_id}", f"sxtab %[lo], %[a], %[b]{_sfx}", _xta(True, 8, _rot)),
            Op(f"sxtah{_id}", f"sxtah %[lo], %[a], %[b]{_sfx}", _xta(True, 16, _rot)),
            Op(f"uxtab{_id}", f"uxtab %[lo], %[a], %[b]{_sfx}", _xta(False, 8, _rot)),
            Op(f"uxtah{_id}", f"uxtah %[lo], %[a], %[b]{_sfx}", _xta(False, 16, _rot))]
OPS += [Op("sxtb", "sxtb %[lo], %[a]", _xt(True, 8)), Op("sxth", "sxth %[lo], %[a]", _xt(True, 16)),
        Op("uxtb", "uxtb %[lo], %[a]", _xt(False, 8)), Op("uxth", "uxth %[lo], %[a]", _xt(False, 16))]


def _pkhbt(n: int):
    return lambda a, b, lo, hi, f: ((a & 0xFFFF) | (((b << n) & M32) & 0xFFFF0000), hi, f)


def _pkhtb(n: int):
    return lambda a, b, lo, hi, f: ((a & 0xFFFF0000) | ((sint(b, 32) >> n) & 0xFFFF), hi, f)


OPS += [Op("pkhbt", "pkhbt %[lo], %[a], %[b]", _pkhbt(0)),
        Op("pkhbt_lsl8", "pkhbt %[lo], %[a], %[b], lsl #8", _pkhbt(8)),
        Op("pkhbt_lsl16", "pkhbt %[lo], %[a], %[b], lsl #16", _pkhbt(16)),
        Op("pkhtb_asr16", "pkhtb %[lo], %[a], %[b], asr #16", _pkhtb(16)),
        Op("pkhtb_asr4", "pkhtb %[lo], %[a], %[b], asr #4", _pkhtb(4))]

OPS += [Op("usad8", "usad8 %[lo], %[a], %[b]",
           lambda a, b, lo, hi, f: (sum(abs(byte(a, k) - byte(b, k)) for k in range(4)) & M32, hi, f)),
        Op("usada8", "usada8 %[lo], %[a], %[b], %[lo]",
           lambda a, b, lo, hi, f: ((lo + sum(abs(byte(a, k) - byte(b, k)) for k in range(4))) & M32, hi, f)),
        Op("rev", "rev %[lo], %[a]", lambda a, b, lo, hi, f: (int.from_bytes(a.to_bytes(4, "little"), "big"), hi, f)),
        Op("rev16", "rev16 %[lo], %[a]", lambda a, b, lo, hi, f: (
            pack([byte(a, 1), byte(a, 0), byte(a, 3), byte(a, 2)], 8), hi, f)),
        Op("revsh", "revsh %[lo], %[a]", lambda a, b, lo, hi, f: (
            ((sint(byte(a, 0), 8) << 8) | byte(a, 1)) & M32, hi, f)),
        Op("rbit", "rbit %[lo], %[a]", lambda a, b, lo, hi, f: (int(f"{a:032b}"[::-1], 2), hi, f)),
        Op("clz", "clz %[lo], %[a]", lambda a, b, lo, hi, f: (32 - a.bit_length(), hi, f))]


# ---- VFP single precision (A7.7.2xx VMLA, VMLS, VADD, ...): FPSCR reset value -----------------
QNAN = 0x7FC00000   # FPDefaultNaN()


def f2u(x) -> int:
    return struct.unpack("<I", struct.pack("<f", np.float32(x)))[0]


def u2f(u: int) -> np.float32:
    return np.frombuffer(struct.pack("<I", u & M32), np.float32)[0]


def is_nan(u: int) -> bool:
    return (u & 0x7F800000) == 0x7F800000 and (u & 0x7FFFFF) != 0


def is_snan(u: int) -> bool:
    return is_nan(u) and not (u >> 22) & 1


def fp_process_nans(*ops: int) -> int | None:
    """FPProcessNaNs: the first signalling NaN, quieted; else the first quiet NaN; else None."""
    for u in ops:
        if is_snan(u):
            return u | 0x00400000
    for u in ops:
        if is_nan(u):
            return u
    return None


def _fp2(op):
    def f(x: int, y: int) -> int:
        n = fp_process_nans(x, y)
        if n is not None:
            return n
        with np.errstate(all="ignore"):
            r = f2u(op(u2f(x), u2f(y)))
        return QNAN if is_nan(r) else r   # an invalid operation gives the default NaN
    return f


fp_add = _fp2(lambda x, y: x + y)
fp_sub = _fp2(lambda x, y: x - y)
fp_mul = _fp2(lambda x, y: x * y)
fp_div = _fp2(lambda x, y: x / y)


def fp_neg(u: int) -> int:
    return u ^ 0x80000000   # FPNeg flips the sign bit, of a NaN too


def fp_sqrt(u: int) -> int:
    n = fp_process_nans(u)
    if n is not None:
        return n
    with np.errstate(all="ignore"):
        r = f2u(np.sqrt(u2f(u)))
    return QNAN if is_nan(r) else r


def fp_to_s32_rz(u: int) -> int:
    if is_nan(u):
        return 0
    x = float(u2f(u))
    if x != x:
        return 0
    if x >= 2.0 ** 31:
        return 0x7FFFFFFF
    if x <= -(2.0 ** 31):
        return 0x80000000
    return int(x) & M32   # int() rounds toward zero


def _fop(asm: str, mnem: str):
    return f"vmov s14, %[lo]\n\tvmov s15, %[a]\n\tvmov s13, %[b]\n\t{asm}\n\tvmov %[lo], s14", mnem


def _f(name: str, insn: str, fn):
    text, mnem = _fop(insn, name.split("_")[0])
    OPS.append(Op(name, text, lambda a, b, lo, hi, f: (fn(a, b, lo), hi, f), "f32", mnem))


# VMLA: S[d] = FPAdd(S[d], FPMul(S[n], S[m])); VMLS: FPAdd(S[d], FPNeg(FPMul(...))): two roundings
_f("vmla", "vmla.f32 s14, s15, s13", lambda a, b, lo: fp_add(lo, fp_mul(a, b)))
_f("vmls", "vmls.f32 s14, s15, s13", lambda a, b, lo: fp_add(lo, fp_neg(fp_mul(a, b))))
_f("vadd", "vadd.f32 s14, s15, s13", lambda a, b, lo: fp_add(a, b))
_f("vsub", "vsub.f32 s14, s15, s13", lambda a, b, lo: fp_sub(a, b))
_f("vmul", "vmul.f32 s14, s15, s13", lambda a, b, lo: fp_mul(a, b))
_f("vdiv", "vdiv.f32 s14, s15, s13", lambda a, b, lo: fp_div(a, b))
_f("vsqrt", "vsqrt.f32 s14, s15", lambda a, b, lo: fp_sqrt(a))
_f("vabs", "vabs.f32 s14, s15", lambda a, b, lo: a & 0x7FFFFFFF)
_f("vneg", "vneg.f32 s14, s15", lambda a, b, lo: a ^ 0x80000000)
_f("vcvt_s32_f32", "vcvt.s32.f32 s14, s15", lambda a, b, lo: fp_to_s32_rz(a))
_f("vcvt_f32_s32", "vcvt.f32.s32 s14, s15", lambda a, b, lo: f2u(np.float32(sint(a, 32))))
_f("vcvt_f32_u32", "vcvt.f32.u32 s14, s15", lambda a, b, lo: f2u(np.float32(a)))

OP_BY_NAME = {op.name: op for op in OPS}


# ---- vectors: edge cases (lane overflow, GE from each lane alone, saturation) + random ---------
_EDGE = [0x00000000, 0xFFFFFFFF, 0x80808080, 0x7F7F7F7F, 0x80000000, 0x7FFFFFFF, 0x00008000, 0x80007FFF,
         0x7FFF8000, 0x0000FFFF, 0xFFFF0000, 0x01020304, 0xFF00FF00, 0x00FF00FF, 0x807F0180, 0x00000001]
# one lane negative at a time: SSUB8/SEL's GE per lane (the pooling maximum)
_ONE_LANE = [0x000000FF, 0x0000FF00, 0x00FF0000, 0xFF000000, 0x00000080, 0x00008000, 0x00800000]
_FLOATS = [f2u(v) for v in (0.0, -0.0, 1.0, -1.5, 3.0e38, -3.0e38, 1.0e-38, 1.0e-45, -2.5e-42, 0.1,
                            1.0 / 3.0, 16777217.0, 2.0 ** 31, -(2.0 ** 31), 1.0e10)] + \
    [0x7F800000, 0xFF800000, 0x00800000, 0x007FFFFF]


def vectors(op: Op, n_random: int = 12, seed: int = 31) -> list[tuple[int, int, int, int, int]]:
    """(a, b, lo, hi, apsr) inputs for `op`: the edges paired up, each lane's sign alone, random."""
    rng = random.Random(f"{seed}:{op.name}")
    out = []
    if op.kind == "f32":
        pool = _FLOATS
        pairs = [(pool[i], pool[(i * 7 + 3) % len(pool)], pool[(i * 5 + 1) % len(pool)]) for i in range(len(pool))]
        for _ in range(n_random):
            pairs.append(tuple(f2u(np.float32(rng.uniform(-4, 4) * 10.0 ** rng.randint(-6, 6))) for _ in range(3)))
        # the learner's sizes: small products added to a larger sum (rounding of the product first)
        pairs.append((f2u(1.0000001), f2u(1.0000001), f2u(-1.0)))
        pairs.append((f2u(np.float32(16777215.0)), f2u(np.float32(1.0000001)), f2u(np.float32(1.0))))
        return [(a, b, c, 0, 0) for a, b, c in pairs]
    edges = _EDGE + _ONE_LANE
    for i, a in enumerate(edges):
        b = edges[(i * 5 + 3) % len(edges)]
        out.append((a, b, edges[(i * 3 + 1) % len(edges)], edges[(i * 11 + 2) % len(edges)],
                    (rng.getrandbits(5) << 27) | (rng.getrandbits(4) << 16)))
    for lane in _ONE_LANE:    # a - b with exactly one lane negative, and the reverse
        out.append((0x10101010, 0x10101010 ^ lane, 0, 0, 0x000F0000))
        out.append((0x10101010 ^ lane, 0x10101010, 0, 0, 0))
    for ge in range(16):      # SEL from every GE pattern; Q clear then set (sticky)
        out.append((0x11223344, 0xAABBCCDD, 0x00000000, 0, (ge << 16) | ((ge & 1) << 27)))
    for _ in range(n_random):
        out.append((rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32),
                    (rng.getrandbits(5) << 27) | (rng.getrandbits(4) << 16)))
    return out


def expected(op: Op, v: tuple[int, int, int, int, int]) -> tuple[int, int, int]:
    a, b, lo, hi, apsr = v
    r_lo, r_hi, r_apsr = op.fn(a, b, lo, hi, apsr & APSR_MASK)
    return r_lo & M32, r_hi & M32, r_apsr & APSR_MASK





# ---- the device's boot self-test (python -m tinyol.gen_defs -> mcu/src/kernels/tol_cpu_kat.h) ----
@dataclass(frozen=True)
class CpuCheck:
    """One check of the firmware's boot self-test: the kernel helper (or the learner's
    multiply-accumulate) that runs `op`, on known answers computed here."""
    name: str       # as the device reports it (boot line, `tinyol doctor`)
    op: str         # the oracle's instruction (OP_BY_NAME)
    c_expr: str     # C over uint32_t a, b, c giving the result (uint64_t: hi << 32 | lo)
    kernels: str    # "simd": used by the SIMD kernels only; "all": the learner (every build)
    uses: str       # what on the device relies on it (for the one-line verdict)


CPU_CHECKS: list[CpuCheck] = [
    CpuCheck("ssub8+sel", "ssub8_sel", "tol_max_s8x4(a, b)", "simd", "MAX_POOL_2D (four lanes per word)"),
    CpuCheck("sxtb16", "sxtb16", "tol_sxtb16(a)", "simd", "CONV_2D/DEPTHWISE/FULLY_CONNECTED weights"),
    CpuCheck("sxtb16.ror8", "sxtb16_ror8", "tol_sxtb16_ror8(a)", "simd", "CONV_2D/DEPTHWISE/FULLY_CONNECTED weights"),
    CpuCheck("sxtab16", "sxtab16", "tol_sxtab16(a, b)", "simd", "convolution inputs, AVERAGE_POOL_2D sums"),
    CpuCheck("sxtab16.ror8", "sxtab16_ror8", "tol_sxtab16_ror8(a, b)", "simd", "convolution inputs, AVERAGE_POOL_2D sums"),
    CpuCheck("smlad", "smlad", "(uint32_t)tol_smlad(a, b, (int32_t)c)", "simd", "every dot product (CONV_2D, FULLY_CONNECTED)"),
    CpuCheck("smlabb", "smlabb", "(uint32_t)tol_smlabb(a, b, (int32_t)c)", "simd", "DEPTHWISE_CONV_2D"),
    CpuCheck("smlatt", "smlatt", "(uint32_t)tol_smlatt(a, b, (int32_t)c)", "simd", "DEPTHWISE_CONV_2D"),
    CpuCheck("ssat", "ssat8", "(uint32_t)tol_ssat8((int32_t)a)", "simd", "requantization clamps"),
    CpuCheck("smlal", "smlal", "(uint64_t)((int64_t)(int32_t)a * (int32_t)b + (int64_t)c)", "simd",
             "requantization (MultiplyByQuantizedMultiplier)"),
    CpuCheck("vmla.f32", "vmla", "tol_cpu_f2u_(tol_fmac_mla(tol_cpu_u2f_(c), tol_cpu_u2f_(a), tol_cpu_u2f_(b)))",
             "all", "the learner's float updates"),
    CpuCheck("vmls.f32", "vmls", "tol_cpu_f2u_(tol_fmac_mls(tol_cpu_u2f_(c), tol_cpu_u2f_(a), tol_cpu_u2f_(b)))",
             "all", "the learner's float updates"),
]
# checks whose failure the SIMD kernels route around at boot (a portable path, same results)
CPU_FALLBACKS = {"ssub8+sel"}


def cpu_check_vectors(check: CpuCheck, n: int = 10) -> list[tuple[int, int, int, int, int]]:
    """(a, b, c, lo, hi) known answers: the edge vectors first (lane signs, overflow,
    saturation), every one-lane case for the maximum, then random ones; `hi` in is 0."""
    op = OP_BY_NAME[check.op]
    vs = [v for v in vectors(op) if check.kernels != "all" or all(not is_nan(x) and (x & 0x7F800000) != 0x7F800000
                                                                  for x in v[:3])]
    pick = vs[:n]
    if check.op == "ssub8_sel":   # small differences each way in every lane: Renode 1.15.3 fails these
        pick += [v for v in vs if 0x10101010 in v[:2]][:8]
        pick += [(0x05050505, 0x01010101, 0, 0, 0), (0x7F7F7F7F, 0x00FF0000, 0, 0, 0)]
    out = []
    for a, b, c, _hi, _f in pick:
        lo, hi, _ = expected(op, (a, b, c, 0, 0))
        # the helper returns one word (lo), but for a 64-bit result (SMLAL: RdHi:RdLo); the
        # composite ops' hi is their first instruction's result, which the helper discards
        out.append((a, b, c, lo, hi if check.c_expr.startswith("(uint64_t)") else 0))
    return out


def cpu_checks_named(mask: int | None) -> list[str]:
    """The names of the checks in a BOARD bit mask."""
    if not mask:
        return []
    return [c.name for i, c in enumerate(CPU_CHECKS) if mask >> i & 1]
def cpu_verdict(faults: int | None, fallbacks: int | None = 0) -> str | None:
    """One line for a BOARD fault mask: which instruction this core gets wrong and what the kit
    does about it; None when the core agrees with the architecture (or the firmware predates
    the self-test: faults None)."""
    if not faults:
        return None
    parts = []
    for i, c in enumerate(CPU_CHECKS):
        if faults >> i & 1:
            if (fallbacks or 0) >> i & 1:
                parts.append(f"{c.name.upper()} ({c.uses}: its portable path is in use, outputs stay exact)")
            elif c.kernels == "all":
                parts.append(f"{c.name.upper()} ({c.uses} will differ from the reference learner)")
            else:
                parts.append(f"{c.name.upper()} ({c.uses}: outputs are wrong here; build with --kernels ref)")
    parts += [f"check {i}" for i in range(len(CPU_CHECKS), 32) if faults >> i & 1]
    return "this core mis-executes " + "; ".join(parts) + " (boot self-test, ARMv7-M pseudo-code answers)"


__all__ = ["cpu_verdict", "OPS", "OP_BY_NAME", "Op", "vectors", "expected", "APSR_MASK", "f2u", "u2f", "CPU_CHECKS", "CpuCheck", "CPU_FALLBACKS", "cpu_check_vectors", "cpu_checks_named"]
