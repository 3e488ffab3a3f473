/*
 * main.c - a host program linking libtinyol.a (built by CMakeLists.txt): reads
 * records from stdin, each TINYOL_INPUT_SIZE int8 values + 1 label byte
 * (0xFF = no label), predicts each sample and learns the labelled ones.
 * Prints "pred <label> <confidence %.9g>" per sample, then "seen <n>".
 */
#include <stdio.h>

#include "tinyol.h"

static tinyol_t tl;
static _Alignas(8) uint8_t tl_mem[TINYOL_MEM_BYTES];

int main(void)
{
    if (tinyol_init(&tl, tl_mem, sizeof(tl_mem)) != TOL_OK) return 1;
    int8_t x[TINYOL_INPUT_SIZE];
    unsigned char label;
    while (fread(x, 1, sizeof(x), stdin) == sizeof(x) && fread(&label, 1, 1, stdin) == 1) {
        int32_t pred = -1;
        float conf = 0.0f;
        if (tinyol_predict(&tl, x, &pred, &conf) != TOL_OK) return 2;
        printf("pred %ld %.9g\n", (long)pred, (double)conf);
        if (label != 0xFFu && tinyol_learn(&tl, label, NULL) != TOL_OK) return 3;
    }
    tol_learner_stats_t st;
    tinyol_stats(&tl, &st);
    printf("seen %lu\n", (unsigned long)st.samples_seen);
    return 0;
}
