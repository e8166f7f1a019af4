/*
 * Public scalar fp16/bf16 conversions (kernels.h). The code lives in half.h so that the
 * reduction loops can inline it; these wrappers give it one linkable home for the tests
 * and for callers outside kernels/.
 */
#include "kernels.h"

#include "half.h"

float chorus_half_to_float(uint16_t h)
{
    return chorus__half_to_float_inline(h);
}

uint16_t chorus_float_to_half(float f)
{
    return chorus__float_to_half_inline(f);
}

float chorus_bf16_to_float(uint16_t b)
{
    return chorus__bf16_to_float_inline(b);
}

uint16_t chorus_float_to_bf16(float f)
{
    return chorus__float_to_bf16_inline(f);
}
