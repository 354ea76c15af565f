// <immintrin.h> for the AVX-512 kernels. GCC 12's AVX-512 intrinsics start some casts and
// conversions from _mm512_undefined_*(), which it then reports as (maybe-)uninitialized (GCC bug
// 105593) although every undefined lane is overwritten before it is read; the kernels including
// this header turn those two warnings off for their own translation unit.
#pragma once

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
