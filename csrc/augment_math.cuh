// Per-pixel math of the training augmentation (the `augment` op; reference:
// dawnbench_fast/data/augment.py): crop from the reflect-padded uint8 NHWC
// dataset at offset (oy, ox), optional left-right flip, optional cutout square,
// then x = u8 * scale[c] + shift[c]. The per-image parameters come from
// augment_params() (keyed by seed, epoch and image index) and are passed in as
// int32 rows [ox, oy, flip, cut_x, cut_y]. Multiply and add are rounded
// separately (no fused multiply-add), so results are bit-identical to the
// reference on every backend.
#pragma once
#include "dbf_common.cuh"

DBF_NAMESPACE_BEGIN

enum { kAugOx = 0, kAugOy = 1, kAugFlip = 2, kAugCutX = 3, kAugCutY = 4, kAugFields = 5 };

DBF_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;  // the CPU build compiles with -ffp-contract=off
#endif
}

DBF_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Column of the padded source image that output column x reads.
DBF_HD int augment_src_col(int x, int ox, int flip, int size) {
  return ox + (flip ? size - 1 - x : x);
}

DBF_HD bool augment_in_cutout(int y, int x, int cut_y, int cut_x, int cutout) {
  return cutout > 0 && y >= cut_y && y < cut_y + cutout && x >= cut_x && x < cut_x + cutout;
}

DBF_HD float augment_value(unsigned char v, float scale, float shift) {
  return add_rn(mul_rn(static_cast<float>(v), scale), shift);
}

// Offset of element (y, sx, c) of image `img` in the padded NHWC dataset.
DBF_HD i64 augment_src_offset(i64 img, int y, int sx, int c, int ph, int pw, int C) {
  return ((img * ph + y) * pw + sx) * C + c;
}

DBF_NAMESPACE_END
