"""The names a kernel body uses: `metile.load`, `metile.dot`, `metile.tile_range`, ...

Almost every name is the Rust function itself, so a call from a kernel costs one
native call and the op records the kernel's own source line. Called outside a
kernel (while no trace is running), they raise RuntimeError; `cdiv` and
`next_power_of_2` also work on plain ints on the host.
"""

from typing import TYPE_CHECKING, Any, TypeAlias

from metile import _metile
from metile._frontend import block as _block

if TYPE_CHECKING:
    # To a type checker a constexpr parameter is whatever value is passed for it
    # (`BLOCK * 2`, `range(BLOCK)` type-check); at run time it is the marker class.
    constexpr: TypeAlias = Any
else:

    class constexpr:
        """Annotation for a kernel parameter whose value is baked in at compile time.

            @metile.kernel
            def k(X, N, BLOCK: metile.constexpr): ...

            k[grid](x, n, BLOCK=256)

        Inside the kernel a constexpr is the plain Python value, so `BLOCK * 2`,
        `range(BLOCK // 32)` and `if BLOCK > 64:` run while tracing.
        """


# Program identity and index generation.
program_id = _metile.program_id
num_programs = _metile.num_programs
arange = _metile.arange
cdiv = _metile.cdiv
next_power_of_2 = _metile.next_power_of_2

# Memory. `load`/`store` take a pointer tile (`mask=`, `other=`) or a block
# pointer (`boundary_check=`, `padding_option=`); block pointers and tensor
# descriptors are desugared into pointer tiles and masks while tracing.
load = _block.load
store = _block.store
tile_load = _metile.tile_load
tile_store = _metile.tile_store
make_block_ptr = _block.make_block_ptr
advance = _block.advance
make_tensor_descriptor = _block.make_tensor_descriptor
BlockPointer = _block.BlockPointer
TensorDescriptor = _block.TensorDescriptor


def pointer_type(dtype: Any) -> str:
    """The type name of a pointer to `dtype` (Triton's `tl.pointer_type`), for
    `x.to(metile.pointer_type(metile.float16))` on integers loaded from memory."""
    if not isinstance(dtype, str) or dtype.startswith(("ptr<", "shared_ptr<")):
        raise TypeError(f"pointer_type takes a dtype such as metile.float16, got {dtype!r}")
    return f"ptr<{dtype}>"


# Tile creation, matrix multiply, conversion.
zeros = _metile.zeros
full = _metile.full
dot = _metile.dot
cast = _metile.cast

# Control flow. `range` is Triton's `tl.range`: a compiled loop like
# `tile_range`, with the pipelining hint `num_stages=`; `static_range` unrolls.
tile_range = _metile.tile_range
range = _metile.tile_range  # noqa: A001 - Triton's name, used as `metile.range`
static_range = _metile.static_range

# Compile-time checks, debugging and compiler hints.
static_assert = _metile.static_assert
device_print = _metile.device_print
device_assert = _metile.device_assert
assume = _metile.assume
multiple_of = _metile.multiple_of
max_contiguous = _metile.max_contiguous
max_constancy = _metile.max_constancy


def static_print(*values: object, **kwargs: object) -> None:
    """Python's print, while the kernel is traced (Triton's `tl.static_print`)."""
    print(*values, **kwargs)  # noqa: T201 - printing is what it does


# Element-wise math.
exp = _metile.exp
log = _metile.log
sqrt = _metile.sqrt
abs = _metile.abs
tanh = _metile.tanh
where = _metile.where
maximum = _metile.maximum
minimum = _metile.minimum

# Math functions (Triton's names; docs/language.md lists each one's accuracy).
exp2 = _metile.exp2
log2 = _metile.log2
log1p = _metile.log1p
expm1 = _metile.expm1
sin = _metile.sin
cos = _metile.cos
tan = _metile.tan
asin = _metile.asin
acos = _metile.acos
atan = _metile.atan
atan2 = _metile.atan2
sinh = _metile.sinh
cosh = _metile.cosh
erf = _metile.erf
rsqrt = _metile.rsqrt
sqrt_rn = _metile.sqrt_rn
floor = _metile.floor
ceil = _metile.ceil
round = _metile.round
rint = _metile.rint
pow = _metile.pow
fma = _metile.fma
fdiv = _metile.fdiv
div_rn = _metile.div_rn
fast_dividef = _metile.fast_dividef
fast_expf = _metile.fast_expf
umulhi = _metile.umulhi
clamp = _metile.clamp
sigmoid = _metile.sigmoid
softmax = _metile.softmax

# Reductions, scans and sorting.
sum = _metile.sum
max = _metile.max
min = _metile.min
argmax = _metile.argmax
argmin = _metile.argmin
xor_sum = _metile.xor_sum
cumsum = _metile.cumsum
cumprod = _metile.cumprod
sort = _metile.sort

# Atomics (Triton's names and defaults: sem="acq_rel", scope="gpu").
atomic_add = _metile.atomic_add
atomic_max = _metile.atomic_max
atomic_min = _metile.atomic_min
atomic_and = _metile.atomic_and
atomic_or = _metile.atomic_or
atomic_xor = _metile.atomic_xor
atomic_xchg = _metile.atomic_xchg
atomic_cas = _metile.atomic_cas

# Random numbers: Philox4x32-10, Triton's numbers for the same seed and offsets.
randint4x = _metile.randint4x
randint = _metile.randint
rand = _metile.rand
rand4x = _metile.rand4x
randn = _metile.randn
randn4x = _metile.randn4x

# Shape ops (Triton's names and arguments; also methods of a tile: `x.T`,
# `x.reshape(...)`, `x.permute(...)`, `x.split()`, ...).
permute = _metile.permute
trans = _metile.trans
reshape = _metile.reshape
view = _metile.view
expand_dims = _metile.expand_dims
broadcast_to = _metile.broadcast_to
broadcast = _metile.broadcast
join = _metile.join
split = _metile.split
cat = _metile.cat

# Tile scheduling.
tile_swizzle = _metile.tile_swizzle

# Thread-level operations.
thread_id = _metile.thread_id
simd_lane_id = _metile.simd_lane_id
simd_shuffle_xor = _metile.simd_shuffle_xor
simd_broadcast = _metile.simd_broadcast
shared = _metile.shared
barrier = _metile.barrier
simdgroup_role = _metile.simdgroup_role

# The proxy type a kernel computes with (for isinstance checks in helpers).
Tile = _metile.Tile

# dtype names, accepted wherever a dtype is (`metile.zeros(s, dtype=metile.float16)`,
# `x.to(metile.int8)`), and as a parameter's annotation (`X: metile.float8e4nv`).
bool_ = "bool"
int8 = "i8"
uint8 = "u8"
int16 = "i16"
uint16 = "u16"
int32 = "i32"
uint32 = "u32"
int64 = "i64"
uint64 = "u64"
float16 = "f16"
bfloat16 = "bf16"
float32 = "f32"
float64 = "f64"
# The fp8 storage types (Triton's names): OCP e4m3fn (no infinities, max 448) and e5m2.
float8e4nv = "f8e4m3"
float8e5 = "f8e5m2"

__all__ = [
    "abs",
    "advance",
    "BlockPointer",
    "make_block_ptr",
    "make_tensor_descriptor",
    "pointer_type",
    "TensorDescriptor",
    "acos",
    "arange",
    "argmax",
    "argmin",
    "asin",
    "assume",
    "atan",
    "atan2",
    "atomic_add",
    "atomic_and",
    "atomic_cas",
    "atomic_max",
    "atomic_min",
    "atomic_or",
    "atomic_xchg",
    "atomic_xor",
    "barrier",
    "bfloat16",
    "bool_",
    "broadcast",
    "broadcast_to",
    "cast",
    "cat",
    "cdiv",
    "ceil",
    "clamp",
    "constexpr",
    "cos",
    "cosh",
    "cumprod",
    "cumsum",
    "device_assert",
    "device_print",
    "div_rn",
    "fast_dividef",
    "fast_expf",
    "dot",
    "erf",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "fdiv",
    "float16",
    "float32",
    "float64",
    "float8e4nv",
    "float8e5",
    "floor",
    "fma",
    "full",
    "int8",
    "int16",
    "int32",
    "int64",
    "join",
    "load",
    "log",
    "log1p",
    "log2",
    "max",
    "max_constancy",
    "max_contiguous",
    "maximum",
    "min",
    "minimum",
    "multiple_of",
    "next_power_of_2",
    "num_programs",
    "permute",
    "pow",
    "program_id",
    "rand",
    "rand4x",
    "randint",
    "randint4x",
    "randn",
    "randn4x",
    "range",
    "reshape",
    "rint",
    "round",
    "rsqrt",
    "shared",
    "sigmoid",
    "simd_broadcast",
    "simd_lane_id",
    "simd_shuffle_xor",
    "simdgroup_role",
    "sin",
    "sinh",
    "softmax",
    "sort",
    "split",
    "sqrt",
    "sqrt_rn",
    "static_assert",
    "static_print",
    "static_range",
    "store",
    "sum",
    "tan",
    "tanh",
    "thread_id",
    "Tile",
    "tile_load",
    "tile_range",
    "tile_store",
    "tile_swizzle",
    "trans",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "umulhi",
    "view",
    "where",
    "xor_sum",
    "zeros",
]
