/*
 * Sizes and names of datatypes and reduction operations (chorus.h).
 */
#include "chorus.h"

static const struct {
    size_t size;
    const char *name;
} dtype_info[CHORUS_NUM_DTYPES] = {
    [CHORUS_INT8] = {1, "int8"},       [CHORUS_UINT8] = {1, "uint8"},
    [CHORUS_INT32] = {4, "int32"},     [CHORUS_UINT32] = {4, "uint32"},
    [CHORUS_INT64] = {8, "int64"},     [CHORUS_UINT64] = {8, "uint64"},
    [CHORUS_FLOAT16] = {2, "float16"}, [CHORUS_BFLOAT16] = {2, "bfloat16"},
    [CHORUS_FLOAT32] = {4, "float32"}, [CHORUS_FLOAT64] = {8, "float64"},
};

static const char *const op_names[CHORUS_NUM_OPS] = {
    [CHORUS_SUM] = "sum", [CHORUS_PROD] = "prod", [CHORUS_MIN] = "min",
    [CHORUS_MAX] = "max", [CHORUS_AVG] = "avg",
};

/* The enums may be signed or unsigned depending on the compiler, and callers may pass any
 * integer, so the range checks go through unsigned. */
size_t chorus_dtype_size(chorus_dtype_t dtype)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES) return 0;
    return dtype_info[dtype].size;
}

const char *chorus_dtype_name(chorus_dtype_t dtype)
{
    if ((unsigned)dtype >= CHORUS_NUM_DTYPES) return NULL;
    return dtype_info[dtype].name;
}

const char *chorus_op_name(chorus_op_t op)
{
    if ((unsigned)op >= CHORUS_NUM_OPS) return NULL;
    return op_names[op];
}
