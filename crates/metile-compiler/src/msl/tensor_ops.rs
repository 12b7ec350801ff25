//! Metal 4 tensor ops (MSL 4.0, Apple10): the spelling of the `matmul2d` atom.
//!
//! One GPU IR `mma` on `AppleMatmul2d16x32x16` becomes one
//! `mpp::tensor_ops::matmul2d` of `matmul2d_descriptor(16, 32, 16)` over the
//! simdgroup (`execution_simdgroup`), on cooperative tensors filled element by
//! element from the thread's fragment registers and read back the same way,
//! as MLX's NAX GEMMs do. Which element of a cooperative tensor a lane's index
//! `i` names is the device's business; the atom's layouts (`atoms.rs`) assume
//! MLX's 16x16 fragment, which Apple does not document.
//!
//! Relaxed precision is asked for, as MLX does. The specification does not say
//! what it relaxes, which is why the atom takes only f16 and bf16 operands
//! (their products are exact in f32) and f32 `dot`s keep the 8x8 matrices.

use metile_ir::gpu_ir::{AtomKind, GpuFunction, GpuOpKind};
use metile_ir::MemSem;

/// The headers and namespace a kernel with tensor ops needs after
/// `#include <metal_stdlib>` (the MPP header path as Apple ships it; the
/// specification's text misspells it).
pub(crate) const INCLUDES: &str =
    "#include <metal_tensor>\n#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n";
pub(crate) const USING: &str = "using namespace mpp::tensor_ops;\n";

/// The MSL version a kernel is written in: 3.1 (bfloat and
/// `simdgroup_matrix<bfloat>`), 3.2 where atomics need fences
/// (`atomic_thread_fence`, macOS 15), or 4.0 where it uses Metal 4 tensor ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MslVersion {
    #[default]
    V3_1,
    V3_2,
    V4_0,
}

impl MslVersion {
    /// The Metal compiler's `-std=` flag for this version.
    pub fn std_flag(self) -> &'static str {
        match self {
            MslVersion::V3_1 => "-std=metal3.1",
            MslVersion::V3_2 => "-std=metal3.2",
            MslVersion::V4_0 => "-std=metal4.0",
        }
    }

    /// The version `f`'s MSL needs.
    pub fn of(f: &GpuFunction) -> MslVersion {
        let mut version = MslVersion::V3_1;
        f.walk(&mut |op| {
            let needs = match op.kind {
                GpuOpKind::Mma(AtomKind::AppleMatmul2d16x32x16) => MslVersion::V4_0,
                GpuOpKind::Atomic { sem, .. } if sem != MemSem::Relaxed => MslVersion::V3_2,
                _ => MslVersion::V3_1,
            };
            version = version.max(needs);
        });
        version
    }
}

/// The statements of one `matmul2d` numbered `id` on `operand` (`half` or
/// `bfloat`) fragments `a` (8 values), `b` and `c` (16 each), and the
/// expression of destination value `i` (`{result}[i]`). Names start with
/// `metile_`, which no kernel or parameter name does (`names::identifier`).
pub(crate) fn matmul2d(
    id: u32,
    operand: &str,
    a: &[String],
    b: &[String],
    c: &[String],
) -> (Vec<String>, String) {
    let op = format!("metile_mm{id}");
    let mut lines = vec![
        format!(
            "constexpr auto {op}_desc = matmul2d_descriptor(16, 32, 16, false, false, true, \
             matmul2d_descriptor::mode::multiply_accumulate);"
        ),
        format!("matmul2d<{op}_desc, execution_simdgroup> {op};"),
        format!("auto {op}_a = {op}.get_left_input_cooperative_tensor<{operand}, {operand}, float>();"),
        format!("auto {op}_b = {op}.get_right_input_cooperative_tensor<{operand}, {operand}, float>();"),
        format!(
            "auto {op}_c = {op}.get_destination_cooperative_tensor<remove_addrspace_t<decltype({op}_a)>, \
             remove_addrspace_t<decltype({op}_b)>, float>();"
        ),
    ];
    for (suffix, values) in [("a", a), ("b", b), ("c", c)] {
        for (i, x) in values.iter().enumerate() {
            lines.push(format!("{op}_{suffix}[{i}] = {x};"));
        }
    }
    lines.push(format!("{op}.run({op}_a, {op}_b, {op}_c);"));
    (lines, format!("{op}_c"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_matmul2d_fills_runs_and_reads_cooperative_tensors() {
        let names = |p: &str, n: usize| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        let (lines, result) = matmul2d(7, "half", &names("x", 8), &names("y", 16), &names("z", 16));
        assert_eq!(lines.len(), 5 + 8 + 16 + 16 + 1);
        assert!(lines[0].contains("matmul2d_descriptor(16, 32, 16, false, false, true,"));
        assert_eq!(
            lines[1],
            "matmul2d<metile_mm7_desc, execution_simdgroup> metile_mm7;"
        );
        assert_eq!(lines[5], "metile_mm7_a[0] = x0;");
        assert_eq!(lines[13 + 15], "metile_mm7_b[15] = y15;");
        assert_eq!(
            lines.last().unwrap(),
            "metile_mm7.run(metile_mm7_a, metile_mm7_b, metile_mm7_c);"
        );
        assert_eq!(result, "metile_mm7_c");
        assert_eq!(MslVersion::V4_0.std_flag(), "-std=metal4.0");
    }
}
