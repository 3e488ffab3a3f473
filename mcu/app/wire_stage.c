/*
 * wire_stage.c - model_wire.h for the adaptive stage (linked with learner_stage.c):
 * GET_STAGE / SET_STAGE payloads and INFO's stage block (docs/protocol.md) over
 * the stage image (tol_stage_image_read, tol_stage_push_write / _commit).
 */
#include "config.h"
#include "model_learner.h"
#include "model_wire.h"
#include "tol_proto.h"
#include "tol_stage.h"

const uint8_t tol_model_wire_get_msg = (uint8_t)TOL_MSG_GET_STAGE;
const uint8_t tol_model_wire_set_msg = (uint8_t)TOL_MSG_SET_STAGE;

/* GET_STAGE: offset:u32. Reply: offset:u32 total:u32 n:u16 0:u16 bytes[n] of the stage
 * image (tol_stage_image_read: every parameter as f32, then the active flags). */
tol_status_t tol_model_wire_get(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t cap,
                                uint16_t *reply_len)
{
    TOL_CHECK(n == 4u, TOL_ERR_LENGTH);
    const tol_stage_t *S = tol_model_stage();
    const uint32_t offset = tol_get_u32(req);
    const uint32_t total = tol_stage_image_bytes(S);
    TOL_CHECK(offset <= total, TOL_ERR_RANGE);
    uint32_t count = total - offset;
    if (count > (uint32_t)cap - 12u) count = (uint32_t)cap - 12u;
    TOL_TRY(tol_stage_image_read(S, offset, reply + 12, count));
    tol_put_u32(reply, offset);
    tol_put_u32(reply + 4, total);
    tol_put_u16(reply + 8, (uint16_t)count);
    tol_put_u16(reply + 10, 0u);
    *reply_len = (uint16_t)(12u + count);
    return TOL_OK;
}

/* SET_STAGE: offset:u32 bytes[n]: stage image bytes, staged (offset 0 starts a new image,
 * later writes continue where the last ended); the write that completes the image commits
 * it (all or nothing). The fence is up while an image is part way staged; a complete image
 * refused at the commit (NaN, bad flags) leaves the live stage as it was, unfenced.
 * Reply: offset:u32 staged:u32 total:u32 committed:u8 0:u8 n_active:u16 */
tol_status_t tol_model_wire_set(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len,
                                bool *staged)
{
    TOL_CHECK(n >= 4u, TOL_ERR_LENGTH);
    tol_stage_t *S = tol_model_stage();
    const uint32_t offset = tol_get_u32(req);
    const uint32_t total = tol_stage_image_bytes(S);
    tol_status_t st = tol_stage_push_write(S, offset, req + 4, (uint32_t)n - 4u);
    const uint32_t fill = S->push_fill;
    uint8_t committed = 0u;
    if (st == TOL_OK && fill == total) {
        st = tol_stage_push_commit(S);
        committed = st == TOL_OK ? 1u : 0u;
    }
    *staged = fill > 0u && fill < total;
    TOL_TRY(st);
    tol_put_u32(reply, offset);
    tol_put_u32(reply + 4, fill);
    tol_put_u32(reply + 8, total);
    reply[12] = committed;
    reply[13] = 0u;
    tol_put_u16(reply + 14, S->n_active);
    *reply_len = 16u;
    return TOL_OK;
}

/* INFO's stage block: layers:u8 params:u32 (the trained ones: the image's) bytes:u32 hash:u32 */
uint16_t tol_model_wire_info(uint8_t *out, uint16_t cap)
{
    if (cap < 13u) return 0u;
    out[0] = (uint8_t)TOL_STAGE_LAYERS;
    tol_put_u32(out + 1, (uint32_t)TOL_STAGE_TRAINED);
    tol_put_u32(out + 5, (uint32_t)TOL_MODEL_LEARNER_BYTES);
    tol_put_u32(out + 9, (uint32_t)TOL_STAGE_HASH);
    return 13u;
}
