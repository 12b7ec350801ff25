//! Loads and stores: pointer tiles, masks, `other`, `tile_load` / `tile_store`.
//!
//! Every accessed element index is checked against the region's extent before it
//! is touched. A contiguous access (affine offsets with unit step under a range
//! mask) is checked once and copied as a slice; everything else goes element by
//! element. Stores check every active lane before writing any, so a failing store
//! writes nothing.

use crate::elem::Element;
use crate::error::ExecError;
use crate::value::{put_vec, take_vec, Operand, Repr, Scratch};
use metile_ir::DType;

/// A block of memory a pointer can point into: a kernel buffer or a shared allocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    pub ptr: *mut u8,
    /// Extent in elements.
    pub len: usize,
}

// SAFETY: a Region is a plain address range. The launch contract (`Executable::launch`
// is unsafe) makes the caller guarantee the memory stays valid for the launch; program
// instances touching the same element concurrently race exactly as on a GPU.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    fn contains(&self, index: i64) -> bool {
        index >= 0 && (index as u64) < self.len as u64
    }
}

/// Lanes `lo..hi` are active; `None` when the mask is not a range.
fn active_range(mask: Option<&Repr>, n: usize) -> Option<(usize, usize)> {
    match mask {
        None => Some((0, n)),
        Some(Repr::Range { lo, hi }) => Some((*lo, (*hi).min(n))),
        Some(Repr::Splat(b)) => Some(if *b != 0 { (0, n) } else { (0, 0) }),
        Some(_) => None,
    }
}

/// For a unit-step affine pointer with active lanes `lo..hi`: the element index of
/// lane `lo`, after checking that the whole run lies inside the region.
fn contiguous_run(
    offsets: &Repr,
    mask: Option<&Repr>,
    n: usize,
    region: Region,
    oob: &dyn Fn(i64) -> ExecError,
) -> Option<Result<(usize, usize, usize), ExecError>> {
    let Repr::Affine { start, step: 1 } = *offsets else {
        return None;
    };
    let (lo, hi) = active_range(mask, n)?;
    if lo >= hi {
        return Some(Ok((0, 0, 0)));
    }
    let first = start.checked_add(lo as i64)?;
    let end = start.checked_add(hi as i64)?;
    if first < 0 {
        return Some(Err(oob(first)));
    }
    if end as u64 > region.len as u64 {
        // The first lane past the end of the region, in lane order.
        return Some(Err(oob(first.max(region.len as i64))));
    }
    Some(Ok((lo, hi, first as usize)))
}

/// `load(ptrs, mask, other)` for elements of type `T`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn load<T: Element>(
    offsets: &Repr,
    mask: Option<&Repr>,
    other: Option<&Repr>,
    out: &mut Repr,
    n: usize,
    region: Region,
    scratch: &mut Scratch,
    oob: &dyn Fn(i64) -> ExecError,
    allow_view: bool,
) -> Result<(), ExecError> {
    let size = std::mem::size_of::<T>();
    if allow_view && T::DTYPE != DType::Bool {
        if let Some(run) = contiguous_run(offsets, mask, n, region, oob) {
            let (lo, hi, first) = run?;
            // SAFETY: lanes lo..hi lie inside the region (checked by contiguous_run).
            let addr = unsafe { region.ptr.add(first * size) }.expose_provenance();
            if lo == 0 && hi == n && n > 0 && addr % std::mem::align_of::<T>() == 0 {
                *out = Repr::View { addr, len: n };
                return Ok(());
            }
        }
    }
    let [other_buf, _, _] = T::scratch(&mut scratch.typed);
    let other = match other {
        Some(o) => o.operand::<T>(n, other_buf)?,
        None => Operand::Splat(T::default()),
    };
    let masked_value = |i: usize| match other {
        Operand::Splat(x) => x,
        Operand::Slice(s) => s[i],
    };

    if let Some(run) = contiguous_run(offsets, mask, n, region, oob) {
        let (lo, hi, first) = run?;
        let mut v = take_vec::<T>(out, n);
        for (i, slot) in v.iter_mut().enumerate().take(lo) {
            *slot = masked_value(i);
        }
        for (i, slot) in v.iter_mut().enumerate().skip(hi) {
            *slot = masked_value(i);
        }
        if T::DTYPE == DType::Bool {
            for (k, slot) in v[lo..hi].iter_mut().enumerate() {
                // SAFETY: first + k < region.len was checked by contiguous_run.
                *slot = unsafe { T::read(region.ptr.add((first + k) * size)) };
            }
        } else if hi > lo {
            // SAFETY: elements first..first + (hi - lo) lie inside the region (checked
            // above) and `v` has room for lanes lo..hi; T has no invalid bit patterns
            // (bool is handled above), and the destination is our own vector.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    region.ptr.add(first * size),
                    v.as_mut_ptr().add(lo) as *mut u8,
                    (hi - lo) * size,
                );
            }
        }
        put_vec(out, v);
        return Ok(());
    }

    let offsets = offsets.operand::<i64>(n, &mut scratch.offsets)?;
    let mask = match mask {
        Some(m) => m.operand::<bool>(n, &mut scratch.mask)?,
        None => Operand::Splat(true),
    };
    let mut v = take_vec::<T>(out, n);
    for (i, slot) in v.iter_mut().enumerate() {
        let active = match mask {
            Operand::Splat(b) => b,
            Operand::Slice(m) => m[i],
        };
        if !active {
            *slot = masked_value(i);
            continue;
        }
        let index = match offsets {
            Operand::Splat(x) => x,
            Operand::Slice(s) => s[i],
        };
        if !region.contains(index) {
            return Err(oob(index));
        }
        // SAFETY: index is inside the region (checked just above).
        *slot = unsafe { T::read(region.ptr.add(index as usize * size)) };
    }
    put_vec(out, v);
    Ok(())
}

/// `store(ptrs, values, mask)`: checks every active lane, then writes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn store<T: Element>(
    offsets: &Repr,
    values: &Repr,
    mask: Option<&Repr>,
    n: usize,
    region: Region,
    scratch: &mut Scratch,
    oob: &dyn Fn(i64) -> ExecError,
) -> Result<(), ExecError> {
    let size = std::mem::size_of::<T>();
    let [value_buf, _, _] = T::scratch(&mut scratch.typed);
    let values = values.operand::<T>(n, value_buf)?;

    if let Some(run) = contiguous_run(offsets, mask, n, region, oob) {
        let (lo, hi, first) = run?;
        match values {
            Operand::Slice(s) if hi > lo => {
                // SAFETY: the destination run lies inside the region (checked above);
                // the source is our own vector, so the ranges cannot overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        s.as_ptr().add(lo) as *const u8,
                        region.ptr.add(first * size),
                        (hi - lo) * size,
                    );
                }
            }
            Operand::Slice(_) => {}
            Operand::Splat(x) => {
                for k in 0..hi - lo {
                    // SAFETY: first + k is inside the region (checked above).
                    unsafe { T::write(region.ptr.add((first + k) * size), x) };
                }
            }
        }
        return Ok(());
    }

    let offsets = offsets.operand::<i64>(n, &mut scratch.offsets)?;
    let mask = match mask {
        Some(m) => m.operand::<bool>(n, &mut scratch.mask)?,
        None => Operand::Splat(true),
    };
    let active = |i: usize| match mask {
        Operand::Splat(b) => b,
        Operand::Slice(m) => m[i],
    };
    let index = |i: usize| match offsets {
        Operand::Splat(x) => x,
        Operand::Slice(s) => s[i],
    };
    for i in 0..n {
        if active(i) && !region.contains(index(i)) {
            return Err(oob(index(i)));
        }
    }
    for i in 0..n {
        if active(i) {
            let value = match values {
                Operand::Splat(x) => x,
                Operand::Slice(s) => s[i],
            };
            // SAFETY: every active index was checked by the loop above.
            unsafe { T::write(region.ptr.add(index(i) as usize * size), value) };
        }
    }
    Ok(())
}

/// The element index of row `r` of a tile access, column 0, checked to lie with all
/// its `cols` elements inside the region.
fn tile_row_start(base: i128, r: usize, stride: i128, cols: usize, region: Region) -> Result<usize, i64> {
    let start = base + r as i128 * stride;
    let clamp = |x: i128| x.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    if start < 0 {
        return Err(clamp(start));
    }
    if start + cols as i128 > region.len as i128 {
        return Err(clamp(start.max(region.len as i128)));
    }
    Ok(start as usize)
}

/// Addressing of a `tile_load`/`tile_store`: element `(r, c)` is at
/// `offset + (row + r) * stride + col + c`.
#[derive(Clone, Copy)]
pub(crate) struct TileAddress {
    pub offset: i64,
    pub row: i64,
    pub col: i64,
    pub stride: i64,
    pub rows: usize,
    pub cols: usize,
}

impl TileAddress {
    fn base(&self) -> i128 {
        i128::from(self.offset) + i128::from(self.row) * i128::from(self.stride) + i128::from(self.col)
    }
}

pub(crate) fn tile_load<T: Element>(
    at: TileAddress,
    out: &mut Repr,
    region: Region,
    oob: &dyn Fn(i64) -> ExecError,
) -> Result<(), ExecError> {
    let size = std::mem::size_of::<T>();
    let mut v = take_vec::<T>(out, at.rows * at.cols);
    let result = (|| {
        for (r, row) in v.chunks_exact_mut(at.cols.max(1)).enumerate().take(at.rows) {
            let start = tile_row_start(at.base(), r, i128::from(at.stride), at.cols, region).map_err(oob)?;
            for (c, slot) in row.iter_mut().enumerate() {
                // SAFETY: start + c < region.len (checked by tile_row_start).
                *slot = unsafe { T::read(region.ptr.add((start + c) * size)) };
            }
        }
        Ok(())
    })();
    put_vec(out, v);
    result
}

pub(crate) fn tile_store<T: Element>(
    at: TileAddress,
    values: &Repr,
    region: Region,
    scratch: &mut Scratch,
    oob: &dyn Fn(i64) -> ExecError,
) -> Result<(), ExecError> {
    let size = std::mem::size_of::<T>();
    let n = at.rows * at.cols;
    let [value_buf, _, _] = T::scratch(&mut scratch.typed);
    let values = values.operand::<T>(n, value_buf)?;
    let mut starts = std::mem::take(&mut scratch.other_offsets);
    starts.clear();
    for r in 0..at.rows {
        match tile_row_start(at.base(), r, i128::from(at.stride), at.cols, region) {
            Ok(s) => starts.push(s as i64),
            Err(index) => {
                scratch.other_offsets = starts;
                return Err(oob(index));
            }
        }
    }
    for (r, &start) in starts.iter().enumerate() {
        for c in 0..at.cols {
            let value = match values {
                Operand::Splat(x) => x,
                Operand::Slice(s) => s[r * at.cols + c],
            };
            // SAFETY: every row was checked to lie inside the region above.
            unsafe { T::write(region.ptr.add((start as usize + c) * size), value) };
        }
    }
    scratch.other_offsets = starts;
    Ok(())
}
