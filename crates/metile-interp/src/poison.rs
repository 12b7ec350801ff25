//! Poisoned lanes: the results of integer divisions and remainders by zero and of
//! shifts by a negative count or by at least the bit width.
//!
//! Such an op still computes a value in every lane (0 for the division, the count
//! taken modulo the width for the shift, as the GPU backends' guarded code does)
//! and marks the faulting lanes of its result as poisoned. Poison follows the
//! value: element-wise ops, casts, comparisons and pointer arithmetic poison a
//! lane if an operand's lane is; `select` takes the poison of the operand it picks
//! (and of its condition); broadcasts, reshapes and shuffles move it with the data;
//! loop-carried values and `if` results carry it through their registers.
//!
//! A poisoned lane is an error only where the kernel *observes* it: a lane a store
//! writes (value or address) or a load reads (address), any lane of a load or
//! store mask, of a reduction, `dot`, `tile_load`/`tile_store` operand, loop bound,
//! `if` condition or shuffle lane. Lanes that are never observed (skipped by the
//! store's mask, absent lanes, lanes a `where` discards) are no error, so
//! `where(y != 0, x // y, 0)` and `store(.., x // y, mask=m)` with `y` loaded
//! under `m` are fine. The error names the op that faulted (its kernel line) and
//! where its result was used.
//!
//! Only values that can carry poison pay for it: see `taint.rs`.

use crate::elem::{with_elem, CastSource, Element};
use crate::error::{internal, ExecError};
use crate::exec::broadcast_dense;
use crate::prepare::{Exec, Instr};
use crate::value::{scalar_int, Repr, Scratch, Val};
use metile_ir::{DType, Loc};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    Division,
    Remainder,
    Shift,
}

/// An op that may fault: its kind, the dtype it computes in and how the kernel
/// spells it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FaultSpec {
    pub kind: FaultKind,
    pub dtype: DType,
    pub symbol: &'static str,
}

/// What went wrong where, shared by every lane it poisoned.
#[derive(Debug, PartialEq)]
pub(crate) struct Fault {
    /// The faulting op's rule, by address: one fault per op and program instance.
    origin: usize,
    kind: FaultKind,
    loc: Loc,
    /// The first faulting lane's operation, e.g. "7 // 0 on i32".
    detail: String,
}

/// Lanes of a value (true = poisoned) and the fault that poisoned them.
type Source = (Vec<bool>, Arc<Fault>);

/// The poisoned lanes of a value, by the fault that poisoned them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Poison {
    sources: Vec<Source>,
}

impl Poison {
    /// Adds `lanes` (true = poisoned) of `fault`, merging lanes of the same fault.
    fn add(&mut self, lanes: Vec<bool>, fault: &Arc<Fault>) {
        if !lanes.iter().any(|&p| p) {
            return;
        }
        match self.sources.iter_mut().find(|(_, f)| f.origin == fault.origin) {
            Some((mine, _)) => {
                for (m, l) in mine.iter_mut().zip(lanes) {
                    *m |= l;
                }
            }
            None => self.sources.push((lanes, fault.clone())),
        }
    }

    /// Adds every source of `other`, each lane kept where `keep` says so.
    fn add_filtered(&mut self, other: &Poison, keep: impl Fn(usize) -> bool) {
        for (lanes, fault) in &other.sources {
            let kept = lanes.iter().enumerate().map(|(i, &p)| p && keep(i)).collect();
            self.add(kept, fault);
        }
    }

    fn into_option(self) -> Option<Box<Poison>> {
        (!self.sources.is_empty()).then(|| Box::new(self))
    }

    /// The first poisoned lane among those `active` selects, with its fault.
    fn first_observed(&self, active: impl Fn(usize) -> bool) -> Option<(usize, &Fault)> {
        self.sources
            .iter()
            .filter_map(|(lanes, fault)| {
                let lane = lanes.iter().enumerate().position(|(i, &p)| p && active(i))?;
                Some((lane, &**fault))
            })
            .min_by_key(|(lane, _)| *lane)
    }
}

/// An operand whose poisoned lanes the op observes.
#[derive(Debug)]
pub(crate) enum Observed {
    /// Every lane of a value of `numel` elements.
    All {
        operand: usize,
        numel: usize,
        role: &'static str,
    },
    /// The lanes an access performs: those where its mask operand (if any) holds.
    Masked {
        operand: usize,
        mask: Option<usize>,
        role: &'static str,
    },
}

/// How an op's result gets its poison.
#[derive(Debug)]
pub(crate) enum ResultRule {
    /// The result never carries poison.
    Untracked,
    /// The result is moved in from a region, poison included (`for`, `if`).
    Transferred,
    /// The result carries no poison of its own, but shares registers with values
    /// that do: it is cleared.
    Clear,
    /// Lane by lane union of these operands' poison, plus the op's own faults.
    Union {
        operands: Vec<usize>,
        fault: Option<FaultSpec>,
    },
    Broadcast,
    Select,
    /// A masked load's result: `other`'s poison where the mask is off.
    LoadOther,
    Exchange {
        xor: bool,
    },
}

/// The poison bookkeeping of one instruction (see `taint.rs`).
#[derive(Debug)]
pub(crate) struct PoisonRule {
    pub observe: Vec<Observed>,
    pub result: ResultRule,
    pub op_name: &'static str,
}

fn poison_of<'a>(regs: &'a [Val], ins: &Instr, operand: usize) -> Option<&'a Poison> {
    regs[ins.ins[operand] as usize].poison.as_deref()
}

/// The bool lanes of a mask operand of `n` elements, into `buf`.
fn mask_lanes<'a>(
    regs: &'a [Val],
    ins: &Instr,
    operand: usize,
    n: usize,
    buf: &'a mut Vec<bool>,
) -> Result<&'a [bool], ExecError> {
    regs[ins.ins[operand] as usize].repr.dense_slice::<bool>(n, buf)
}

impl PoisonRule {
    /// Before the op runs: fails if it would observe a poisoned lane.
    pub(crate) fn check_observed(
        &self,
        ins: &Instr,
        regs: &[Val],
        scratch: &mut Scratch,
    ) -> Result<(), ExecError> {
        for observed in &self.observe {
            let (role, numel, hit) = match *observed {
                Observed::All { operand, numel, role } => {
                    let hit = poison_of(regs, ins, operand).and_then(|p| p.first_observed(|_| true));
                    (role, numel, hit)
                }
                Observed::Masked { operand, mask, role } => {
                    let Some(p) = poison_of(regs, ins, operand) else {
                        continue;
                    };
                    let hit = match mask {
                        None => p.first_observed(|_| true),
                        Some(m) => {
                            let active = mask_lanes(regs, ins, m, ins.numel, &mut scratch.mask)?;
                            p.first_observed(|i| active.get(i).copied().unwrap_or(false))
                        }
                    };
                    (role, ins.numel, hit)
                }
            };
            if let Some((lane, fault)) = hit {
                return Err(self.error(fault, ins, role, lane, numel));
            }
        }
        Ok(())
    }

    fn error(&self, fault: &Fault, ins: &Instr, role: &str, lane: usize, numel: usize) -> ExecError {
        let element = if numel > 1 {
            format!(" (element {lane})")
        } else {
            String::new()
        };
        let message = format!(
            "{}; the result is used as {role} of `{}` at {}{element}",
            fault.detail, self.op_name, ins.loc
        );
        match fault.kind {
            FaultKind::Division | FaultKind::Remainder => ExecError::DivisionByZero {
                loc: fault.loc.clone(),
                message,
            },
            FaultKind::Shift => ExecError::InvalidShift {
                loc: fault.loc.clone(),
                message,
            },
        }
    }

    /// After the op ran: gives its result the poison the rule says.
    pub(crate) fn set_result(
        &self,
        ins: &Instr,
        regs: &mut [Val],
        scratch: &mut Scratch,
    ) -> Result<(), ExecError> {
        let n = ins.numel;
        let poison = match &self.result {
            ResultRule::Untracked | ResultRule::Transferred => return Ok(()),
            ResultRule::Clear => {
                for &out in &ins.outs {
                    regs[out as usize].poison = None;
                }
                return Ok(());
            }
            ResultRule::Union { operands, fault } => {
                let mut p = Poison::default();
                for &i in operands {
                    if let Some(q) = poison_of(regs, ins, i) {
                        p.add_filtered(q, |_| true);
                    }
                }
                if let Some(spec) = fault {
                    if let Some((lanes, fault)) = self.find_faults(*spec, ins, regs, scratch)? {
                        p.add(lanes, &fault);
                    }
                }
                p
            }
            ResultRule::Broadcast => {
                let Exec::Broadcast {
                    src_offset,
                    src_strides,
                    dst_shape,
                    ..
                } = &ins.exec
                else {
                    return Err(internal("a broadcast rule on another op"));
                };
                let mut p = Poison::default();
                if let Some(q) = poison_of(regs, ins, 0) {
                    for (lanes, fault) in &q.sources {
                        let mut out = vec![false; n];
                        if lanes.len() == 1 {
                            out.fill(lanes[0]);
                        } else {
                            broadcast_dense(lanes, *src_offset, src_strides, dst_shape, &mut out);
                        }
                        p.add(out, fault);
                    }
                }
                p
            }
            ResultRule::Select => {
                let cond = mask_lanes(regs, ins, 0, n, &mut scratch.mask)?;
                let mut p = Poison::default();
                if let Some(q) = poison_of(regs, ins, 0) {
                    p.add_filtered(q, |_| true);
                }
                if let Some(q) = poison_of(regs, ins, 1) {
                    p.add_filtered(q, |i| cond[i]);
                }
                if let Some(q) = poison_of(regs, ins, 2) {
                    p.add_filtered(q, |i| !cond[i]);
                }
                p
            }
            ResultRule::LoadOther => {
                let mut p = Poison::default();
                if let Some(q) = poison_of(regs, ins, 2) {
                    let mask = mask_lanes(regs, ins, 1, n, &mut scratch.mask)?;
                    p.add_filtered(q, |i| !mask[i]);
                }
                p
            }
            ResultRule::Exchange { xor } => {
                let lane_dtype = match &ins.exec {
                    Exec::SimdShuffleXor { lane_dtype, .. } | Exec::SimdBroadcast { lane_dtype, .. } => {
                        *lane_dtype
                    }
                    _ => return Err(internal("an exchange rule on another op")),
                };
                let lane = (scalar_int(&regs[ins.ins[1] as usize].repr, lane_dtype)? & 31) as usize;
                let mut p = Poison::default();
                if let Some(q) = poison_of(regs, ins, 0) {
                    for (lanes, fault) in &q.sources {
                        let moved = (0..n)
                            .map(|i| {
                                let s = if *xor {
                                    (i & !31) | ((i & 31) ^ lane)
                                } else {
                                    (i & !31) | lane
                                };
                                lanes[if s < n { s } else { i }]
                            })
                            .collect();
                        p.add(moved, fault);
                    }
                }
                p
            }
        };
        regs[ins.outs[0] as usize].poison = poison.into_option();
        Ok(())
    }

    /// The lanes where a division, remainder or shift faulted, if any did.
    fn find_faults(
        &self,
        spec: FaultSpec,
        ins: &Instr,
        regs: &[Val],
        scratch: &mut Scratch,
    ) -> Result<Option<Source>, ExecError> {
        let n = ins.numel;
        let (a, b) = (&regs[ins.ins[0] as usize].repr, &regs[ins.ins[1] as usize].repr);
        let int = CastSource::as_i64;
        let faulted = |v: i64| crate::taint::faults(spec.kind, v, spec.dtype);
        if let Repr::Splat(bits) = *b {
            if !faulted(crate::elem::int_value(bits, spec.dtype)) {
                return Ok(None);
            }
        }
        let found = with_elem!(spec.dtype, T => {
            let [sa, sb, _] = T::scratch(&mut scratch.typed);
            let bs = b.dense_slice::<T>(n, sb)?;
            match bs.iter().position(|&y| faulted(int(y.cast_source()))) {
                None => None,
                Some(first) => {
                    let x = int(a.dense_slice::<T>(n, sa)?[first].cast_source());
                    let y = int(bs[first].cast_source());
                    let lanes: Vec<bool> = bs.iter().map(|&y| faulted(int(y.cast_source()))).collect();
                    Some((lanes, x, y))
                }
            }
        });
        let Some((lanes, x, y)) = found else {
            return Ok(None);
        };
        let d = spec.dtype;
        let detail = match spec.kind {
            FaultKind::Division => format!("integer division by zero: {x} {} {y} on {d}", spec.symbol),
            FaultKind::Remainder => format!("integer remainder by zero: {x} {} {y} on {d}", spec.symbol),
            FaultKind::Shift => format!(
                "shift count out of range: {x} {} {y} on {d} (the count must be in [0, {}))",
                spec.symbol,
                8 * d.size_bytes()
            ),
        };
        let fault = Arc::new(Fault {
            origin: self as *const PoisonRule as usize,
            kind: spec.kind,
            loc: ins.loc.clone(),
            detail,
        });
        Ok(Some((lanes, fault)))
    }
}
