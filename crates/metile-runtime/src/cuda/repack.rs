//! Repack steps of launch plans (the `repack_operands` pass): the copy
//! kernel, its pooled workspace, and the launch-time half of the decision.
//! The compiler lists, per kernel, the `dot` operands a launch may copy into
//! rows padded to 16 bytes (`metile_compiler::repack`: tensor-map operands the
//! kernel only reads, whose box the hardware copies); here a launch that runs
//! the step copies a candidate only where its tensor map of the operand itself
//! is refused for alignment (f16 rows of odd length: a row pitch that is no
//! multiple of 16 bytes; a matrix starting mid-allocation), where a copy would
//! give one, and where the copy pays. One small kernel copies every such
//! operand, on the launch's stream (so the copy lands before the kernel reads
//! it), and the kernel gets a tensor map of the copy.
//!
//! The copy costs one read and one write of the operand, so it pays where the
//! kernel reads each element several times, as a GEMM reads A once per column
//! of output tiles. A launch copies a matrix only when its grid has at least
//! [`MIN_REUSE`] times as many blocks as the matrix has boxes along its longer
//! side (a lower bound of the reuse of a `dot` operand that every block walks
//! along its K loop).
//!
//! A matrix that has a tensor map but whose rows do not start on 32-byte
//! sectors (`Matrix::sector_aligned`) is read more slowly, by tensor copies
//! and threads alike; it is copied where the reuse is [`SECTOR_REUSE`] times
//! its boxes, as there the kernel would have run without a copy. Copies'
//! rows start on 128 bytes.
//!
//! The workspace (the plan's `Workspace::AlignedRows`) stays with the device
//! between launches in a `WorkspacePool`, as split-K's does: a launch takes
//! it, and gives it back once the kernel is enqueued; the next launch's copy
//! runs after this kernel in stream order. Where the workspace cannot be
//! allocated, the launch goes ahead without the copies (the kernel's threads
//! copy those operands, as with the pass off).

use super::driver::check;
use super::tensor_map::Matrix;
use super::{Context, Loaded};
use crate::device::Device;
use crate::error::RuntimeError;
use crate::workspace::{Workspace, WorkspacePool};
use cudarc::driver::sys as cu;
use metile_ir::gpu_ir::TensorMapSpec;
use std::ffi::c_void;
use std::sync::{Arc, Weak};

pub(super) const KERNEL_NAME: &str = "metile_repack";

/// Matrices one copy kernel moves (its grid's z axis); more take more launches.
const MAX_JOBS: usize = 8;
/// The grid's y axis (groups of 8 rows) stops at CUDA's limit; the kernel
/// loops over the rest.
const MAX_ROW_GROUPS: i64 = 65535;
const THREADS: u32 = 256;
/// Each copy starts at a multiple of this many bytes of the workspace.
const REGION_ALIGN: u64 = 256;
/// See the module header.
const MIN_REUSE: i64 = 2;
/// See the module header.
const SECTOR_REUSE: i64 = 6;
/// A copy's rows start this many bytes apart, rounded up.
const COPY_ROW_ALIGN: i64 = 128;

/// One thread per 16 bytes of a destination row: a warp takes 32 consecutive
/// chunks of one row (blocks of 8 warps: x the row's chunk segment, y eight
/// rows, z the matrix). Rows whose source is 2 bytes past a 4-byte boundary
/// (odd f16 pitches) read the aligned words around their 16 bytes and
/// funnel-shift them; each row's first and last 16 bytes are read by
/// elements, so no read leaves the source row.
pub(super) const SOURCE: &str = r#"struct metile_repack_job {
  const unsigned char* src;
  unsigned char* dst;
  long long src_pitch;
  long long dst_pitch;
  int rows;
  int row_bytes;
  int chunks_per_row;
  int unused;
};
struct metile_repack_jobs {
  metile_repack_job job[8];
};

extern "C" __global__ void __launch_bounds__(256) metile_repack(const __grid_constant__ metile_repack_jobs jobs) {
  const metile_repack_job& job = jobs.job[blockIdx.z];
  int chunk = blockIdx.x * 32 + threadIdx.x % 32;
  if (chunk >= job.chunks_per_row) return;
  int col = chunk * 16;
  int n = job.row_bytes - col < 16 ? job.row_bytes - col : 16;
  for (long long row = blockIdx.y * 8 + threadIdx.x / 32; row < job.rows; row += gridDim.y * 8) {
    const unsigned char* s = job.src + row * job.src_pitch + col;
    unsigned long long at = (unsigned long long)s;
    unsigned int w[4] = {0u, 0u, 0u, 0u};
    if (n == 16 && (at & 15) == 0) {
      uint4 v = *reinterpret_cast<const uint4*>(s);
      w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
    } else if (n == 16 && (at & 3) == 0) {
      const unsigned int* p = reinterpret_cast<const unsigned int*>(s);
      for (int i = 0; i < 4; ++i) w[i] = p[i];
    } else if (n == 16 && (at & 3) == 2 && col > 0 && col + 18 <= job.row_bytes) {
      const unsigned int* p = reinterpret_cast<const unsigned int*>(s - 2);
      unsigned int x[5];
      for (int i = 0; i < 5; ++i) x[i] = p[i];
      for (int i = 0; i < 4; ++i) w[i] = __funnelshift_r(x[i], x[i + 1], 16);
    } else if ((at & 1) == 0) {
      const unsigned short* p = reinterpret_cast<const unsigned short*>(s);
      for (int i = 0; 2 * i < n; ++i) w[i / 2] |= (unsigned int)p[i] << (16 * (i % 2));
    } else {
      for (int i = 0; i < n; ++i) w[i / 4] |= (unsigned int)s[i] << (8 * (i % 4));
    }
    *reinterpret_cast<uint4*>(job.dst + row * job.dst_pitch + col) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}
"#;

/// The kernel's `metile_repack_job`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Job {
    src: u64,
    dst: u64,
    src_pitch: i64,
    dst_pitch: i64,
    rows: i32,
    row_bytes: i32,
    chunks_per_row: i32,
    unused: i32,
}

/// The kernel's `metile_repack_jobs`.
#[repr(C)]
struct Jobs {
    job: [Job; MAX_JOBS],
}

/// A matrix to copy, and where in the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Copy {
    from: Matrix,
    row_bytes: i64,
    offset: u64,
}

impl Copy {
    /// The copy's row pitch: its rows rounded up to [`COPY_ROW_ALIGN`] bytes.
    fn pitch(&self) -> i64 {
        (self.row_bytes + COPY_ROW_ALIGN - 1) / COPY_ROW_ALIGN * COPY_ROW_ALIGN
    }

    /// The 16-byte chunks of a row the copy writes (the padding after them
    /// is never read).
    fn chunks_per_row(&self) -> i64 {
        (self.row_bytes + 15) / 16
    }
}

/// The copies one launch makes before its kernel runs.
#[derive(Debug, Default)]
pub(super) struct Copies {
    copies: Vec<Copy>,
    bytes: u64,
}

impl Copies {
    /// Adds the copy of `m`, which the candidate `spec` reads, and returns
    /// its index (a matrix read by several maps is copied once), or `None`
    /// where a copy would not pay or not help.
    pub fn add(&mut self, spec: &TensorMapSpec, m: &Matrix, grid: [u32; 3]) -> Option<usize> {
        let reuse = match (m.aligned(), m.sector_aligned()) {
            (false, _) => MIN_REUSE,
            (true, false) => SECTOR_REUSE,
            (true, true) => return None,
        };
        if !worth_copying(spec, m, grid, reuse) {
            return None;
        }
        let row_bytes = m.cols.checked_mul(spec.dtype.size_bytes() as i64)?;
        if let Some(i) = self
            .copies
            .iter()
            .position(|c| c.from == *m && c.row_bytes == row_bytes)
        {
            return Some(i);
        }
        let copy = Copy {
            from: *m,
            row_bytes,
            offset: self.bytes,
        };
        // Rows and their bytes fit the kernel's `int`s.
        if i32::try_from(row_bytes + 16).is_err() || i32::try_from(m.rows).is_err() {
            return None;
        }
        let size = u64::try_from(m.rows.checked_mul(copy.pitch())?).ok()?;
        self.bytes = (copy.offset + size).div_ceil(REGION_ALIGN) * REGION_ALIGN;
        self.copies.push(copy);
        Some(self.copies.len() - 1)
    }

    /// The matrix copy `index` reads.
    pub fn source(&self, index: usize) -> Matrix {
        self.copies[index].from
    }

    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
}

/// Whether the launch's blocks read `m` often enough for a copy to pay: at
/// least `reuse` times as many blocks as boxes along its longer side (see the
/// module header).
fn worth_copying(spec: &TensorMapSpec, m: &Matrix, grid: [u32; 3], reuse: i64) -> bool {
    let blocks: i64 = grid.iter().map(|&g| i64::from(g)).product();
    let boxes = |extent: i64, side: u16| (extent + i64::from(side) - 1) / i64::from(side.max(1));
    blocks >= reuse * boxes(m.rows, spec.box_rows).max(boxes(m.cols, spec.box_cols))
}

/// The copy kernel and the pooled workspace of one device.
pub(super) struct Repacker {
    context: Arc<Context>,
    kernel: Arc<Loaded>,
    /// The device the workspace belongs to (weak: the device holds this).
    device: Weak<dyn Device>,
    pool: WorkspacePool,
}

/// A launch's workspace and its copies; dropped (once the kernel is
/// enqueued, or on an error before) it goes back to the pool.
pub(super) struct Repacked {
    repacker: Arc<Repacker>,
    device: Arc<dyn Device>,
    space: Option<Workspace>,
    /// Each copy as a matrix of the workspace.
    pub matrices: Vec<Matrix>,
}

impl Drop for Repacked {
    fn drop(&mut self) {
        if let Some(space) = self.space.take() {
            self.repacker.pool.give_back(&self.device, space);
        }
    }
}

impl Repacker {
    pub fn new(context: Arc<Context>, kernel: Arc<Loaded>, device: Weak<dyn Device>) -> Repacker {
        Repacker {
            context,
            kernel,
            device,
            pool: WorkspacePool::new(),
        }
    }

    /// Enqueues `copies` on the launch stream; `None` where the workspace
    /// cannot be allocated (the kernel then copies the operands with its
    /// threads, as without the pass).
    ///
    /// # Safety
    /// Every matrix copied must lie in a live device allocation.
    pub unsafe fn run(self: &Arc<Self>, copies: &Copies) -> Result<Option<Repacked>, RuntimeError> {
        let Some(device) = self.device.upgrade() else {
            return Ok(None);
        };
        let Some(space) = usize::try_from(copies.bytes)
            .ok()
            .and_then(|bytes| self.pool.take(&device, bytes).ok())
        else {
            return Ok(None);
        };
        let base = space.address();
        // From here on the workspace returns to the pool however this ends.
        let mut repacked = Repacked {
            repacker: self.clone(),
            device,
            space: Some(space),
            matrices: Vec::new(),
        };
        repacked.matrices = copies
            .copies
            .iter()
            .map(|c| Matrix {
                address: base + c.offset,
                rows: c.from.rows,
                cols: c.from.cols,
                pitch: c.pitch(),
            })
            .collect();
        self.context.bind()?;
        for batch in copies.copies.chunks(MAX_JOBS) {
            let mut jobs = Jobs {
                job: [Job::default(); MAX_JOBS],
            };
            // x: segments of 32 chunks of a row; y: groups of 8 rows (the
            // kernel loops past the grid's limit); z: the matrix.
            let (mut segments, mut row_groups) = (1i64, 1i64);
            for (job, c) in jobs.job.iter_mut().zip(batch) {
                *job = Job {
                    src: c.from.address,
                    dst: base + c.offset,
                    src_pitch: c.from.pitch,
                    dst_pitch: c.pitch(),
                    rows: c.from.rows as i32,
                    row_bytes: c.row_bytes as i32,
                    chunks_per_row: c.chunks_per_row() as i32,
                    unused: 0,
                };
                segments = segments.max((c.chunks_per_row() + 31) / 32);
                row_groups = row_groups.max((c.from.rows + 7) / 8);
            }
            let blocks_x = u32::try_from(segments).unwrap_or(u32::MAX);
            let blocks_y = u32::try_from(row_groups.min(MAX_ROW_GROUPS)).unwrap_or(1);
            let mut params = [(&mut jobs as *mut Jobs).cast::<c_void>()];
            // SAFETY: the one parameter points at a live `Jobs`, laid out as the
            // kernel's struct; every job's source lies in a live allocation (the
            // caller's promise) and its destination in the workspace, which
            // outlives the copy (the pool synchronises before dropping one).
            check(
                unsafe {
                    cu::cuLaunchKernel(
                        self.kernel.function,
                        blocks_x,
                        blocks_y,
                        batch.len() as u32,
                        THREADS,
                        1,
                        1,
                        0,
                        super::current_stream(),
                        params.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                },
                "launch of the operand copy",
            )?;
        }
        Ok(Some(repacked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::gpu_ir::LaunchValue;
    use metile_ir::DType;

    fn spec(box_rows: u16, box_cols: u16) -> TensorMapSpec {
        TensorMapSpec {
            buffer: 0,
            dtype: DType::F16,
            rows: LaunchValue::Arg(3),
            cols: LaunchValue::Arg(5),
            stride: LaunchValue::Arg(5),
            box_rows,
            box_cols,
            swizzle_bytes: 128,
            stacked: false,
        }
    }

    fn f16_matrix(rows: i64, cols: i64) -> Matrix {
        Matrix {
            address: 0x7000_0000_0000,
            rows,
            cols,
            pitch: 2 * cols,
        }
    }

    #[test]
    fn odd_rows_are_copied_into_16_byte_rows_once() {
        let mut plan = Copies::default();
        let a = f16_matrix(1023, 999);
        // 8 x 9 output tiles of 128 x 128: A's 16 boxes along K are read by 9 columns of tiles.
        assert_eq!(plan.add(&spec(128, 64), &a, [8, 9, 1]), Some(0));
        assert_eq!(plan.add(&spec(64, 64), &a, [8, 9, 1]), Some(0));
        let b = f16_matrix(999, 1025);
        assert_eq!(plan.add(&spec(64, 64), &b, [8, 9, 1]), Some(1));
        let (ca, cb) = (plan.copies[0], plan.copies[1]);
        assert_eq!((ca.pitch(), cb.pitch()), (2048, 2176));
        assert_eq!((ca.chunks_per_row(), cb.chunks_per_row()), (125, 129));
        assert_eq!(cb.offset % REGION_ALIGN, 0);
        assert!(cb.offset >= 1023 * 2048);
        assert_eq!(
            plan.bytes,
            (cb.offset + 999 * 2176).div_ceil(REGION_ALIGN) * REGION_ALIGN
        );
    }

    #[test]
    fn rows_off_32_byte_sectors_are_copied_where_the_reuse_is_high() {
        // 3000 f16 columns: rows 6000 bytes apart, a map can be made but reads slowly.
        let b = f16_matrix(2048, 3000);
        assert!(b.aligned() && !b.sector_aligned());
        // 47 boxes along the columns: 6 x 47 blocks are needed, where an odd pitch needs 2 x 47.
        assert_eq!(Copies::default().add(&spec(64, 64), &b, [32, 12, 1]), Some(0));
        assert_eq!(Copies::default().add(&spec(64, 64), &b, [16, 12, 1]), None);
        let odd = f16_matrix(2048, 2999);
        assert_eq!(Copies::default().add(&spec(64, 64), &odd, [16, 12, 1]), Some(0));
        assert_eq!(
            Copies::default().add(&spec(64, 64), &f16_matrix(2048, 3008), [32, 12, 1]),
            None
        );
    }

    #[test]
    fn aligned_matrices_and_little_reuse_are_left_alone() {
        let mut plan = Copies::default();
        assert_eq!(plan.add(&spec(128, 64), &f16_matrix(1024, 1000), [8, 8, 1]), None);
        // One row of output tiles reads B once: a copy would only add traffic.
        assert_eq!(
            plan.add(&spec(64, 128), &f16_matrix(4095, 4095), [32, 1, 1]),
            None
        );
        assert!(plan.is_empty());
        // A matrix starting 2 bytes into its allocation is copied like an odd pitch.
        let shifted = Matrix {
            address: 0x7000_0000_0002,
            ..f16_matrix(256, 256)
        };
        assert_eq!(plan.add(&spec(128, 64), &shifted, [2, 8, 1]), Some(0));
    }
}
