/*
 * tol_segs.h - a byte stream made of a header and a list of memory segments,
 * read or written in any range and chunking: the SAVE/LOAD state of the
 * learner (tol_learner_state_*) and of the adaptive stage (tol_stage_state_*),
 * and the stage image (tol_stage_image_read / tol_stage_push_write).
 *
 * Header fields are little-endian (tol_segs_put32 / tol_segs_get32 ...).
 *
 * The stream is `hdr_n` header bytes followed by seg[0].n bytes of seg[0].p,
 * seg[1].n bytes of seg[1].p, ... The caller builds the segment list (its own
 * arrays, not copied) and checks that a range lies inside the stream.
 */
#ifndef TOL_SEGS_H
#define TOL_SEGS_H

#include <stdint.h>

typedef struct {
    uint8_t *p; /* the segment's bytes (caller's array, not owned) */
    uint32_t n; /* its length in bytes */
} tol_seg_t;

/* Sum of the k segments' lengths (the stream without its header). */
uint32_t tol_segs_bytes(const tol_seg_t *seg, uint32_t k);

/* Copy stream bytes [offset, offset + n) to dst. hdr: the hdr_n header bytes
 * (only read when offset < hdr_n; may be NULL otherwise). */
void tol_segs_read(const uint8_t *hdr, uint32_t hdr_n, const tol_seg_t *seg, uint32_t k,
                   uint32_t offset, uint8_t *dst, uint32_t n);

/* Copy src into stream bytes [offset, offset + n) of the segments; offset >= hdr_n
 * (the header is the caller's to parse). */
void tol_segs_write(const tol_seg_t *seg, uint32_t k, uint32_t hdr_n, uint32_t offset,
                    const uint8_t *src, uint32_t n);

/* Little-endian header fields: p points at 2 or 4 bytes. */
void tol_segs_put16(uint8_t *p, uint16_t v);
void tol_segs_put32(uint8_t *p, uint32_t v);
void tol_segs_putf(uint8_t *p, float v);
uint16_t tol_segs_get16(const uint8_t *p);
uint32_t tol_segs_get32(const uint8_t *p);
float tol_segs_getf(const uint8_t *p);

#endif /* TOL_SEGS_H */
