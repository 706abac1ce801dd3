/* matmul_avx2.c — AVX2/FMA matmul (placeholder: declines every case so the
 * scalar path runs until the vector kernels land). */
#include "kernels/kern_internal.h"

bool kern_matmul_avx2(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                      int n, bool batch_inv) {
    (void)p, (void)y, (void)x, (void)W, (void)bias, (void)n, (void)batch_inv;
    return false;
}
