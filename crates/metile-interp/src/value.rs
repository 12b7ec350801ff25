//! Run-time values. A tile is held lazily when that is cheaper and exact:
//!
//! * `Splat`: every element equal (and the representation of every rank-0 scalar);
//! * `Affine`: integer tiles whose element at flat index `i` is `start + step * i`,
//!   computed with wrapping `i64` arithmetic and then truncated to the dtype. Because
//!   truncation is a ring homomorphism this stays exact under wrapping add, sub and
//!   multiply by scalars, which is how `arange`-derived offsets are built;
//! * `Range`: bool tiles that are true exactly on flat indices `lo..hi` (the mask
//!   `offs < n` of an affine `offs`);
//! * `Dense`: one element per entry, the general form every op accepts;
//! * `View`: the elements of a contiguous, fully active load, read in place from the
//!   kernel's buffer. `prepare` allows it only for loads whose every use is an
//!   element-wise op or reduction that runs before any store of the instance, so the
//!   memory cannot change (except through other instances' races) while it is used.
//!
//! Lazy forms are defined on the row-major flat index, so they survive reshapes
//! (`expand_dims`) for free. Every lazy form can be materialised, and every op has a
//! dense path; the lazy paths are shortcuts checked against the dense ones in tests.

use crate::elem::{int_value, Dense, Element};
use crate::error::{internal, ExecError};
use crate::poison::Poison;
use metile_ir::DType;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Repr {
    /// Not written yet in this program instance.
    #[default]
    Uninit,
    Splat(u64),
    Affine {
        start: i64,
        step: i64,
    },
    Range {
        lo: usize,
        hi: usize,
    },
    Dense(Dense),
    /// `len` elements of the op's dtype at address `addr` (provenance exposed), aligned.
    View {
        addr: usize,
        len: usize,
    },
}

impl Repr {
    /// Copies `src` into `self`, reusing `self`'s dense allocation where possible.
    #[inline(always)]
    pub(crate) fn assign_from(&mut self, src: &Repr) {
        match (&mut *self, src) {
            (Repr::Dense(d), Repr::Dense(s)) => d.assign_from(s),
            (dst, s) => *dst = s.clone(),
        }
    }

    /// The tile as an operand of an element-wise kernel: a splat stays a single
    /// value, lazy forms are materialised into `buf`.
    pub(crate) fn operand<'a, T: Element>(
        &'a self,
        n: usize,
        buf: &'a mut Vec<T>,
    ) -> Result<Operand<'a, T>, ExecError> {
        match self {
            Repr::Splat(bits) => Ok(Operand::Splat(T::from_bits(*bits))),
            Repr::Dense(d) => match T::vec(d) {
                Some(v) if v.len() == n => Ok(Operand::Slice(v)),
                _ => Err(internal(format!(
                    "a dense {} tile of {} elements was expected, found {:?} with {} elements",
                    T::DTYPE,
                    n,
                    d.dtype(),
                    d.len()
                ))),
            },
            Repr::View { .. } => Ok(Operand::Slice(self.view_slice::<T>(n)?)),
            Repr::Affine { .. } | Repr::Range { .. } => {
                self.materialize_into(n, buf)?;
                Ok(Operand::Slice(buf))
            }
            Repr::Uninit => Err(internal("a value was read before it was computed")),
        }
    }

    /// All `n` elements as a slice: borrowed when dense, else materialised into `buf`.
    pub(crate) fn dense_slice<'a, T: Element>(
        &'a self,
        n: usize,
        buf: &'a mut Vec<T>,
    ) -> Result<&'a [T], ExecError> {
        if let Repr::Dense(d) = self {
            if let Some(v) = T::vec(d).filter(|v| v.len() == n) {
                return Ok(v);
            }
        }
        if let Repr::View { .. } = self {
            return self.view_slice(n);
        }
        self.materialize_into(n, buf)?;
        Ok(buf)
    }

    /// Writes all `n` elements into `out`.
    pub(crate) fn materialize_into<T: Element>(&self, n: usize, out: &mut Vec<T>) -> Result<(), ExecError> {
        out.clear();
        match *self {
            Repr::Splat(bits) => out.resize(n, T::from_bits(bits)),
            Repr::Affine { start, step } => {
                out.extend((0..n as i64).map(|i| T::cast_from_int(start.wrapping_add(step.wrapping_mul(i)))))
            }
            Repr::Range { lo, hi } => {
                out.extend((0..n).map(|i| T::cast_from_int(i64::from(lo <= i && i < hi))))
            }
            Repr::Dense(ref d) => match T::vec(d) {
                Some(v) if v.len() == n => out.extend_from_slice(v),
                _ => return Err(internal("dense tile of the wrong dtype or length")),
            },
            Repr::View { .. } => out.extend_from_slice(self.view_slice::<T>(n)?),
            Repr::Uninit => return Err(internal("a value was read before it was computed")),
        }
        Ok(())
    }

    /// The elements of a `View`, borrowed from the kernel's buffer.
    fn view_slice<T: Element>(&self, n: usize) -> Result<&[T], ExecError> {
        match *self {
            Repr::View { addr, len } if len == n && addr % std::mem::align_of::<T>() == 0 && addr != 0 => {
                // SAFETY: `memory::load` made the view from `n` in-bounds, aligned,
                // initialised elements of T (never bool) of a launch buffer, which the
                // launch contract keeps alive; `prepare` only allows views whose uses all
                // happen before any store of this instance, so nothing in this instance
                // writes the memory while the slice lives.
                Ok(unsafe { std::slice::from_raw_parts(std::ptr::with_exposed_provenance::<T>(addr), n) })
            }
            _ => Err(internal("a buffer view of the wrong length or alignment")),
        }
    }

    /// Replaces a lazy tile by its dense form (used by the dense-only mode).
    pub(crate) fn densify(&mut self, n: usize, storage: DType) -> Result<(), ExecError> {
        if matches!(self, Repr::Dense(_) | Repr::Uninit) {
            return Ok(());
        }
        crate::elem::with_elem!(storage, T => {
            let mut v: Vec<T> = Vec::with_capacity(n);
            self.materialize_into(n, &mut v)?;
            *self = Repr::Dense(T::into_dense(v));
        });
        Ok(())
    }

    /// Turns a one-element dense or view value (a scalar computed by a tile kernel,
    /// such as a load through a scalar pointer) into a splat.
    pub(crate) fn normalize_scalar(&mut self, storage: DType) -> Result<(), ExecError> {
        if matches!(self, Repr::Dense(_) | Repr::View { .. }) {
            let bits = crate::elem::with_elem!(storage, T => {
                let mut buf: Vec<T> = Vec::new();
                let first = self.dense_slice::<T>(1, &mut buf)?.first().copied();
                first.map(Element::to_bits).ok_or_else(|| internal("an empty scalar"))?
            });
            *self = Repr::Splat(bits);
        }
        Ok(())
    }

    /// The single value of a scalar (rank-0) value.
    pub(crate) fn scalar_bits(&self) -> Result<u64, ExecError> {
        match self {
            Repr::Splat(bits) => Ok(*bits),
            _ => Err(internal("a scalar value is not held as a splat")),
        }
    }
}

/// A value in a register: its elements, for pointers the memory they point into
/// (`repr` then holds `i64` element offsets), and its poisoned lanes, if any (only
/// ever set on the values `taint.rs` tracks).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Val {
    pub mem: u32,
    pub repr: Repr,
    pub poison: Option<Box<Poison>>,
}

impl Val {
    // Inlined: binding parameters copies a few of these per chunk of every launch.
    #[inline(always)]
    pub(crate) fn assign_from(&mut self, src: &Val) {
        self.mem = src.mem;
        self.repr.assign_from(&src.repr);
        if self.poison.is_some() || src.poison.is_some() {
            self.poison.clone_from(&src.poison);
        }
    }
}

/// An element-wise kernel's view of one input.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a, T> {
    Splat(T),
    Slice(&'a [T]),
}

macro_rules! define_typed_scratch {
    ($(($T:ty, $variant:ident, $field:ident)),*) => {
        /// Reusable buffers for materialising lazy operands, per element type.
        #[derive(Default)]
        pub(crate) struct TypedScratch {
            $(pub $field: [Vec<$T>; 3],)*
        }
    };
}
crate::elem::for_each_dense!(define_typed_scratch);

/// Every buffer an op may need besides its result; owned by one worker thread and
/// reused across ops and program instances so the hot path never allocates.
#[derive(Default)]
pub(crate) struct Scratch {
    pub typed: TypedScratch,
    pub mask: Vec<bool>,
    pub offsets: Vec<i64>,
    pub other_offsets: Vec<i64>,
    pub floats: [Vec<f32>; 3],
}

/// Moves the dense vector out of `out` (if it has one of this type) so its
/// allocation is reused, sized to `n`.
pub(crate) fn take_vec<T: Element>(out: &mut Repr, n: usize) -> Vec<T> {
    let mut v = match std::mem::take(out) {
        Repr::Dense(d) => T::from_dense(d).unwrap_or_default(),
        _ => Vec::new(),
    };
    v.resize(n, T::default());
    v
}

pub(crate) fn put_vec<T: Element>(out: &mut Repr, v: Vec<T>) {
    *out = Repr::Dense(T::into_dense(v));
}

/// The exact values of an affine integer tile of `n` elements of `dtype`, as
/// `(first, step)` in `i64`, or `None` when some element wraps around the dtype's
/// range (then comparisons and widening need the dense form).
pub(crate) fn exact_affine(start: i64, step: i64, n: usize, dtype: DType) -> Option<(i64, i64)> {
    if !dtype.is_int() {
        return None;
    }
    let bits = dtype.bits();
    // The element values: `start` and `step` reduced to the dtype (the step as a
    // signed difference), then checked against the dtype's range. A u64 beyond
    // i64::MAX is never exact here: callers compare in i64.
    let reduce = |v: i64, signed: bool| -> i128 {
        let shift = 64 - bits;
        if signed {
            i128::from((v << shift) >> shift)
        } else {
            i128::from(((v as u64) << shift) >> shift)
        }
    };
    let first = reduce(start, dtype.is_signed_int());
    let step = reduce(step, true);
    let (lo, hi) = if dtype.is_signed_int() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits).min(1i128 << 63) - 1)
    };
    let last = first + step * (n.saturating_sub(1) as i128);
    if (lo..=hi).contains(&first) && (lo..=hi).contains(&last) {
        Some((first as i64, step as i64))
    } else {
        None
    }
}

/// The value of an integer scalar as an `i64`.
pub(crate) fn scalar_int(repr: &Repr, dtype: DType) -> Result<i64, ExecError> {
    Ok(int_value(repr.scalar_bits()?, dtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_materialises_with_wrapping() {
        let r = Repr::Affine {
            start: i64::from(i32::MAX) - 1,
            step: 1,
        };
        let mut v: Vec<i32> = vec![];
        r.materialize_into(3, &mut v).unwrap();
        assert_eq!(v, vec![i32::MAX - 1, i32::MAX, i32::MIN]);
        assert_eq!(exact_affine(i64::from(i32::MAX) - 1, 1, 3, DType::I32), None);
        assert_eq!(exact_affine(-5, 2, 3, DType::I32), Some((-5, 2)));
        assert_eq!(exact_affine(-1, 1, 2, DType::U32), None);
        assert_eq!(
            exact_affine(u32::MAX as i64 - 1, -1, 2, DType::U32),
            Some((u32::MAX as i64 - 1, -1))
        );
        assert_eq!(exact_affine(120, 4, 3, DType::I8), None);
        assert_eq!(exact_affine(120, 3, 3, DType::I8), Some((120, 3)));
        assert_eq!(exact_affine(-3, 1, 3, DType::I8), Some((-3, 1)));
        assert_eq!(exact_affine(253, 1, 3, DType::U8), Some((253, 1)));
        assert_eq!(exact_affine(254, 1, 3, DType::U8), None);
        assert_eq!(exact_affine(-1, 1, 1, DType::U64), None);
    }

    #[test]
    fn range_materialises_as_bool_mask() {
        let mut v: Vec<bool> = vec![];
        Repr::Range { lo: 1, hi: 3 }.materialize_into(4, &mut v).unwrap();
        assert_eq!(v, vec![false, true, true, false]);
    }
}
