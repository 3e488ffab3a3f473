/*
 * tol_kernels.h - int8 inference kernels, bit-exact with TensorFlow Lite
 * Micro's reference kernels (checked against the tflite-micro runtime).
 *
 * Two implementations share this header and are chosen by FILE at build time:
 *   mcu/src/kernels/ref/   plain C
 *   mcu/src/kernels/simd/  Cortex-M4 DSP (ACLE, see tol_acle.h)
 * Link exactly one of the two directories.
 *
 * Conventions for every kernel:
 *   - Tensors are int8, batch 1, layout NHWC without N: [H][W][C].
 *   - The caller owns all buffers (inputs, outputs, weights). Kernels keep no
 *     state and allocate nothing. Input and output buffers must not overlap
 *     unless a kernel says otherwise.
 *   - Parameter structs are filled by generated code (host/tinyol/model/codegen.py)
 *     and usually live in flash. Kernels do not validate them: the code
 *     generator checks shapes and ranges before emitting a call.
 *   - Requantization follows TFLM: value' = MBQM(acc, mult, shift) with
 *     mult a Q31 multiplier in [2^30, 2^31) (or 0) and shift in [-31, 30],
 *     positive = left shift. Multipliers are computed on the host.
 *   - Offsets follow TFLM naming: input_offset = -input_zero_point,
 *     output_offset = +output_zero_point.
 */
#ifndef TOL_KERNELS_H
#define TOL_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CONV_2D and DEPTHWISE_CONV_2D parameters. */
typedef struct {
    int32_t in_h, in_w, in_c;      /* input shape [in_h][in_w][in_c], each >= 1 */
    int32_t out_h, out_w, out_c;   /* output shape [out_h][out_w][out_c] */
    int32_t k_h, k_w;              /* filter height/width, >= 1 */
    int32_t stride_h, stride_w;    /* >= 1 */
    int32_t dil_h, dil_w;          /* dilation factors, >= 1 */
    int32_t pad_top, pad_left;     /* implicit zero padding (taps outside the
                                      image are skipped, as in TFLM), >= 0 */
    int32_t depth_mult;            /* depthwise only: out_c = in_c * depth_mult;
                                      ignored by tol_conv2d_s8 */
    int32_t input_offset;          /* -input zero point, [-127, 128] */
    int32_t output_offset;         /* output zero point, [-128, 127] */
    int32_t act_min, act_max;      /* output clamp, -128 <= act_min <= act_max <= 127 */
    const int8_t *weights;         /* conv: [out_c][k_h][k_w][in_c];
                                      depthwise: [k_h][k_w][out_c]; zero point 0 */
    const int32_t *bias;           /* [out_c] (scale in_scale*w_scale) or NULL */
    const int32_t *out_mult;       /* [out_c] per-channel multipliers */
    const int32_t *out_shift;      /* [out_c] per-channel shifts */
    int8_t *scratch;               /* CONV_2D only: work buffer of
                                      TOL_CONV2D_SCRATCH_BYTES(k_h, k_w, in_c) bytes,
                                      4-byte aligned, caller-owned, contents not kept
                                      between calls; may be NULL (slower SIMD path).
                                      The reference kernels ignore it. */
    int32_t scratch_px;            /* CONV_2D only: output pixels the scratch holds a
                                      column for, 0 or 2 (two: TOL_CONV2D_SCRATCH_BYTES)
                                      up to 16 (TOL_CONV2D_SCRATCH_PX_BYTES). With 4 or
                                      more, the SIMD kernel reads each filter pair from
                                      flash once per block of that many pixels instead
                                      of once per pixel pair (fewer flash wait states,
                                      more RAM). Ignored by the reference kernels. */
} tol_conv_params_t;

/* Scratch bytes tol_conv2d_s8 may use: two int16 columns of the kernel window
 * (k_h * k_w * in_c values, rounded up to a multiple of 4). */
#define TOL_CONV2D_SCRATCH_BYTES(k_h, k_w, in_c) (4 * ((((k_h) * (k_w) * (in_c)) + 3) / 4 * 4))
/* The scratch of scratch_px = n pixels: one two-column block per pixel pair. */
#define TOL_CONV2D_SCRATCH_PX_BYTES(k_h, k_w, in_c, n) ((((n) + 1) / 2) * TOL_CONV2D_SCRATCH_BYTES(k_h, k_w, in_c))

/* FULLY_CONNECTED parameters: out[r][o] = sum_i w[o][i] * (in[r][i] + input_offset). */
typedef struct {
    int32_t rows;                  /* number of input vectors (batch rows), >= 1 */
    int32_t in_features;           /* accumulation depth, >= 1 */
    int32_t out_features;          /* >= 1 */
    int32_t input_offset;          /* -input zero point */
    int32_t output_offset;         /* output zero point */
    int32_t act_min, act_max;      /* output clamp */
    const int8_t *weights;         /* [out_features][in_features], zero point 0 */
    const int32_t *bias;           /* [out_features] or NULL */
    const int32_t *out_mult;       /* [out_features] (per-tensor: all equal) */
    const int32_t *out_shift;      /* [out_features] */
} tol_fc_params_t;

/* FULLY_CONNECTED with the weights pre-widened to int16 on the host (`tinyol export
 * --fc-weights int16`: twice the weight flash, no widening in the MAC loop). Same
 * fields and semantics as tol_fc_params_t except the weight layout: int16 values,
 * two per word (first value in the low half), in blocks of 4 output rows
 * o0 = 0, 4, ... while o0 + 4 <= out_features; G = in_features / 4 groups of 4
 * inputs, T = in_features % 4 tail inputs:
 *   block of 4 rows (4 * in_features halves): for g < G, for j < 4:
 *       w[o0+j][4g], w[o0+j][4g+2], w[o0+j][4g+1], w[o0+j][4g+3]
 *     then for t < T: w[o0][4G+t], w[o0+1][4G+t], w[o0+2][4G+t], w[o0+3][4G+t];
 *   each remaining row o (out_features % 4 of them, 4G + 2T halves):
 *       for g < G: w[o][4g], w[o][4g+2], w[o][4g+1], w[o][4g+3]; then for t < T: w[o][4G+t], 0.
 * (the pair order is the lane order SXTAB16 gives the inputs). Words:
 * TOL_FC16_WEIGHT_WORDS(in_features, out_features). */
typedef struct {
    int32_t rows;                  /* number of input vectors (batch rows), >= 1 */
    int32_t in_features;           /* accumulation depth, >= 1 */
    int32_t out_features;          /* >= 1 */
    int32_t input_offset;          /* -input zero point */
    int32_t output_offset;         /* output zero point */
    int32_t act_min, act_max;      /* output clamp */
    const uint32_t *weights;       /* int16 pairs in the blocked layout above, zero point 0 */
    const int32_t *bias;           /* [out_features] or NULL */
    const int32_t *out_mult;       /* [out_features] */
    const int32_t *out_shift;      /* [out_features] */
} tol_fc16_params_t;

#define TOL_FC16_WEIGHT_WORDS(in_f, out_f) \
    (((out_f) / 4) * 2 * (in_f) + ((out_f) % 4) * (2 * ((in_f) / 4) + (in_f) % 4))

/* AVERAGE_POOL_2D / MAX_POOL_2D parameters (input and output share scale and
 * zero point, as TFLM requires). */
typedef struct {
    int32_t in_h, in_w, c;         /* input [in_h][in_w][c] */
    int32_t out_h, out_w;          /* output [out_h][out_w][c] */
    int32_t k_h, k_w;              /* window */
    int32_t stride_h, stride_w;
    int32_t pad_top, pad_left;     /* windows are clipped to the image */
    int32_t act_min, act_max;      /* output clamp */
} tol_pool_params_t;

/* MEAN over H and W of a [h][w][c] tensor -> [c] (GlobalAveragePooling2D).
 * TFLM semantics: when input and output quantization are equal (requant == 0)
 * out = sum / (h*w) (integer division, truncating); otherwise
 * out = clamp(MBQM(sum - input_zp*h*w, mult, shift) + output_zp), where the
 * multiplier already contains 1/(h*w) (computed on the host as TFLM does). */
typedef struct {
    int32_t h, w, c;
    int32_t requant;               /* 0: integer mean, 1: rescale (TFLM's int8 MEAN
                                      always rescales: codegen emits 1) */
    int32_t input_zp, output_zp;   /* zero points */
    int32_t mult, shift;           /* requant only */
} tol_mean_params_t;

/* ADD of two same-shape int8 tensors, each with its own scale (TFLM scheme,
 * left_shift 20, three multipliers). */
typedef struct {
    int32_t size;                  /* number of elements */
    int32_t in1_offset, in2_offset;/* -zero points */
    int32_t left_shift;            /* 20 for int8 */
    int32_t in1_mult, in1_shift;   /* shift <= 0 */
    int32_t in2_mult, in2_shift;
    int32_t out_mult, out_shift;
    int32_t output_offset;         /* output zero point */
    int32_t act_min, act_max;
} tol_add_params_t;

/* PAD of H and W (ZeroPadding2D); padded cells get pad_value. */
typedef struct {
    int32_t in_h, in_w, c;         /* input [in_h][in_w][c] */
    int32_t out_h, out_w;          /* output [out_h][out_w][c] */
    int32_t pad_top, pad_left;     /* bottom/right padding follow from out_h/out_w */
    int32_t pad_value;             /* output zero point, [-128, 127] */
} tol_pad_params_t;

/* Element-wise requantization (QUANTIZE int8->int8, standalone RELU/RELU6):
 * out = clamp(MBQM(in - input_zp, mult, shift) + output_zp, act_min, act_max). */
typedef struct {
    int32_t size;
    int32_t input_zp;
    int32_t mult, shift;
    int32_t output_zp;
    int32_t act_min, act_max;
} tol_requant_params_t;

/* CONV_2D. input [in_h][in_w][in_c] (read), output [out_h][out_w][out_c] (written). */
void tol_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output);

/* DEPTHWISE_CONV_2D, any depth multiplier; output channel = ic * depth_mult + m. */
void tol_depthwise_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output);

/* FULLY_CONNECTED. input [rows][in_features], output [rows][out_features]. */
void tol_fully_connected_s8(const tol_fc_params_t *p, const int8_t *input, int8_t *output);

/* FULLY_CONNECTED with pre-widened int16 weights (tol_fc16_params_t); same results. */
void tol_fully_connected_s8w16(const tol_fc16_params_t *p, const int8_t *input, int8_t *output);

/* AVERAGE_POOL_2D (rounded integer average over the clipped window). */
void tol_avgpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output);

/* MAX_POOL_2D. */
void tol_maxpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output);

/* MEAN over axes H, W. input [h][w][c], output [c]. */
void tol_mean_hw_s8(const tol_mean_params_t *p, const int8_t *input, int8_t *output);

/* ADD. in1, in2, output: [size]. output may alias in1 or in2 (element-wise). */
void tol_add_s8(const tol_add_params_t *p, const int8_t *in1, const int8_t *in2, int8_t *output);

/* PAD. input [in_h][in_w][c], output [out_h][out_w][c]. */
void tol_pad_s8(const tol_pad_params_t *p, const int8_t *input, int8_t *output);

/* Requantize / RELU. input, output: [size]; output may alias input. */
void tol_requantize_s8(const tol_requant_params_t *p, const int8_t *input, int8_t *output);

/* ---- activations, reductions, concatenation, arithmetic with a constant ----
 * (mcu/src/kernels/{ref,simd}/tol_activation.c, tol_reduce.c, tol_concat.c,
 * tol_const_arith.c) */

/* Element-wise int8 -> int8 function given as a table (LOGISTIC, TANH,
 * LEAKY_RELU, HARD_SWISH): out[i] = table[in[i] + 128]. The host fills the
 * table by evaluating TFLM's integer kernel for every input byte
 * (host/tinyol/model/tflm_int8.py), so the lookup equals TFLM bit for bit. */
typedef struct {
    int32_t size;                  /* number of elements, >= 1 */
    const int8_t *table;           /* [256], indexed by input + 128 */
} tol_lut_params_t;

/* SOFTMAX over the last axis (int8 in, int8 out with scale 1/256, zero point
 * -128), TFLM reference_ops::Softmax: exp of (x - row max) from a Q0.31 table,
 * sum in Q12.19, gemmlowp reciprocal, output = RDBPOT(recip * exp, bits) - 128. */
typedef struct {
    int32_t rows;                  /* product of all but the last dimension, >= 1 */
    int32_t depth;                 /* last dimension, 1..511 (sum of exps < 2^28) */
    const int32_t *exp_table;      /* [256]: exp(beta * scale * -d) in Q0.31 for
                                      d = row max - x; 0 where TFLM skips (d beyond diff_min) */
} tol_softmax_params_t;

/* MEAN / REDUCE_MAX over one run of contiguous axes: input viewed as
 * [outer][n][inner], output [outer][inner]. MEAN has tol_mean_params_t's
 * semantics (requant 0: truncating integer mean; 1: MBQM with 1/n folded into
 * mult/shift); REDUCE_MAX needs equal input/output quantization and ignores
 * the quantization fields. */
typedef struct {
    int32_t outer, n, inner;       /* each >= 1 */
    int32_t requant;               /* MEAN only */
    int32_t input_zp, output_zp;   /* MEAN only */
    int32_t mult, shift;           /* MEAN only, requant == 1 */
} tol_reduce_params_t;

/* CONCATENATION of n_inputs tensors with equal quantization along one axis:
 * each input viewed as [outer][inner[k]], output [outer][sum inner]. */
typedef struct {
    int32_t outer;                 /* product of the dimensions before the axis, >= 1 */
    int32_t n_inputs;              /* >= 1 */
    const int32_t *inner;          /* [n_inputs]: elements from the axis on, per input */
} tol_concat_params_t;

/* MUL by a constant broadcast along the last axis (an unfused
 * BatchNormalization's scale): TFLM reference_integer_ops::Mul with
 * factor[c] = constant[c] - constant zero point precomputed:
 * out[i] = clamp(MBQM((in[i] + input_offset) * factor[i % period], out_mult,
 * out_shift) + output_offset). period 1 = scalar constant. */
typedef struct {
    int32_t size;                  /* elements, a multiple of period */
    int32_t period;                /* constant length, >= 1 */
    int32_t input_offset;          /* -input zero point */
    const int32_t *factor;         /* [period] */
    int32_t out_mult, out_shift;
    int32_t output_offset;
    int32_t act_min, act_max;
} tol_mul_const_params_t;

/* ADD (or SUB) of a constant broadcast along the last axis (an unfused
 * BatchNormalization's offset): TFLM's ADD arithmetic (left shift 20) with the
 * constant's rescaled term precomputed on the host:
 * out[i] = clamp(MBQM(MBQM((in[i] + input_offset) << left_shift, in_mult,
 * in_shift) + addend[i % period], out_mult, out_shift) + output_offset). */
typedef struct {
    int32_t size;
    int32_t period;
    int32_t input_offset;
    int32_t left_shift;            /* 20 */
    int32_t in_mult, in_shift;     /* shift <= 0 */
    const int32_t *addend;         /* [period], already scaled (negated for SUB) */
    int32_t out_mult, out_shift;
    int32_t output_offset;
    int32_t act_min, act_max;
} tol_add_const_params_t;

/* Table lookup. input, output: [size]; output may alias input. */
void tol_lut_s8(const tol_lut_params_t *p, const int8_t *input, int8_t *output);

/* SOFTMAX. input, output: [rows][depth]; must not overlap. */
void tol_softmax_s8(const tol_softmax_params_t *p, const int8_t *input, int8_t *output);

/* MEAN over the middle axis. input [outer][n][inner], output [outer][inner]. */
void tol_mean_s8(const tol_reduce_params_t *p, const int8_t *input, int8_t *output);

/* REDUCE_MAX over the middle axis. input [outer][n][inner], output [outer][inner]. */
void tol_reduce_max_s8(const tol_reduce_params_t *p, const int8_t *input, int8_t *output);

/* CONCATENATION. inputs: n_inputs pointers (caller-owned); output must not
 * overlap any input. */
void tol_concat_s8(const tol_concat_params_t *p, const int8_t *const *inputs, int8_t *output);

/* MUL by a constant. input, output: [size]; output may alias input. */
void tol_mul_const_s8(const tol_mul_const_params_t *p, const int8_t *input, int8_t *output);

/* ADD/SUB of a constant. input, output: [size]; output may alias input. */
void tol_add_const_s8(const tol_add_const_params_t *p, const int8_t *input, int8_t *output);

/* TFLM MultiplyByQuantizedMultiplier (double rounding, gemmlowp semantics). */
int32_t tol_mbqm(int32_t x, int32_t mult, int32_t shift);

#ifdef __cplusplus
}
#endif

#endif /* TOL_KERNELS_H */
