//! Repacked operands (the `repack_operands` pass) as a step of the launch
//! plan. The tensor memory accelerator addresses only rows whose base and
//! pitch are multiples of 16 bytes; a `dot` operand read through a tensor map
//! whose launch arguments break that (f16 rows of odd length, a matrix
//! starting mid-allocation) would be copied by the kernel's threads, element
//! by element. A repack step copies such an operand into rows padded to 16
//! bytes before the kernel runs, and the kernel reads the copy through its
//! tensor map.
//!
//! Which operands may be copied is known when the kernel is compiled, and is
//! decided here: each tensor-map parameter of the kernel whose buffer the
//! kernel only reads (a kernel must read its own writes, so a written buffer
//! is never copied) and whose box the hardware can copy (else no map of a
//! copy could be made either), while the switch is on. A stacked map (one
//! matrix after another) is not a candidate: the step copies one matrix.
//! Whether a launch copies a candidate needs that launch's facts, and the
//! runtime that executes the step evaluates them: the matrix's alignment (an
//! aligned one has its map already), the grid's reuse of the operand (a copy
//! costs a read and a write of it), and whether the workspace could be
//! allocated.

use crate::cuda::{CudaKernel, CudaParam};
use crate::launch_plan::Workspace;
use metile_ir::gpu_ir::TensorMapSpec;
use metile_ir::DType;

/// A `dot` operand a repack step may copy into aligned rows: what the
/// kernel's tensor map number `map` (counting its tensor-map parameters in
/// signature order) reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RepackOperand {
    pub map: usize,
    /// The buffer (Tile IR parameter), its element type, the matrix's rows,
    /// columns and row stride (launch values), and the box one copy moves.
    pub spec: TensorMapSpec,
}

impl RepackOperand {
    /// The Tile IR parameter index of the operand's buffer.
    pub fn buffer(&self) -> usize {
        self.spec.buffer
    }

    /// The bytes of one element.
    pub fn element_bytes(&self) -> usize {
        self.spec.dtype.size_bytes()
    }
}

/// The copies a launch may make before its kernel runs: the candidates, in
/// the order of the kernel's tensor maps, and the workspace the copies go to
/// ([`Workspace::AlignedRows`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Repack {
    pub operands: Vec<RepackOperand>,
    pub workspace: Workspace,
}

/// The repack step of `kernel`: its tensor-map operands that a launch may copy
/// into aligned rows, or `None` where the `repack_operands` switch was off
/// when it was compiled or no operand qualifies (a kernel without tensor maps
/// has none).
pub fn plan_repack(kernel: &CudaKernel) -> Option<Repack> {
    if !kernel.repack_operands {
        return None;
    }
    let written = |buffer: usize| {
        kernel.params.iter().any(|p| {
            matches!(p, CudaParam::Buffer { tile_param_index, written: true, .. } if *tile_param_index == buffer)
        })
    };
    let operands: Vec<RepackOperand> = kernel
        .params
        .iter()
        .filter_map(|p| match p {
            CudaParam::TensorMap(spec) => Some(*spec),
            _ => None,
        })
        .enumerate()
        .filter(|(_, spec)| tensor_copy_box_supported(spec) && !spec.stacked && !written(spec.buffer))
        .map(|(map, spec)| RepackOperand { map, spec })
        .collect();
    (!operands.is_empty()).then_some(Repack {
        operands,
        workspace: Workspace::AlignedRows,
    })
}

/// Whether the tensor memory accelerator copies `spec`'s boxes: an element
/// type it knows, a swizzle of 32, 64 or 128 bytes at least as wide as a box
/// row, and 1 to 256 rows a box.
pub fn tensor_copy_box_supported(spec: &TensorMapSpec) -> bool {
    let size = spec.dtype.size_bytes() as i64;
    matches!(spec.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::I32)
        && matches!(spec.swizzle_bytes, 32 | 64 | 128)
        && i64::from(spec.box_cols) * size <= i64::from(spec.swizzle_bytes)
        && (1..=256).contains(&spec.box_rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::gpu_ir::LaunchValue;

    fn spec(buffer: usize, dtype: DType, box_cols: u16) -> TensorMapSpec {
        TensorMapSpec {
            buffer,
            dtype,
            rows: LaunchValue::Arg(3),
            cols: LaunchValue::Arg(5),
            stride: LaunchValue::Arg(5),
            box_rows: 128,
            box_cols,
            swizzle_bytes: 128,
            stacked: false,
        }
    }

    fn buffer(index: usize, dtype: DType, written: bool) -> CudaParam {
        CudaParam::Buffer {
            dtype,
            tile_param_index: index,
            written,
        }
    }

    fn kernel(params: Vec<CudaParam>, repack_operands: bool) -> CudaKernel {
        CudaKernel {
            arch: "sm_90a".into(),
            source: String::new(),
            kernel_name: "k".into(),
            params,
            threads_per_group: 256,
            shared_bytes: 0,
            default_shared_bytes: 48 * 1024,
            buffer_alignment: 16,
            repack_operands,
            line_locs: Vec::new(),
            prints: false,
        }
    }

    /// A GEMM's parameters: A and B read through tensor maps, C written.
    fn gemm_params(c_map: bool) -> Vec<CudaParam> {
        let mut params = vec![
            buffer(0, DType::F16, false),
            buffer(1, DType::F16, false),
            buffer(2, DType::F16, true),
            CudaParam::Scalar {
                dtype: DType::I32,
                tile_param_index: 3,
            },
            CudaParam::TensorMap(spec(0, DType::F16, 64)),
            CudaParam::TensorMapReady(spec(0, DType::F16, 64)),
            CudaParam::MinusOne,
            CudaParam::TensorMap(spec(1, DType::F16, 64)),
            CudaParam::TensorMapReady(spec(1, DType::F16, 64)),
        ];
        if c_map {
            params.push(CudaParam::TensorMap(spec(2, DType::F16, 64)));
        }
        params
    }

    #[test]
    fn read_only_tensor_map_operands_are_candidates_in_map_order() {
        let plan = plan_repack(&kernel(gemm_params(false), true)).expect("a repack step");
        assert_eq!(plan.workspace, Workspace::AlignedRows);
        let got: Vec<(usize, usize, usize)> = plan
            .operands
            .iter()
            .map(|o| (o.map, o.buffer(), o.element_bytes()))
            .collect();
        assert_eq!(got, [(0, 0, 2), (1, 1, 2)]);
        assert_eq!(plan.operands[1].spec, spec(1, DType::F16, 64));
    }

    #[test]
    fn a_buffer_the_kernel_writes_is_never_a_candidate() {
        let plan = plan_repack(&kernel(gemm_params(true), true)).expect("a repack step");
        assert!(plan.operands.iter().all(|o| o.buffer() != 2), "{plan:?}");
        assert_eq!(plan.operands.len(), 2);
        // Only a written buffer's map: no step at all.
        let only_written = vec![
            buffer(0, DType::F16, true),
            CudaParam::TensorMap(spec(0, DType::F16, 64)),
        ];
        assert_eq!(plan_repack(&kernel(only_written, true)), None);
    }

    #[test]
    fn no_tensor_maps_or_the_switch_off_give_no_step() {
        let add = vec![
            buffer(0, DType::F32, false),
            buffer(1, DType::F32, false),
            buffer(2, DType::F32, true),
        ];
        assert_eq!(plan_repack(&kernel(add, true)), None);
        assert_eq!(plan_repack(&kernel(gemm_params(false), false)), None);
    }

    #[test]
    fn boxes_the_hardware_cannot_copy_are_not_candidates() {
        // 128 f16 columns are 256 bytes, wider than the 128-byte swizzle; and
        // TMA has no 8-byte element type of ours.
        let params = vec![
            buffer(0, DType::F16, false),
            buffer(1, DType::I64, false),
            buffer(2, DType::F32, false),
            CudaParam::TensorMap(spec(0, DType::F16, 128)),
            CudaParam::TensorMap(spec(1, DType::I64, 8)),
            CudaParam::TensorMap(spec(2, DType::F32, 32)),
        ];
        let plan = plan_repack(&kernel(params, true)).expect("a repack step");
        let maps: Vec<usize> = plan.operands.iter().map(|o| o.map).collect();
        assert_eq!(maps, [2]);
        let too_tall = TensorMapSpec {
            box_rows: 257,
            ..spec(0, DType::F16, 64)
        };
        assert!(!tensor_copy_box_supported(&too_tall));
        let bad_swizzle = TensorMapSpec {
            swizzle_bytes: 16,
            stacked: false,
            ..spec(0, DType::F16, 8)
        };
        assert!(!tensor_copy_box_supported(&bad_swizzle));
    }
}
