//! Tensor maps (TMA descriptors) built at launch: a kernel whose `dot`
//! operand ring copies with the tensor memory accelerator names, per matrix,
//! the buffer, its extent and row stride (arguments or constants) and the
//! box one copy moves; the driver encodes that for this launch's arguments.
//!
//! Where the arguments do not allow a map (a base address or row pitch not a
//! multiple of 16 bytes, an extent past what the hardware addresses), the
//! kernel's flag parameter is 0 and it copies the way it would without TMA,
//! unless the launch plan's repack step first copies a misaligned matrix into
//! aligned rows (`repack.rs`) and the map is of the copy.

use cudarc::driver::sys as cu;
use metile_compiler::repack::tensor_copy_box_supported;
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::gpu_ir::{LaunchValue, TensorMapSpec};
use metile_ir::DType;
use std::ffi::c_void;

/// A launch-time integer: a scalar argument or a constant.
fn launch_value(v: LaunchValue, args: &[KernelArg]) -> Option<i64> {
    match v {
        LaunchValue::Const(c) => Some(c),
        LaunchValue::Arg(i) => match args.get(i)? {
            KernelArg::Scalar(ScalarValue::I32(x)) => Some(i64::from(*x)),
            KernelArg::Scalar(ScalarValue::U32(x)) => Some(i64::from(*x)),
            KernelArg::Scalar(ScalarValue::I64(x)) => Some(*x),
            _ => None,
        },
    }
}

fn data_type(d: DType) -> Option<cu::CUtensorMapDataType> {
    use cu::CUtensorMapDataType::*;
    match d {
        DType::F16 => Some(CU_TENSOR_MAP_DATA_TYPE_FLOAT16),
        DType::BF16 => Some(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16),
        DType::F32 => Some(CU_TENSOR_MAP_DATA_TYPE_FLOAT32),
        DType::I32 => Some(CU_TENSOR_MAP_DATA_TYPE_INT32),
        // 8-bit floats are copied as bytes: a tensor copy does not convert.
        DType::F8E4M3 | DType::F8E5M2 => Some(CU_TENSOR_MAP_DATA_TYPE_UINT8),
        _ => None,
    }
}

fn swizzle(bytes: u16) -> Option<cu::CUtensorMapSwizzle> {
    use cu::CUtensorMapSwizzle::*;
    match bytes {
        32 => Some(CU_TENSOR_MAP_SWIZZLE_32B),
        64 => Some(CU_TENSOR_MAP_SWIZZLE_64B),
        128 => Some(CU_TENSOR_MAP_SWIZZLE_128B),
        _ => None,
    }
}

/// The matrix a tensor map of `spec` reads in this launch: the buffer's
/// address, the extent and the row pitch in bytes, within what the hardware
/// addresses but not yet checked for alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matrix {
    pub address: u64,
    pub rows: i64,
    pub cols: i64,
    pub pitch: i64,
}

impl Matrix {
    /// Whether a tensor map can start at this matrix and step its rows: the
    /// base and the row pitch multiples of 16 bytes.
    pub fn aligned(&self) -> bool {
        self.pitch % 16 == 0 && self.address % 16 == 0
    }

    /// Whether every row starts on a 32-byte sector of memory. Rows that do
    /// not (f16 rows of 3000: 6000 bytes apart) read a fifth sector for every
    /// 128 bytes: an H100 GEMM whose B has such rows ran 15-25% slower,
    /// with tensor copies or the threads' (4096x3000x2048: 416 TFLOP/s, 487
    /// with B's rows 6016 bytes apart; C's pitch made no difference).
    pub fn sector_aligned(&self) -> bool {
        self.pitch % 32 == 0 && self.address % 32 == 0
    }
}

/// The matrix `spec` names over this launch's arguments, or `None` when its
/// extents are out of the hardware's range (coordinates are 32-bit signed,
/// the row pitch below 2^40 bytes) or the arguments are not what it names.
pub fn matrix(spec: &TensorMapSpec, args: &[KernelArg]) -> Option<Matrix> {
    let KernelArg::Buffer { ptr, .. } = args.get(spec.buffer)? else {
        return None;
    };
    let size = spec.dtype.size_bytes() as i64;
    let rows = launch_value(spec.rows, args)?;
    let cols = launch_value(spec.cols, args)?;
    let stride = launch_value(spec.stride, args)?;
    let extent_ok = |x: i64| (1..=i64::from(i32::MAX)).contains(&x);
    let pitch = stride.checked_mul(size)?;
    (extent_ok(rows) && extent_ok(cols) && stride >= cols && pitch < 1 << 40).then_some(Matrix {
        address: *ptr as u64,
        rows,
        cols,
        pitch,
    })
}

/// Whether every row of `m` lies within the buffer argument `spec` reads (its
/// `len` elements): a tensor copy reads only the boxes a kernel asks for, but
/// a copy of the whole matrix (`repack.rs`) reads every row, and a kernel's
/// bounds may describe more rows than its buffer holds.
pub fn within_buffer(spec: &TensorMapSpec, m: &Matrix, args: &[KernelArg]) -> bool {
    let Some(buffer_bytes) = buffer_bytes(spec, args) else {
        return false;
    };
    let size = spec.dtype.size_bytes() as i64;
    let last_row_end = (m.rows - 1)
        .checked_mul(m.pitch)
        .and_then(|x| x.checked_add(m.cols.checked_mul(size)?));
    last_row_end.is_some_and(|end| end <= buffer_bytes)
}

/// The bytes of the buffer argument `spec` reads (in the buffer's own element
/// size), or `None` where that argument is no buffer.
fn buffer_bytes(spec: &TensorMapSpec, args: &[KernelArg]) -> Option<i64> {
    let Some(KernelArg::Buffer { len, dtype, .. }) = args.get(spec.buffer) else {
        return None;
    };
    Some((*len as i64).saturating_mul(dtype.size_bytes() as i64))
}

/// How many matrices of `m` a stacked map spans in `spec`'s buffer (the last
/// one possibly in part), or `None` where the buffer is not an argument, the
/// stride from one matrix to the next reaches 2^40 bytes (the hardware's
/// limit) or the count exceeds a 32-bit coordinate.
pub fn stacked_depth(spec: &TensorMapSpec, m: &Matrix, args: &[KernelArg]) -> Option<i64> {
    let buffer_bytes = buffer_bytes(spec, args)?;
    let matrix_bytes = m.rows.checked_mul(m.pitch).filter(|&b| b < 1 << 40)?;
    // The map starts at the buffer's first element, as `matrix` makes it.
    let depth = buffer_bytes.checked_add(matrix_bytes - 1)? / matrix_bytes;
    (1..=i64::from(i32::MAX)).contains(&depth).then_some(depth)
}

/// The tensor map of `spec`'s box over `m` (a launch's matrix, or its copy in
/// aligned rows), or `None` when the hardware cannot describe it. A stacked
/// map takes `depth` matrices (`stacked_depth`), `rows * pitch` bytes apart.
pub fn encode_matrix(spec: &TensorMapSpec, m: &Matrix, depth: Option<i64>) -> Option<cu::CUtensorMap> {
    if !m.aligned() || !tensor_copy_box_supported(spec) || spec.stacked != depth.is_some() {
        return None;
    }
    let global_dim = [m.cols as u64, m.rows as u64, depth.unwrap_or(1) as u64];
    // A 2-D map reads only the first stride (its rows may be the unbounded
    // 2^31 - 1, whose matrix stride is of no use).
    let matrix_stride = if spec.stacked {
        m.rows.checked_mul(m.pitch)?
    } else {
        0
    };
    let global_strides = [m.pitch as u64, matrix_stride as u64];
    let box_dim = [u32::from(spec.box_cols), u32::from(spec.box_rows), 1];
    let element_strides = [1u32, 1, 1];
    let rank = if spec.stacked { 3 } else { 2 };
    let mut map = cu::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has at least the lengths `rank` asks for; the map is
    // a properly aligned value the driver fills; the driver checks the rest
    // and reports what it cannot encode.
    let code = unsafe {
        cu::cuTensorMapEncodeTiled(
            &mut map,
            data_type(spec.dtype)?,
            rank,
            m.address as usize as *mut c_void,
            global_dim.as_ptr(),
            global_strides.as_ptr(),
            box_dim.as_ptr(),
            element_strides.as_ptr(),
            cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle(spec.swizzle_bytes)?,
            cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    (code == cu::CUresult::CUDA_SUCCESS).then_some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4-row f16 matrix of `cols` columns, rows 8 elements (16 bytes) apart.
    fn matrix_of_four_rows(cols: i64, stacked: bool) -> (TensorMapSpec, Matrix) {
        let spec = TensorMapSpec {
            buffer: 0,
            dtype: DType::F16,
            rows: LaunchValue::Const(4),
            cols: LaunchValue::Const(cols),
            stride: LaunchValue::Const(8),
            box_rows: 4,
            box_cols: 8,
            swizzle_bytes: 32,
            stacked,
        };
        let m = Matrix {
            address: 0,
            rows: 4,
            cols,
            pitch: 16,
        };
        (spec, m)
    }

    fn buffer(len: usize) -> KernelArg {
        KernelArg::Buffer {
            ptr: std::ptr::null_mut(),
            len,
            dtype: DType::F16,
        }
    }

    /// A 4 x 6 f16 matrix whose rows are 8 elements apart ends at element 30.
    #[test]
    fn a_matrix_lies_within_its_buffer_up_to_its_last_rows_end() {
        let (spec, m) = matrix_of_four_rows(6, false);
        assert!(within_buffer(&spec, &m, &[buffer(30)]));
        assert!(!within_buffer(&spec, &m, &[buffer(29)]));
        let scalar = KernelArg::Scalar(ScalarValue::I32(30));
        assert!(!within_buffer(&spec, &m, &[scalar]));
    }

    /// Stacked 4 x 8 f16 matrices (64 bytes each): a buffer of 3.5 of them
    /// spans 4, the last in part.
    #[test]
    fn a_stacked_map_spans_every_matrix_its_buffer_begins() {
        let (spec, m) = matrix_of_four_rows(8, true);
        assert_eq!(stacked_depth(&spec, &m, &[buffer(96)]), Some(3));
        assert_eq!(stacked_depth(&spec, &m, &[buffer(112)]), Some(4));
        assert_eq!(stacked_depth(&spec, &m, &[buffer(0)]), None);
        let scalar = KernelArg::Scalar(ScalarValue::I32(96));
        assert_eq!(stacked_depth(&spec, &m, &[scalar]), None);
    }
}
