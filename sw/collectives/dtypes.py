"""Element types and reduction operators: float32/16, int32/64 and bfloat16 (uint16 bit patterns, RNE rounding).

Every reduction step rounds to the buffer's type, as a GPU kernel working in that type would: bfloat16 operands
are widened to float32, combined, and rounded back to nearest-even.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import CollectiveUserError

BF16 = "bfloat16"
DTYPE_CODES: dict[str, int] = {"float32": 1, "float16": 2, "int32": 3, "int64": 4, BF16: 5}
"""Wire codes of the element types (part of every message's tag, so ranks with different dtypes are caught)."""

DTYPES = tuple(DTYPE_CODES)
"""The element types collectives take (numpy dtype names; 'bfloat16' is a uint16 array of bit patterns)."""

REDUCE_OPS = ("sum", "prod", "min", "max", "avg")
"""The reductions (``op=``) of allreduce, reduce and reducescatter; 'avg' only for float types."""
OP_CODES = {name: i + 1 for i, name in enumerate(REDUCE_OPS)}


def dtype_name(arr: np.ndarray, what: str = "buffer") -> str:
    """The element-type name of ``arr`` ('bfloat16' for uint16 arrays), or a user error naming what is allowed."""
    if not isinstance(arr, np.ndarray):
        raise CollectiveUserError(f"{what}: expected a numpy array, not {type(arr).__name__}")
    name = BF16 if arr.dtype == np.uint16 else arr.dtype.name
    if name not in DTYPE_CODES:
        allowed = ", ".join(DTYPE_CODES)
        raise CollectiveUserError(f"{what}: dtype {arr.dtype.name} is not supported (allowed: {allowed}; "
                                  "bfloat16 as a uint16 view)")
    return name


def check_op(op: str, dtype: str) -> str:
    """Validate a reduction operator name for ``dtype``; avg is defined for floating types only."""
    if op not in OP_CODES:
        raise CollectiveUserError(f"op {op!r}: unknown reduction (allowed: {', '.join(REDUCE_OPS)})")
    if op == "avg" and dtype in ("int32", "int64"):
        raise CollectiveUserError(f"op 'avg' is not defined for {dtype} (use sum and divide, or a float type)")
    return op


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bit patterns, nearest-even; NaNs stay (quiet) NaNs."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return rounded


_NP_OPS: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
}


def reducer(op: str, dtype: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(dst, src)``: dst = dst (op) src elementwise, rounded to the type; avg accumulates a sum (see finish)."""
    ufunc = _NP_OPS[op]
    if dtype == BF16:
        def reduce_bf16(dst: np.ndarray, src: np.ndarray) -> None:
            dst[...] = f32_to_bf16(ufunc(bf16_to_f32(dst), bf16_to_f32(src)))
        return reduce_bf16

    def reduce_native(dst: np.ndarray, src: np.ndarray) -> None:
        ufunc(dst, src, out=dst)
    return reduce_native


def finish_avg(buf: np.ndarray, dtype: str, nranks: int) -> None:
    """Turn an allreduced/reduced sum into the average (division rounded once, in the buffer's type)."""
    if dtype == BF16:
        buf[...] = f32_to_bf16(bf16_to_f32(buf) / np.float32(nranks))
    else:
        np.divide(buf, buf.dtype.type(nranks), out=buf)
