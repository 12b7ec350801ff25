//! Matrix atoms: a target's matrix-multiply-accumulate instruction described
//! once, as data, so that `dot` lowering can be one algorithm over any of them.
//!
//! An atom computes `D[M,N] = A[M,K] · B[K,N] + C[M,N]` cooperatively across the
//! `threads` threads of one simdgroup (warp). Which thread holds which element
//! of each operand is a CuTe thread-value layout: a layout from `(thread,
//! value)` to the column-major index of the element in its matrix (`row + rows *
//! col`). Tiling an atom over a threadgroup, staging its operands and keeping the
//! accumulator in registers are then layout algebra on these three layouts.
//!
//! The instances are the hardware's documented fragment layouts:
//! - Apple `simdgroup_matrix<T, 8, 8>`: every lane holds two adjacent columns
//!   of one row (`thread_elements()`); A, B and C share the pattern
//!   (msl-reference.md §2; the MSL emulator implements the same table).
//! - Metal 4 `matmul2d` (Apple10), `matmul2d_descriptor(16, 32, 16)` on one
//!   simdgroup with cooperative-tensor operands: Apple leaves the lane layout of
//!   cooperative tensors unspecified, so this atom assumes the 16x16 fragment
//!   MLX relies on (msl-reference.md §7), which is *not* Apple's documentation:
//!   value `i < 8` of lane `l` at row `(l >> 1 & 3) + 4·(l >> 4 & 1) + 8·(i >> 2)`,
//!   column `4·(l & 1) + 8·(l >> 3 & 1) + (i & 3)`. A is one such fragment
//!   (`16 x 16`); B and C (`16 x 32`) are two side by side, values `8..16`
//!   being the fragment of columns `16..32`. The MSL emulator implements the
//!   same assumption, so agreement there proves the kernels right *given* it.
//! - NVIDIA `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}` and
//!   `m16n8k8.row.col.f32.tf32.tf32.f32`: with `g = lane / 4` and `t = lane % 4`,
//!   A's value `i` sits at row `g + 8·((i / 2) % 2)`, column `2t + i % 2 + 8·(i / 4)`
//!   (k16); B's at row `2t + i % 2 + 8·(i / 2)`, column `g`; C's at row
//!   `g + 8·(i / 2)`, column `2t + i % 2` (PTX ISA, "Matrix fragments for mma").

use metile_ir::DType;
use metile_layout::{Layout, LayoutError};

pub use metile_ir::gpu_ir::AtomKind;

/// One matrix instruction: its shape, dtypes and operand layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct MatrixAtom {
    pub kind: AtomKind,
    /// `(M, N, K)`.
    pub shape: (usize, usize, usize),
    /// The dtype of A and B as stored (tf32 atoms read f32 and round).
    pub operand: DType,
    /// The accumulator's dtype.
    pub accumulator: DType,
    /// Threads that execute the instruction together.
    pub threads: usize,
    /// `(thread, value) -> row + M * col` of A (`M x K`).
    pub a: Layout,
    /// `(thread, value) -> row + K * col` of B (`K x N`).
    pub b: Layout,
    /// `(thread, value) -> row + M * col` of C and D (`M x N`).
    pub c: Layout,
}

fn layout(text: &str) -> Layout {
    // The texts below are fixed and checked by the tests; a parse failure is a
    // bug in this file, caught by every test run.
    Layout::parse(text).unwrap_or_else(|e| panic!("matrix atom layout {text}: {e}"))
}

impl MatrixAtom {
    /// Apple's 8×8 simdgroup matrix with `operand` inputs (f32, f16 or bf16)
    /// accumulating in f32.
    pub fn apple_simdgroup_8x8(operand: DType) -> Option<MatrixAtom> {
        if !matches!(operand, DType::F32 | DType::F16 | DType::BF16) {
            return None;
        }
        // Lane bits 0..4 move to column 2, row 1, row 2, column 4, row 4; the
        // value index to the next column.
        let fragment = layout("((2,2,2,2,2),2):((16,1,2,32,4),8)");
        Some(MatrixAtom {
            kind: AtomKind::AppleSimdgroup8x8,
            shape: (8, 8, 8),
            operand,
            accumulator: DType::F32,
            threads: 32,
            a: fragment.clone(),
            b: fragment.clone(),
            c: fragment,
        })
    }

    /// Metal 4's `matmul2d` of a `16 x 16` by `16 x 32` block over one
    /// simdgroup, on f16 or bf16 accumulating in f32. Not offered for f32: the
    /// descriptor asks for relaxed precision (as MLX's does), which Apple does
    /// not define and may round f32 products, so f32 `dot` keeps the 8x8
    /// simdgroup matrices.
    pub fn apple_matmul2d_16x32x16(operand: DType) -> Option<MatrixAtom> {
        if !matches!(operand, DType::F16 | DType::BF16) {
            return None;
        }
        // Lane bits 0..4 move to column 4, row 1, row 2, column 8, row 4; the
        // value index to columns 1 and 2, row 8 and (B and C) column 16.
        let lanes = "(2,2,2,2,2)";
        let lane_strides = "(64,1,2,128,4)";
        Some(MatrixAtom {
            kind: AtomKind::AppleMatmul2d16x32x16,
            shape: (16, 32, 16),
            operand,
            accumulator: DType::F32,
            threads: 32,
            a: layout(&format!("({lanes},(4,2)):({lane_strides},(16,8))")),
            b: layout(&format!("({lanes},(4,2,2)):({lane_strides},(16,8,256))")),
            c: layout(&format!("({lanes},(4,2,2)):({lane_strides},(16,8,256))")),
        })
    }

    /// NVIDIA's m16n8k16 tensor-core MMA on f16 or bf16, accumulating in f32.
    pub fn nvidia_mma_m16n8k16(operand: DType) -> Option<MatrixAtom> {
        if !matches!(operand, DType::F16 | DType::BF16) {
            return None;
        }
        Some(MatrixAtom {
            kind: AtomKind::NvidiaMmaM16N8K16,
            shape: (16, 8, 16),
            operand,
            accumulator: DType::F32,
            threads: 32,
            a: layout("((2,2,2,2,2),(2,2,2)):((32,64,1,2,4),(16,8,128))"),
            b: layout("((2,2,2,2,2),(2,2)):((2,4,16,32,64),(1,8))"),
            c: layout("((2,2,2,2,2),(2,2)):((32,64,1,2,4),(16,8))"),
        })
    }

    /// NVIDIA's m16n8k8 tensor-core MMA on tf32 (f32 inputs rounded to tf32).
    pub fn nvidia_mma_m16n8k8_tf32() -> MatrixAtom {
        MatrixAtom {
            kind: AtomKind::NvidiaMmaM16N8K8Tf32,
            shape: (16, 8, 8),
            operand: DType::F32,
            accumulator: DType::F32,
            threads: 32,
            a: layout("((2,2,2,2,2),(2,2)):((16,32,1,2,4),(8,64))"),
            b: layout("((2,2,2,2,2),2):((1,2,8,16,32),4)"),
            c: layout("((2,2,2,2,2),(2,2)):((32,64,1,2,4),(16,8))"),
        }
    }

    /// NVIDIA's warpgroup MMA `m64 n k16` (sm_90a) on f16 or bf16,
    /// accumulating in f32, for `n` a multiple of 8 up to 256. The tensor
    /// cores read A and B from threadgroup memory (`GpuOpKind::Wgmma`), so
    /// every thread of the warpgroup sees all of them: their layouts give
    /// each thread every element. C is the m16n8 accumulator of each warp's
    /// 16 rows, `n / 8` of them side by side (PTX ISA, "wgmma D matrix
    /// fragment"): value `i` of lane `l` of warp `w` at row `16w + l / 4 +
    /// 8·((i / 2) % 2)`, column `8·(i / 4) + 2·(l % 4) + i % 2`.
    pub fn nvidia_wgmma_m64k16(operand: DType, n: usize) -> Option<MatrixAtom> {
        if !matches!(operand, DType::F16 | DType::BF16) {
            return None;
        }
        if n % 8 != 0 || !(8..=256).contains(&n) {
            return None;
        }
        // Lane bits 0..4 move to column 2, column 4, rows 1, 2, 4; the warp
        // to row 16; values to column 1, row 8 and column 8.
        Some(MatrixAtom {
            kind: AtomKind::NvidiaWgmmaM64K16 { n: n as u16 },
            shape: (64, n, 16),
            operand,
            accumulator: DType::F32,
            threads: 128,
            a: layout(&format!("(128,{}):(0,1)", 64 * 16)),
            b: layout(&format!("(128,{}):(0,1)", 16 * n)),
            c: layout(&format!(
                "((2,2,2,2,2,4),(2,2,{})):((128,256,1,2,4,16),(64,8,512))",
                n / 8
            )),
        })
    }

    /// NVIDIA's warpgroup MMA `m64 n k32` (sm_90a) on fp8 (e4m3 or e5m2),
    /// accumulating in f32: the 16-bit atom with twice the `k` per
    /// instruction (the same 32 bytes of each row). Both operands are read
    /// K-major only (8-bit `wgmma` has no transpose), so the `dot`'s B is
    /// staged as its transpose; the C layout is the 16-bit atom's.
    pub fn nvidia_wgmma_m64k32_f8(operand: DType, n: usize) -> Option<MatrixAtom> {
        if !operand.is_fp8() {
            return None;
        }
        let atom = MatrixAtom::nvidia_wgmma_m64k16(DType::F16, n)?;
        Some(MatrixAtom {
            kind: AtomKind::NvidiaWgmmaM64K32F8 { n: n as u16 },
            shape: (64, n, 32),
            operand,
            a: layout(&format!("(128,{}):(0,1)", 64 * 32)),
            b: layout(&format!("(128,{}):(0,1)", 32 * n)),
            ..atom
        })
    }

    /// The tf32 warpgroup MMA `m64 n k8` (sm_90a), which reads threadgroup
    /// operands only K-major, on the transposed product `Cᵀ = Bᵀ · Aᵀ`: the
    /// `dot`'s A (`M x 8`, K-major) is its threadgroup operand B with `n =
    /// M`, the `dot`'s B (`8 x 64`, N-major in memory) enters as its register
    /// operand A, and its `64 x n` accumulator is `Cᵀ`. So the atom is `(n,
    /// 64, 8)` from the `dot`'s side; B's layout is the hardware's A fragment
    /// transposed (PTX ISA, "wgmma register fragment", 32-bit A: value `i` of
    /// lane `l` of warp `w` at row `16w + l / 4 + 8·(i % 2)`, column `l % 4 +
    /// 4·(i / 2)` of the `64 x 8` A), C's the `wgmma` accumulator transposed.
    pub fn nvidia_wgmma_m64k8_tf32(n: usize) -> Option<MatrixAtom> {
        if n % 8 != 0 || !(8..=256).contains(&n) {
            return None;
        }
        // B (8 x 64, index k + 8·col): lane bits 0, 1 to k 1, 2; lane bits
        // 2..4 and the warp to columns 1, 2, 4 and 16; values to column 8
        // and k 4. C (n x 64, index row + n·col): lane bits 0, 1 to rows 2,
        // 4; lane bits 2..4 and the warp to columns 1, 2, 4 and 16; values
        // to row 1, column 8 and row 8.
        Some(MatrixAtom {
            kind: AtomKind::NvidiaWgmmaM64K8Tf32 { n: n as u16 },
            shape: (n, 64, 8),
            operand: DType::F32,
            accumulator: DType::F32,
            threads: 128,
            a: layout(&format!("(128,{}):(0,1)", n * 8)),
            b: layout("((2,2,2,2,2,4),(2,2)):((1,2,8,16,32,128),(64,4))"),
            c: layout(&format!(
                "((2,2,2,2,2,4),(2,2,{})):((2,4,{n},{},{},{}),(1,{},8))",
                n / 8,
                2 * n,
                4 * n,
                16 * n,
                8 * n
            )),
        })
    }

    /// True when the tensor cores read the `dot`'s A (and, but for tf32, its
    /// B) from threadgroup memory: the `wgmma` atoms.
    pub fn reads_shared_memory(&self) -> bool {
        matches!(
            self.kind,
            AtomKind::NvidiaWgmmaM64K16 { .. }
                | AtomKind::NvidiaWgmmaM64K32F8 { .. }
                | AtomKind::NvidiaWgmmaM64K8Tf32 { .. }
        )
    }

    /// Values each thread holds of A, B and C.
    pub fn values_per_thread(&self) -> (usize, usize, usize) {
        let per = |l: &Layout| l.size() as usize / self.threads;
        (per(&self.a), per(&self.b), per(&self.c))
    }

    /// `(row, col)` of value `value` of `thread` in a matrix with `rows` rows
    /// laid out by `tv`.
    fn coord(
        tv: &Layout,
        rows: usize,
        thread: usize,
        value: usize,
        threads: usize,
    ) -> Result<(usize, usize), LayoutError> {
        let index = tv.eval((thread + threads * value) as i64)? as usize;
        Ok((index % rows, index / rows))
    }

    /// The `(row, col)` of A that `thread`'s value `value` holds.
    pub fn a_coord(&self, thread: usize, value: usize) -> Result<(usize, usize), LayoutError> {
        Self::coord(&self.a, self.shape.0, thread, value, self.threads)
    }

    /// The `(row, col)` of B that `thread`'s value `value` holds.
    pub fn b_coord(&self, thread: usize, value: usize) -> Result<(usize, usize), LayoutError> {
        Self::coord(&self.b, self.shape.2, thread, value, self.threads)
    }

    /// The `(row, col)` of C (and D) that `thread`'s value `value` holds.
    pub fn c_coord(&self, thread: usize, value: usize) -> Result<(usize, usize), LayoutError> {
        Self::coord(&self.c, self.shape.0, thread, value, self.threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_atoms() -> Vec<MatrixAtom> {
        let mut atoms: Vec<MatrixAtom> = [DType::F32, DType::F16, DType::BF16]
            .into_iter()
            .filter_map(MatrixAtom::apple_simdgroup_8x8)
            .collect();
        atoms.extend(
            [DType::F16, DType::BF16]
                .into_iter()
                .filter_map(MatrixAtom::apple_matmul2d_16x32x16),
        );
        atoms.extend(
            [DType::F16, DType::BF16]
                .into_iter()
                .filter_map(MatrixAtom::nvidia_mma_m16n8k16),
        );
        atoms.push(MatrixAtom::nvidia_mma_m16n8k8_tf32());
        atoms.extend(
            [8, 64, 128, 256]
                .into_iter()
                .filter_map(|n| MatrixAtom::nvidia_wgmma_m64k16(DType::BF16, n)),
        );
        atoms.extend(
            [8, 96, 256]
                .into_iter()
                .filter_map(MatrixAtom::nvidia_wgmma_m64k8_tf32),
        );
        atoms.extend(
            [(DType::F8E4M3, 8), (DType::F8E5M2, 256)]
                .into_iter()
                .filter_map(|(d, n)| MatrixAtom::nvidia_wgmma_m64k32_f8(d, n)),
        );
        atoms
    }

    /// The fp8 atom reads 32 `k` a step, 32 bytes of each row as the 16-bit
    /// atom, with the same accumulator layout.
    #[test]
    fn fp8_wgmma_is_k32_with_the_16_bit_accumulator() {
        for dtype in [DType::F8E4M3, DType::F8E5M2] {
            let atom = MatrixAtom::nvidia_wgmma_m64k32_f8(dtype, 96).unwrap();
            let half = MatrixAtom::nvidia_wgmma_m64k16(DType::F16, 96).unwrap();
            assert_eq!((atom.shape, atom.operand), ((64, 96, 32), dtype));
            assert_eq!(atom.c, half.c);
            assert_eq!(atom.values_per_thread(), (64 * 32, 32 * 96, 48));
            assert_eq!(atom.values_per_thread().2, atom.kind.fragment_sizes().2);
            assert!(atom.reads_shared_memory());
        }
        assert!(MatrixAtom::nvidia_wgmma_m64k32_f8(DType::F16, 64).is_none());
        assert!(MatrixAtom::nvidia_wgmma_m64k32_f8(DType::F8E4M3, 260).is_none());
        assert!(MatrixAtom::nvidia_wgmma_m64k32_f8(DType::F8E4M3, 12).is_none());
    }

    #[test]
    fn wgmma_accumulator_is_four_warps_of_m16n8_tiles() {
        let atom = MatrixAtom::nvidia_wgmma_m64k16(DType::F16, 128).unwrap();
        assert_eq!(atom.values_per_thread().2, 64);
        assert_eq!(atom.values_per_thread().2, atom.kind.fragment_sizes().2);
        for t in 0..128 {
            let (w, l) = (t / 32, t % 32);
            for i in 0..64 {
                let expect = (
                    16 * w + l / 4 + 8 * ((i / 2) % 2),
                    8 * (i / 4) + 2 * (l % 4) + i % 2,
                );
                assert_eq!(atom.c_coord(t, i).unwrap(), expect, "thread {t} value {i}");
            }
        }
        assert!(MatrixAtom::nvidia_wgmma_m64k16(DType::F16, 12).is_none());
        assert!(MatrixAtom::nvidia_wgmma_m64k16(DType::F32, 64).is_none());
        assert!(MatrixAtom::nvidia_wgmma_m64k16(DType::F16, 264).is_none());
    }

    /// The tf32 atom is the transposed product: B is the hardware's A
    /// fragment transposed, C its accumulator transposed.
    #[test]
    fn tf32_wgmma_is_the_transposed_product() {
        let atom = MatrixAtom::nvidia_wgmma_m64k8_tf32(128).unwrap();
        assert_eq!(
            (atom.shape, atom.values_per_thread()),
            ((128, 64, 8), (1024, 4, 64))
        );
        assert_eq!(atom.values_per_thread().1, atom.kind.fragment_sizes().1);
        for t in 0..128 {
            let (w, l) = (t / 32, t % 32);
            for i in 0..4 {
                let (row, col) = (16 * w + l / 4 + 8 * (i % 2), l % 4 + 4 * (i / 2));
                assert_eq!(atom.b_coord(t, i).unwrap(), (col, row), "B thread {t} value {i}");
            }
            for i in 0..64 {
                let (row, col) = (
                    16 * w + l / 4 + 8 * ((i / 2) % 2),
                    8 * (i / 4) + 2 * (l % 4) + i % 2,
                );
                assert_eq!(atom.c_coord(t, i).unwrap(), (col, row), "C thread {t} value {i}");
            }
        }
        assert!(MatrixAtom::nvidia_wgmma_m64k8_tf32(260).is_none());
        assert!(MatrixAtom::nvidia_wgmma_m64k8_tf32(12).is_none());
    }

    /// Every element of every register operand is held by exactly one
    /// (thread, value).
    #[test]
    fn every_operand_layout_covers_its_matrix_once() {
        for atom in all_atoms() {
            let (m, n, k) = atom.shape;
            let mut operands = vec![("C", &atom.c, m, n)];
            if !atom.reads_shared_memory() {
                operands.push(("A", &atom.a, m, k));
            }
            if atom.kind.fragment_sizes().1 > 0 {
                operands.push(("B", &atom.b, k, n));
            }
            for (name, tv, rows, cols) in operands {
                assert_eq!(tv.size() as usize, rows * cols, "{:?} {name}", atom.kind);
                let mut seen = vec![false; rows * cols];
                for i in 0..tv.size() {
                    let idx = tv.eval(i).unwrap() as usize;
                    assert!(
                        idx < rows * cols && !seen[idx],
                        "{:?} {name}: index {idx} twice",
                        atom.kind
                    );
                    seen[idx] = true;
                }
            }
        }
    }

    #[test]
    fn apple_fragment_is_the_documented_lane_table() {
        let atom = MatrixAtom::apple_simdgroup_8x8(DType::F32).unwrap();
        for lane in 0..32 {
            let qid = lane / 4;
            let row = (qid & 4) + (lane / 2) % 4;
            let col = (qid & 2) * 2 + (lane % 2) * 2;
            for v in 0..2 {
                assert_eq!(atom.c_coord(lane, v).unwrap(), (row, col + v), "lane {lane}");
                assert_eq!(atom.a_coord(lane, v).unwrap(), (row, col + v), "lane {lane}");
            }
        }
        assert_eq!(atom.values_per_thread(), (2, 2, 2));
    }

    #[test]
    fn nvidia_fragments_follow_the_ptx_formulas() {
        let atom = MatrixAtom::nvidia_mma_m16n8k16(DType::F16).unwrap();
        assert_eq!(atom.values_per_thread(), (8, 4, 4));
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for i in 0..8 {
                let a = (g + 8 * ((i / 2) % 2), 2 * t + i % 2 + 8 * (i / 4));
                assert_eq!(atom.a_coord(lane, i).unwrap(), a, "A lane {lane} value {i}");
            }
            for i in 0..4 {
                assert_eq!(
                    atom.b_coord(lane, i).unwrap(),
                    (2 * t + i % 2 + 8 * (i / 2), g),
                    "B lane {lane}"
                );
                assert_eq!(
                    atom.c_coord(lane, i).unwrap(),
                    (g + 8 * (i / 2), 2 * t + i % 2),
                    "C lane {lane}"
                );
            }
        }
        let tf32 = MatrixAtom::nvidia_mma_m16n8k8_tf32();
        assert_eq!(tf32.values_per_thread(), (4, 2, 4));
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for i in 0..4 {
                assert_eq!(
                    tf32.a_coord(lane, i).unwrap(),
                    (g + 8 * (i % 2), t + 4 * (i / 2)),
                    "A lane {lane}"
                );
            }
            for i in 0..2 {
                assert_eq!(tf32.b_coord(lane, i).unwrap(), (t + 4 * i, g), "B lane {lane}");
            }
        }
    }

    /// MLX's 16x16 fragment (msl-reference.md §7), two of them side by side in
    /// B and C: the formula, written independently of the layout algebra.
    fn mlx_fragment(lane: usize, i: usize) -> (usize, usize) {
        let qid = lane >> 2;
        let row = ((qid & 4) | ((lane >> 1) & 3)) + 8 * ((i % 8) >> 2);
        let col = (((qid & 2) | (lane & 1)) * 4) + (i & 3) + 16 * (i / 8);
        (row, col)
    }

    #[test]
    fn matmul2d_fragments_are_mlx_16x16_fragments() {
        let atom = MatrixAtom::apple_matmul2d_16x32x16(DType::F16).unwrap();
        assert_eq!(atom.values_per_thread(), (8, 16, 16));
        assert_eq!(atom.values_per_thread(), atom.kind.fragment_sizes());
        for lane in 0..32 {
            for i in 0..8 {
                assert_eq!(
                    atom.a_coord(lane, i).unwrap(),
                    mlx_fragment(lane, i),
                    "A lane {lane} value {i}"
                );
            }
            for i in 0..16 {
                assert_eq!(
                    atom.b_coord(lane, i).unwrap(),
                    mlx_fragment(lane, i),
                    "B lane {lane} value {i}"
                );
                assert_eq!(
                    atom.c_coord(lane, i).unwrap(),
                    mlx_fragment(lane, i),
                    "C lane {lane} value {i}"
                );
            }
        }
        // Each lane's four consecutive values are consecutive columns of one
        // row: the fragment reads from row-major scratch become vector reads.
        assert_eq!(atom.a_coord(5, 1).unwrap().1, atom.a_coord(5, 0).unwrap().1 + 1);
    }

    #[test]
    fn atoms_refuse_dtypes_they_do_not_take() {
        assert!(MatrixAtom::apple_simdgroup_8x8(DType::I32).is_none());
        assert!(MatrixAtom::apple_matmul2d_16x32x16(DType::F32).is_none());
        assert!(MatrixAtom::apple_matmul2d_16x32x16(DType::I32).is_none());
        assert!(MatrixAtom::nvidia_mma_m16n8k16(DType::F32).is_none());
    }
}
