//! Pass policy: the one table of the pass switches a launch can give (launch
//! options and `metile.Config` keys of the same names, `metile._metile.pass_names()`
//! in Python), the pipeline stage each one steers, and its default per target
//! family. A [`Target`] holds hardware facts only; what runs on it is decided
//! here, so that measuring a pass is switching it, never editing a target.
//!
//! No setting changes results beyond float rounding (`tf32` rounds inputs and
//! `fp8_fast_accum` keeps fewer bits of fp8 sums; both are off unless asked).

use crate::atoms::AtomKind;
use crate::target::{Target, TargetKind};

/// One switchable pass: its name, the pipeline stage it steers, its default
/// on Apple and NVIDIA GPUs, and the hardware it needs (off wherever the
/// target lacks it, whatever the launch says).
#[derive(Clone, Copy, Debug)]
pub struct SwitchSpec {
    pub name: &'static str,
    /// The pipeline stage (`pipeline::stage_names`) whose work the switch changes.
    pub stage: &'static str,
    pub on_apple: bool,
    pub on_nvidia: bool,
    /// The hardware fact the pass needs.
    pub needs: fn(&Target) -> bool,
    pub doc: &'static str,
}

fn any_target(_: &Target) -> bool {
    true
}

fn has_async_copy(t: &Target) -> bool {
    t.async_copy
}

fn has_wgmma(t: &Target) -> bool {
    t.wgmma
}

fn has_tma(t: &Target) -> bool {
    t.tma
}

fn has_simdgroup_matrices(t: &Target) -> bool {
    t.matrix_atoms.contains(&AtomKind::AppleSimdgroup8x8)
}

/// Generates, from one list, the launch's optional settings ([`Passes`]), the
/// settings in force ([`Switches`]) and the table ([`SWITCHES`]).
macro_rules! switch_table {
    ($( $(#[doc = $doc:literal])+ $field:ident: stage $stage:literal, apple $apple:literal, nvidia $nvidia:literal, needs $needs:ident; )*) => {
        /// The pass switches a launch gave; `None` leaves the choice to the
        /// policy table ([`Passes::resolve`]).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct Passes {
            $( $(#[doc = $doc])+ pub $field: Option<bool>, )*
        }

        /// The pass switches in force for one compilation on one target.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct Switches {
            $( $(#[doc = $doc])+ pub $field: bool, )*
        }

        /// Every switch, in the order the docs and messages list them.
        pub const SWITCHES: &[SwitchSpec] = &[
            $( SwitchSpec {
                name: stringify!($field),
                stage: $stage,
                on_apple: $apple,
                on_nvidia: $nvidia,
                needs: $needs,
                doc: concat!($($doc, "\n"),+),
            }, )*
        ];

        impl Passes {
            /// The switch names (launch options, `metile.Config` keys).
            pub const NAMES: &'static [&'static str] = &[$( stringify!($field) ),*];

            fn slot(&mut self, name: &str) -> Option<&mut Option<bool>> {
                match name {
                    $( stringify!($field) => Some(&mut self.$field), )*
                    _ => None,
                }
            }
        }

        impl Passes {
            /// What runs on `target`: the settings given, the table's defaults
            /// for the rest, and off wherever the target lacks the hardware.
            pub fn resolve(&self, target: &Target) -> Switches {
                let apple = matches!(target.kind, TargetKind::Apple(_));
                Switches {
                    $( $field: self.$field.unwrap_or(if apple { $apple } else { $nvidia }) && $needs(target), )*
                }
            }
        }

        impl Switches {
            fn slot(&mut self, name: &str) -> Option<&mut bool> {
                match name {
                    $( stringify!($field) => Some(&mut self.$field), )*
                    _ => None,
                }
            }
        }
    };
}

switch_table! {
    /// `dot` on the target's matrix atoms where one fits (else the generic path).
    matrix_atoms: stage "layout_assign", apple true, nvidia true, needs any_target;
    /// `dot` operands loaded one loop iteration ahead, in registers. Off on
    /// NVIDIA GPUs: it gains nothing measurable on the H100 (benchmarks/gemm.py);
    /// autotuning may still pick it per shape.
    prefetch: stage "prefetch_dot_operands", apple true, nvidia false, needs any_target;
    /// `dot` operands copied asynchronously into a ring of threadgroup buffers,
    /// several loop iterations ahead. Apple GPUs have no asynchronous copies
    /// (the ring would be plain copies): off there until measured on a Mac.
    async_copy: stage "prefetch_dot_operands_async", apple false, nvidia true, needs has_async_copy;
    /// 16 bytes of padding per staged row of `dot` operands (no bank conflicts).
    pad_dot_scratch: stage "lower", apple true, nvidia true, needs any_target;
    /// `dot(a, x.T)` on Apple's matrix atoms stages `x` as it is (rows of K:
    /// vector stores) and reads `b`'s fragments transposed, one
    /// `simdgroup_load(.., transpose)` per 8x8 matrix (element by element
    /// for `matmul2d`), instead of storing `x.T` element by element.
    /// (NVIDIA's `wgmma` always reads such a `b` K-major.)
    k_major_b: stage "lower", apple true, nvidia false, needs has_simdgroup_matrices;
    /// Fragments read with NVIDIA's `ldmatrix` rather than element loads.
    ldmatrix: stage "lower", apple false, nvidia true, needs any_target;
    /// Each simdgroup walks its atom tiles row by row, alternating direction,
    /// so consecutive `mma`s share a fragment.
    serpentine: stage "lower", apple true, nvidia true, needs any_target;
    /// f32 `dot` on tf32 tensor cores (inputs rounded to 10-bit mantissas:
    /// results then differ from the interpreter by that rounding). Off unless asked.
    tf32: stage "layout_assign", apple false, nvidia false, needs any_target;
    /// NVIDIA matrix kernels of up to 256 threads ask for two blocks per SM
    /// (`__launch_bounds__(threads, 2)`: at most 128 registers at 256 threads).
    occupancy: stage "emit", apple true, nvidia true, needs any_target;
    /// 2-D GEMM grids run in groups of rows, so that concurrent programs share
    /// operand tiles in L2.
    l2_order: stage "l2_order", apple true, nvidia true, needs any_target;
    /// f16 and bf16 `dot` on NVIDIA's warpgroup MMA (`wgmma`, sm_90a), its
    /// operands read by the tensor cores from swizzled shared memory.
    wgmma: stage "layout_assign", apple false, nvidia true, needs has_wgmma;
    /// fp8 `dot`s (e4m3, e5m2) on `wgmma`'s k32 fp8 instruction, both
    /// operands staged K-major as fp8, each `dot`'s products summed apart
    /// and added into the f32 accumulators (the tensor cores keep about 14
    /// bits of an fp8 sum; docs/gemm.md, *fp8*). Off, fp8 tiles are converted
    /// to f16 and take the 16-bit atom, whose f32 sums are exact.
    fp8_wgmma: stage "layout_assign", apple false, nvidia true, needs has_wgmma;
    /// fp8 `wgmma` `dot`s add their products into the f32 accumulators on the
    /// tensor cores across the whole loop, keeping about 14 bits of the sum
    /// (torch's `_scaled_mm(use_fast_accum=True)`, cuBLAS's fast accumulation):
    /// no second accumulator array, so wider tiles fit the registers.
    fp8_fast_accum: stage "lower", apple false, nvidia false, needs has_wgmma;
    /// A 16-bit `wgmma` `dot` whose `a` is already held as its A fragments (a
    /// chained product's accumulator, attention's `p`) reads it from the
    /// registers instead of threadgroup memory (`dot_tiling::wgmma_register_a`).
    wgmma_register_a: stage "lower", apple false, nvidia true, needs has_wgmma;
    /// `wgmma` operand rings filled by the tensor memory accelerator (one
    /// thread's `cp.async.bulk.tensor` per tile, completing on a memory
    /// barrier per stage) where the runtime can describe the matrix (sm_90).
    tma: stage "lower", apple false, nvidia true, needs has_tma;
    /// Tensor copies also of blocks of matrices stored one after another in a
    /// buffer, the row mask's bound apart (attention's per-head K and V,
    /// `make_tensor_descriptor(K + head * N * D, shape=[N, D], ..)`), through
    /// a map with a third dimension (`TensorMapSpec::stacked`). Off until
    /// measured on an H100: such loads are the threads' copies.
    stacked_tma: stage "lower", apple false, nvidia false, needs has_tma;
    /// Stores of tiles whose layout leaves each thread narrow runs of a row
    /// (matrix accumulators) go through threadgroup memory into the blocked
    /// layout's 16-byte runs (`lower/store_staging.rs`). Unmeasured on a Mac.
    stage_stores: stage "lower", apple false, nvidia true, needs any_target;
    /// A tensor-copied operand whose rows the tensor memory accelerator cannot
    /// address (row pitch or base not a multiple of 16 bytes) is copied at
    /// launch into aligned rows of a workspace, which the kernel then reads
    /// with tensor copies (the cuda runtime's `repack.rs`).
    repack_operands: stage "emit", apple false, nvidia true, needs has_tma;
    /// f32 `exp`, `exp2` and `/` whose every dependent result is a 16-bit or
    /// 8-bit float computed with the GPU's approximations, and `a * b + c` fused
    /// there (`relax_precision.rs`): those results move by at most one unit in
    /// their last place. Off on Apple GPUs, where MSL emits the accurate forms.
    relaxed_math: stage "relax_precision", apple false, nvidia true, needs any_target;
    /// Pure ops, loads and register reads moved down to just before their
    /// first reader (`sink.rs`): shorter live ranges, fewer registers (a bf16
    /// layer norm row of 16384 at 8 warps: 206 to 111 on sm_90). Off on Apple
    /// GPUs until measured on a Mac (msl-emu's fault reports also lose the
    /// kernel line of some sunk accesses).
    sink: stage "sink_to_first_use", apple false, nvidia true, needs any_target;
}

impl SwitchSpec {
    /// The switch's default on `target`, before its hardware need is applied.
    pub fn default_on(&self, target: &Target) -> bool {
        match target.kind {
            TargetKind::Apple(_) => self.on_apple,
            TargetKind::Nvidia { .. } => self.on_nvidia,
        }
    }
}

impl Passes {
    /// Switches the pass called `name` on or off; false for an unknown name.
    pub fn set(&mut self, name: &str, on: bool) -> bool {
        self.slot(name).map(|s| *s = Some(on)).is_some()
    }

    /// The setting given for the pass called `name`, if any.
    pub fn given(&self, name: &str) -> Option<bool> {
        let mut passes = *self;
        passes.slot(name).and_then(|s| *s)
    }
}

impl Switches {
    /// The switches in force on `target` when a launch gives none.
    pub fn defaults(target: &Target) -> Switches {
        Passes::default().resolve(target)
    }

    /// Whether the switch called `name` is on; `None` for an unknown name.
    pub fn is_on(&self, name: &str) -> Option<bool> {
        let mut switches = *self;
        switches.slot(name).map(|s| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_name_has_a_switch() {
        for name in Passes::NAMES {
            let mut p = Passes::default();
            assert!(p.set(name, false), "{name}");
            assert_eq!(p.given(name), Some(false), "{name}");
            assert_eq!(
                p.resolve(&Target::nvidia(9, 0)).is_on(name),
                Some(false),
                "{name}"
            );
        }
        assert!(!Passes::default().set("fast", true));
        assert_eq!(Switches::defaults(&Target::apple()).is_on("fast"), None);
        let names: Vec<&str> = SWITCHES.iter().map(|s| s.name).collect();
        assert_eq!(names, Passes::NAMES);
    }

    #[test]
    fn hardware_needs_win_over_the_launch() {
        let mut all_on = Passes::default();
        for name in Passes::NAMES {
            all_on.set(name, true);
        }
        let apple = all_on.resolve(&Target::apple());
        assert!(!apple.wgmma && !apple.tma && !apple.repack_operands);
        // Apple GPUs have (plain-copy) rings, so the switch can turn them on.
        assert!(apple.async_copy);
        let ampere = all_on.resolve(&Target::nvidia(8, 0));
        assert!(ampere.async_copy && !ampere.wgmma && !ampere.tma);
        assert!(!Passes::default().resolve(&Target::nvidia(7, 5)).async_copy);
    }

    #[test]
    fn defaults_differ_by_family_only_where_the_table_says() {
        let (apple, nvidia) = (
            Switches::defaults(&Target::apple()),
            Switches::defaults(&Target::nvidia(9, 0)),
        );
        assert!(apple.prefetch && !nvidia.prefetch);
        assert!(!apple.async_copy && nvidia.async_copy);
        assert_eq!(Switches::defaults(&Target::apple10()), apple);
        assert!(!apple.tf32 && !nvidia.tf32);
    }
}
