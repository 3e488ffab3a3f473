"""TFLM's int8 arithmetic for the ops whose int8 output depends on one input byte.

TFLM computes LOGISTIC, TANH, LEAKY_RELU and HARD_SWISH on int8 with integer
fixed-point code (gemmlowp's ``FixedPoint`` for logistic/tanh, int16 multipliers for
hard-swish). For a given input quantization the output is a function of the input
byte alone, so codegen evaluates that code here, with Python integers that wrap and
saturate exactly as the C++ does, for all 256 inputs and emits the table; the
device kernel is a table lookup (``tol_lut_s8``). SOFTMAX's exp() of the
max-relative difference is tabulated the same way (``softmax_exp_table``); the
rest of softmax (the sum, the reciprocal, the output scaling) runs on the device.

Sources followed line by line (TFLM 90b983c2, gemmlowp fixedpoint.h):
``reference_integer_ops::Logistic/Tanh``, ``reference_ops::QuantizeLeakyRelu``,
``reference_ops::HardSwish<int8_t>``, ``reference_ops::Softmax<int8_t,int8_t>``
and their Prepare functions (``logistic_common.cc``, ``tanh.cc``,
``leaky_relu_common.cc``, ``hard_swish_common.cc``, ``softmax_common.cc``).
The tests check every table against TFLM's runtime for all 256 inputs.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import TinyolError

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I16_MIN, I16_MAX = -(1 << 15), (1 << 15) - 1


class Unsupported(TinyolError):
    """The quantization parameters are outside what TFLM's int8 kernel accepts."""


# --------------------------------------------------------------------------- integer helpers

def w32(x: int) -> int:
    """Wrap to int32 (two's complement)."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def w16(x: int) -> int:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def _trunc_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero), b > 0."""
    q = abs(a) // b
    return q if a >= 0 else -q


def srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul (int32)."""
    if a == b == I32_MIN:
        return I32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return w32(_trunc_div(ab + nudge, 1 << 31))


def rdbpot(x: int, e: int) -> int:
    """gemmlowp RoundingDivideByPOT, exponent in [0, 31]."""
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def sat_mul_pot(x: int, e: int) -> int:
    """gemmlowp SaturatingRoundingMultiplyByPOT<e> (int32)."""
    if e == 0:
        return x
    if e < 0:
        return rdbpot(x, -e)
    thr = (1 << (31 - e)) - 1
    if x > thr:
        return I32_MAX
    if x < -thr:
        return I32_MIN
    return w32(x << e)


def mbqm(x: int, mult: int, shift: int) -> int:
    """TFLM MultiplyByQuantizedMultiplier (double rounding), positive shift = left."""
    left, right = max(shift, 0), max(-shift, 0)
    return rdbpot(srdhm(w32(x * (1 << left)), mult), right)


def round_half_away(x: float) -> int:
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLM QuantizeMultiplier(double): (Q31 multiplier, shift), positive shift = left."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = round_half_away(q * (1 << 31))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    return int(q_fixed), int(shift)


def input_radius(integer_bits: int, left_shift: int, total_bits: int = 31) -> int:
    """TFLM CalculateInputRadius (double arithmetic, floor)."""
    v = 1.0 * ((1 << integer_bits) - 1) * (1 << (total_bits - integer_bits)) / (1 << left_shift)
    return int(math.floor(v))


# --------------------------------------------------------------------------- gemmlowp FixedPoint<int32>

def _rounding_half_sum(a: int, b: int) -> int:
    s = a + b
    return w32(_trunc_div(s + (1 if s >= 0 else -1), 2))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: int) -> int:
    const_term, one_third = 1895147668, 715827883
    x = w32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = sat_mul_pot(x4, -2)
    t = sat_mul_pot(w32(srdhm(w32(x4_over_4 + x3), one_third) + x2), -1)
    return w32(const_term + srdhm(const_term, w32(x + t)))


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a: int, integer_bits: int) -> int:
    """exp(a) for a <= 0 given as FixedPoint<int32, integer_bits>; result Q0.31 raw."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = w32((a & (quarter - 1)) - quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(sat_mul_pot(a_mod, integer_bits))
    remainder = w32(a_mod - a)
    for exponent, mult in _EXP_BARREL:
        if integer_bits > exponent and remainder & (1 << (frac + exponent)):
            result = srdhm(result, mult)
    if integer_bits > 5 and a < -(1 << (36 - integer_bits)):
        result = 0
    if a == 0:
        result = I32_MAX
    return result


def _newton_reciprocal(a: int) -> tuple[int, int]:
    """Shared part of one_over_one_plus_x / one_minus_x_over_one_plus_x: x ~ 1/(1+a) in Q2.29."""
    hd = _rounding_half_sum(a, I32_MAX)
    x = w32(1515870810 + srdhm(hd, -1010580540))
    for _ in range(3):
        one_minus = w32((1 << 29) - srdhm(hd, x))
        x = w32(x + sat_mul_pot(srdhm(x, one_minus), 2))
    return x, hd


def one_over_one_plus_x_for_x_in_0_1(a: int) -> int:
    x, _ = _newton_reciprocal(a)
    return sat_mul_pot(x, 1)


def one_minus_x_over_one_plus_x_for_x_in_0_1(a: int) -> int:
    x, _ = _newton_reciprocal(a)
    return sat_mul_pot(w32(x - (1 << 29)), 2)


def fp_logistic(a: int, integer_bits: int) -> int:
    abs_in = a if a > 0 else w32(-a)
    pos = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(w32(-abs_in), integer_bits))
    if a == 0:
        return 1 << 30
    return pos if a > 0 else w32(I32_MAX - pos)


def fp_tanh(a: int, integer_bits: int) -> int:
    n = a if a < 0 else w32(-a)
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    if a == 0:
        return 0
    return w32(-t) if a < 0 else t


# --------------------------------------------------------------------------- int16 helpers (hard-swish)

def _srdhm16(a: int, b: int) -> int:
    if a == b == I16_MIN:
        return I16_MAX
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    return w16(_trunc_div(ab + nudge, 1 << 15))


def _sdhm16(a: int, b: int) -> int:
    if a == b == I16_MIN:
        return I16_MAX
    return w16(_trunc_div(a * b, 1 << 15))


def _sat_left_shift16(v: int, amount: int) -> int:
    return max(I16_MIN, min(I16_MAX, v * (1 << amount)))


def _downscale_to_int16(m: int) -> int:
    if m >= I32_MAX - (1 << 15):
        return I16_MAX
    return (m + (1 << 15)) >> 16


# --------------------------------------------------------------------------- tables

_BYTES = range(-128, 128)


def _f32(x) -> np.float32:
    return np.float32(x)


def _sigmoid_prep(in_scale: float) -> tuple[int, int, int]:
    real = float(_f32(in_scale)) * float(1 << 27)          # kInputIntegerBits = 4
    q, left_shift = math.frexp(real)
    mult = round_half_away(q * (1 << 31))
    if left_shift < 0 or left_shift > 27 or mult >= (1 << 31):
        raise Unsupported(f"input scale {in_scale} is outside TFLM's int8 range for this op")
    return mult, left_shift, input_radius(4, left_shift)


def logistic_table(in_scale: float, in_zp: int) -> np.ndarray:
    """int8 LOGISTIC output (scale 1/256, zero point -128) for inputs -128..127."""
    mult, shift, radius = _sigmoid_prep(in_scale)
    out = []
    for v in _BYTES:
        x = v - in_zp
        if x <= -radius:
            out.append(-128)
        elif x >= radius:
            out.append(127)
        else:
            r = rdbpot(fp_logistic(mbqm(x, mult, shift), 4), 23) - 128
            out.append(max(-128, min(127, r)))
    return np.array(out, np.int8)


def tanh_table(in_scale: float, in_zp: int) -> np.ndarray:
    """int8 TANH output (scale 1/128, zero point 0) for inputs -128..127."""
    mult, shift, radius = _sigmoid_prep(in_scale)
    out = []
    for v in _BYTES:
        x = v - in_zp
        if x <= -radius:
            out.append(-128)
        elif x >= radius:
            out.append(127)
        else:
            r = rdbpot(fp_tanh(mbqm(x, mult, shift), 4), 24)
            out.append(max(-128, min(127, r)))
    return np.array(out, np.int8)


def leaky_relu_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, alpha: float) -> np.ndarray:
    alpha_real = float(_f32(_f32(in_scale) * _f32(alpha)) / _f32(out_scale))
    ident_real = float(_f32(in_scale) / _f32(out_scale))
    am, ash = quantize_multiplier(alpha_real)
    im, ish = quantize_multiplier(ident_real)
    neg = am < 0
    am = -am if neg else am
    out = []
    for v in _BYTES:
        x = v - in_zp
        if x >= 0:
            r = out_zp + mbqm(x, im, ish)
        else:
            s = mbqm(x, am, ash)
            r = out_zp + (-s if neg else s)
        out.append(max(-128, min(127, r)))
    return np.array(out, np.int8)


def hard_swish_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    hires = _f32(_f32(1.0 / 128.0) * _f32(in_scale))
    reluish_scale = _f32(_f32(3.0) / _f32(32768.0))
    om32, oexp = quantize_multiplier(float(_f32(hires / _f32(out_scale))))
    rm32, rexp = quantize_multiplier(float(_f32(hires / reluish_scale)))
    if oexp > 0:
        raise Unsupported("HARD_SWISH output scale is smaller than input scale / 128 (TFLM refuses it)")
    if -oexp > 15 or -rexp > 15:
        raise Unsupported("HARD_SWISH scales are too far apart for TFLM's int16 arithmetic")
    om16, rm16 = _downscale_to_int16(om32), _downscale_to_int16(rm32)
    out = []
    for v in _BYTES:
        iv = w16(v - in_zp)
        hi = w16(iv * (1 << 7))
        pre = _srdhm16(hi, om16)
        r = hi
        if rexp > 0:
            r = _sat_left_shift16(r, rexp - 1)
        r = _srdhm16(r, rm16)
        if rexp > 0:
            r = _sat_left_shift16(r, 1)
        if rexp < 0:
            r = rdbpot(r, -rexp)
        r = w16((r + (1 << 15)) >> 1)
        o = rdbpot(_sdhm16(r, pre), -oexp)
        o = w16(o + out_zp)
        out.append(max(-128, min(127, o)))
    return np.array(out, np.int8)


def softmax_exp_table(in_scale: float, beta: float) -> np.ndarray:
    """exp(beta * in_scale * diff) in Q0.31 for diff = 0, -1, ..., -255 (index = -diff).

    Entries below TFLM's diff_min are 0: TFLM skips them (they add nothing to the sum and
    output -128), and a 0 entry gives exactly that on the device."""
    real = min(float(beta) * float(_f32(in_scale)) * float(1 << 26), float((1 << 31) - 1))
    if real <= 1.0:
        raise Unsupported("SOFTMAX input scale * beta is too small for TFLM's int8 kernel")
    mult, left_shift = quantize_multiplier(real)
    diff_min = -input_radius(5, left_shift)
    out = np.zeros(256, np.int32)
    for d in range(256):
        diff = -d
        if diff >= diff_min:
            out[d] = exp_on_negative_values(srdhm(w32(diff * (1 << left_shift)), mult), 5)
    return out
