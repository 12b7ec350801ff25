//! `device_print`, `device_assert` and the checks of the kernel's promises
//! (`multiple_of`, `max_contiguous`, `max_constancy`) on the CPU.
//!
//! Printed lines go to the worker's buffer; the launch writes every instance's
//! lines in program order (see `Executable::launch`). Their text is
//! `metile_ir::print_format`'s, which the GPU backends print too.

use crate::elem::{with_elem, CastSource, Element};
use crate::error::ExecError;
use crate::value::Repr;
use metile_ir::print_format::{format_g, print_pieces};
use metile_ir::{AssumeFact, DType, Loc};
use std::fmt::Write;

/// The `n` elements of `repr` (of `dtype`) as integers or floats.
fn elements(repr: &Repr, n: usize, dtype: DType) -> Result<Vec<CastSource>, ExecError> {
    with_elem!(dtype, T => {
        let mut buf: Vec<T> = Vec::new();
        let slice = repr.dense_slice::<T>(n, &mut buf)?;
        Ok(slice.iter().map(|x| x.cast_source()).collect())
    })
}

fn format_value(x: CastSource, dtype: DType, hex: bool) -> String {
    match (x, hex) {
        (CastSource::Float(f), _) => format_g(f64::from(f)),
        (CastSource::Double(d), _) => format_g(d),
        (CastSource::UInt(u), true) => format!("{u:#x}"),
        (CastSource::UInt(u), false) => u.to_string(),
        (CastSource::Int(i), true) if dtype == DType::I64 => format!("{:#x}", i as u64),
        // Narrower integers print as C's `%x` prints them: promoted to 32 bits.
        (CastSource::Int(i), true) => format!("{:#x}", i as u32),
        (CastSource::Int(i), false) => i.to_string(),
    }
}

/// One operand of a print: its dtype and whether it is a tile.
pub(crate) struct PrintItem {
    pub dtype: DType,
    pub tile: bool,
}

/// Appends the lines of one `device_print` to `out`.
pub(crate) fn print(
    out: &mut String,
    pid: [u32; 3],
    prefix: &str,
    hex: bool,
    items: &[PrintItem],
    shape: &[usize],
    values: &[&Repr],
) -> Result<(), ExecError> {
    let numel: usize = shape.iter().product();
    let columns = items
        .iter()
        .zip(values)
        .map(|(item, repr)| elements(repr, if item.tile { numel } else { 1 }, item.dtype))
        .collect::<Result<Vec<_>, _>>()?;
    let pieces = print_pieces(prefix, shape.len(), items.len());
    let lines = if shape.is_empty() { 1 } else { numel };
    for e in 0..lines {
        let mut slots: Vec<String> = pid.iter().map(u32::to_string).collect();
        slots.extend(coordinates(e, shape).iter().map(usize::to_string));
        for (item, column) in items.iter().zip(&columns) {
            let x = column[if item.tile { e } else { 0 }];
            slots.push(format_value(x, item.dtype, hex));
        }
        for (piece, slot) in pieces.iter().zip(slots.iter().map(Some).chain([None])) {
            out.push_str(piece);
            if let Some(s) = slot {
                out.push_str(s);
            }
        }
        out.push('\n');
    }
    Ok(())
}

/// The row-major coordinates of flat element `e` of a tile of `shape`.
fn coordinates(e: usize, shape: &[usize]) -> Vec<usize> {
    let mut coords = vec![0; shape.len()];
    let mut rest = e;
    for (c, &extent) in coords.iter_mut().zip(shape).rev() {
        *c = rest % extent.max(1);
        rest /= extent.max(1);
    }
    coords
}

fn describe_element(shape: &[usize], e: usize) -> String {
    let coords: Vec<String> = coordinates(e, shape).iter().map(usize::to_string).collect();
    format!("element ({})", coords.join(", "))
}

/// Fails with the assert's message at the first false element of `cond`.
pub(crate) fn check_assert(
    cond: &Repr,
    shape: &[usize],
    pid: [u32; 3],
    message: &str,
    loc: &Loc,
) -> Result<(), ExecError> {
    let numel: usize = shape.iter().product();
    let values = elements(cond, numel, DType::Bool)?;
    let failed = values.iter().position(|x| matches!(x, CastSource::Int(0)));
    let Some(e) = failed else {
        return Ok(());
    };
    let mut at = format!("program ({}, {}, {})", pid[0], pid[1], pid[2]);
    if !shape.is_empty() {
        let _ = write!(at, ", {}", describe_element(shape, e));
    }
    Err(ExecError::AssertionFailed {
        loc: loc.clone(),
        message: message.to_string(),
        at,
    })
}

/// Checks the kernel's `assume(cond)` (see `OpKind::AssumeTrue`): a GPU
/// compiles code that may be wrong where the promise is broken, so the
/// interpreter refuses to go on rather than run a kernel that differs there.
pub(crate) fn check_assume_true(cond: &Repr, pid: [u32; 3], loc: &Loc) -> Result<(), ExecError> {
    let holds = elements(cond, 1, DType::Bool)?
        .iter()
        .all(|x| !matches!(x, CastSource::Int(0)));
    if holds {
        return Ok(());
    }
    Err(ExecError::InvalidValue {
        loc: loc.clone(),
        message: format!(
            "the kernel assumed a condition (metile.assume) that is false in program ({}, {}, {})",
            pid[0], pid[1], pid[2]
        ),
    })
}

/// Checks a promise of the kernel about `x` (see `OpKind::Assume`): a broken
/// promise would let a GPU access memory in wider, misaligned pieces, so it
/// is an error here rather than a silent difference there.
pub(crate) fn check_assume(
    x: &Repr,
    dtype: DType,
    shape: &[usize],
    fact: AssumeFact,
    n: u64,
    loc: &Loc,
) -> Result<(), ExecError> {
    let numel: usize = shape.iter().product();
    let values: Vec<i64> = elements(x, numel, dtype)?
        .into_iter()
        .map(CastSource::as_i64)
        .collect();
    let last = shape.last().copied().unwrap_or(1).max(1);
    let run = 1usize << n.trailing_zeros().min(30);
    let broken = |e: usize, why: String| ExecError::InvalidValue {
        loc: loc.clone(),
        message: format!(
            "the kernel promised {}(x, {n}), but {} of x {why}",
            match fact {
                AssumeFact::MultipleOf => "multiple_of",
                AssumeFact::Contiguous => "max_contiguous",
                AssumeFact::Constant => "max_constancy",
            },
            if shape.is_empty() {
                "the value".to_string()
            } else {
                describe_element(shape, e)
            }
        ),
    };
    for (e, &v) in values.iter().enumerate() {
        let position = e % last;
        let ok = match fact {
            AssumeFact::MultipleOf => position % run != 0 || v.rem_euclid(n as i64) == 0,
            AssumeFact::Contiguous => position % run == 0 || v == values[e - 1].wrapping_add(1),
            AssumeFact::Constant => position % run == 0 || v == values[e - 1],
        };
        if !ok {
            let why = match fact {
                AssumeFact::MultipleOf => format!("is {v}, not a multiple of {n}"),
                AssumeFact::Contiguous => format!("is {v} after {}", values[e - 1]),
                AssumeFact::Constant => format!("is {v} where {} came before", values[e - 1]),
            };
            return Err(broken(e, why));
        }
    }
    Ok(())
}
