//! Atomics on the CPU: real atomic read-modify-writes on the kernel's memory,
//! since program instances run in parallel on worker threads.
//!
//! Integers use the processor's atomic instructions (`fetch_add`, `fetch_max`,
//! ...); floats a compare-and-swap loop on their bits (f16 and bf16 add in f32
//! and round once, which is the correctly rounded sum). The memory ordering is
//! the kernel's `sem=` (a whole program instance is one thread here, so the
//! scope changes nothing). Every active lane is checked against the buffer
//! before any is touched, so a failing atomic changes nothing; masked-off lanes
//! return 0.

use crate::elem::Element;
use crate::error::{internal, ExecError};
use crate::memory::Region;
use crate::value::{put_vec, take_vec, Operand, Repr, Scratch};
use half::{bf16, f16};
use metile_ir::{AtomicOp, DType, MemSem};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU16, AtomicU32, Ordering};

/// What an atomic instruction does, fixed when the kernel is prepared.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AtomicSpec {
    pub op: AtomicOp,
    pub sem: MemSem,
    pub dtype: DType,
}

fn ordering(sem: MemSem) -> Ordering {
    match sem {
        MemSem::Relaxed => Ordering::Relaxed,
        MemSem::Acquire => Ordering::Acquire,
        MemSem::Release => Ordering::Release,
        MemSem::AcqRel => Ordering::AcqRel,
    }
}

/// The ordering of a failed compare-and-swap (a load: no release part).
fn failure_ordering(sem: MemSem) -> Ordering {
    if sem.acquires() {
        Ordering::Acquire
    } else {
        Ordering::Relaxed
    }
}

/// An element type atomics are defined on.
trait AtomicElem: Element {
    /// Performs `op` on the element at `p` with operand `v` (and comparand
    /// `cmp` for `Cas`), returning the element's old value.
    ///
    /// # Safety
    /// `p` must be valid for reads and writes of one element, aligned to it,
    /// and accessed only atomically by every thread while this runs.
    unsafe fn rmw(p: *mut u8, op: AtomicOp, v: Self, cmp: Self, sem: MemSem) -> Self;
}

macro_rules! int_atomic {
    ($T:ty, $A:ty) => {
        impl AtomicElem for $T {
            unsafe fn rmw(p: *mut u8, op: AtomicOp, v: Self, cmp: Self, sem: MemSem) -> Self {
                // SAFETY: the caller guarantees a valid, aligned element.
                let a = unsafe { <$A>::from_ptr(p as *mut $T) };
                let order = ordering(sem);
                match op {
                    AtomicOp::Add => a.fetch_add(v, order),
                    AtomicOp::Max => a.fetch_max(v, order),
                    AtomicOp::Min => a.fetch_min(v, order),
                    AtomicOp::And => a.fetch_and(v, order),
                    AtomicOp::Or => a.fetch_or(v, order),
                    AtomicOp::Xor => a.fetch_xor(v, order),
                    AtomicOp::Xchg => a.swap(v, order),
                    AtomicOp::Cas => match a.compare_exchange(cmp, v, order, failure_ordering(sem)) {
                        Ok(old) | Err(old) => old,
                    },
                }
            }
        }
    };
}

int_atomic!(i32, AtomicI32);
int_atomic!(u32, AtomicU32);
int_atomic!(i64, AtomicI64);

/// The new value of a float element: the language's rules for float atomics
/// (`max`/`min` ignore a NaN operand and keep the stored value on ties, so
/// `-0.0` and `0.0` stay as stored).
fn float_update(op: AtomicOp, old: f32, v: f32) -> f32 {
    match op {
        AtomicOp::Add => old + v,
        AtomicOp::Max if v > old || (old.is_nan() && !v.is_nan()) => v,
        AtomicOp::Min if v < old || (old.is_nan() && !v.is_nan()) => v,
        AtomicOp::Xchg => v,
        _ => old,
    }
}

/// A compare-and-swap loop on the bits of a float element.
macro_rules! float_atomic {
    ($T:ty, $A:ty, $bits:ty, $to_f32:expr, $from_f32:expr) => {
        impl AtomicElem for $T {
            unsafe fn rmw(p: *mut u8, op: AtomicOp, v: Self, cmp: Self, sem: MemSem) -> Self {
                // SAFETY: the caller guarantees a valid, aligned element.
                let a = unsafe { <$A>::from_ptr(p as *mut $bits) };
                let (order, failure) = (ordering(sem), failure_ordering(sem));
                let mut old = a.load(failure);
                loop {
                    let new = if op == AtomicOp::Cas {
                        if old == Element::to_bits(cmp) as $bits {
                            Element::to_bits(v) as $bits
                        } else {
                            old
                        }
                    } else {
                        let value = <$T as Element>::from_bits(u64::from(old));
                        let updated = float_update(op, $to_f32(value), $to_f32(v));
                        if op == AtomicOp::Xchg {
                            Element::to_bits(v) as $bits
                        } else {
                            Element::to_bits($from_f32(updated)) as $bits
                        }
                    };
                    // Written even when unchanged, so the ordering holds on every path.
                    match a.compare_exchange_weak(old, new, order, failure) {
                        Ok(previous) => return <$T as Element>::from_bits(u64::from(previous)),
                        Err(current) => old = current,
                    }
                }
            }
        }
    };
}

float_atomic!(f32, AtomicU32, u32, |x: f32| x, |x: f32| x);
float_atomic!(f16, AtomicU16, u16, f16::to_f32, f16::from_f32);
float_atomic!(bf16, AtomicU16, u16, bf16::to_f32, bf16::from_f32);

/// Inputs of one atomic instruction.
pub(crate) struct AtomicArgs<'a> {
    pub offsets: &'a Repr,
    pub values: &'a Repr,
    pub cmp: Option<&'a Repr>,
    pub mask: Option<&'a Repr>,
}

/// Runs an atomic over `n` lanes in lane order, writing the old values to `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn atomic(
    spec: AtomicSpec,
    args: AtomicArgs<'_>,
    out: &mut Repr,
    n: usize,
    region: Region,
    scratch: &mut Scratch,
    oob: &dyn Fn(i64) -> ExecError,
    misaligned: &dyn Fn() -> ExecError,
) -> Result<(), ExecError> {
    match spec.dtype {
        DType::I32 => run::<i32>(spec, args, out, n, region, scratch, oob, misaligned),
        DType::U32 => run::<u32>(spec, args, out, n, region, scratch, oob, misaligned),
        DType::I64 => run::<i64>(spec, args, out, n, region, scratch, oob, misaligned),
        DType::F32 => run::<f32>(spec, args, out, n, region, scratch, oob, misaligned),
        DType::F16 => run::<f16>(spec, args, out, n, region, scratch, oob, misaligned),
        DType::BF16 => run::<bf16>(spec, args, out, n, region, scratch, oob, misaligned),
        other => Err(internal(format!("an atomic on {other} elements"))),
    }
}

#[allow(clippy::too_many_arguments)]
fn run<T: AtomicElem>(
    spec: AtomicSpec,
    args: AtomicArgs<'_>,
    out: &mut Repr,
    n: usize,
    region: Region,
    scratch: &mut Scratch,
    oob: &dyn Fn(i64) -> ExecError,
    misaligned: &dyn Fn() -> ExecError,
) -> Result<(), ExecError> {
    let size = std::mem::size_of::<T>();
    if region.ptr as usize % size != 0 {
        return Err(misaligned());
    }
    let offsets = args.offsets.operand::<i64>(n, &mut scratch.offsets)?;
    let mask = match args.mask {
        Some(m) => m.operand::<bool>(n, &mut scratch.mask)?,
        None => Operand::Splat(true),
    };
    let [value_buf, cmp_buf, _] = T::scratch(&mut scratch.typed);
    let values = args.values.operand::<T>(n, value_buf)?;
    let cmp = match args.cmp {
        Some(c) => c.operand::<T>(n, cmp_buf)?,
        None => Operand::Splat(T::default()),
    };
    let lane = |o: &Operand<'_, T>, i: usize| match *o {
        Operand::Splat(x) => x,
        Operand::Slice(s) => s[i],
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
        let at = index(i);
        if active(i) && !(at >= 0 && (at as u64) < region.len as u64) {
            return Err(oob(at));
        }
    }
    let mut old = take_vec::<T>(out, n);
    for (i, slot) in old.iter_mut().enumerate() {
        *slot = if active(i) {
            // SAFETY: the index was checked to lie inside the region above, and
            // the region's base is aligned to the element (checked at the top).
            unsafe {
                T::rmw(
                    region.ptr.add(index(i) as usize * size),
                    spec.op,
                    lane(&values, i),
                    lane(&cmp, i),
                    spec.sem,
                )
            }
        } else {
            T::default()
        };
    }
    put_vec(out, old);
    Ok(())
}
