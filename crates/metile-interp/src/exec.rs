//! Executes a prepared `Program` for one program instance at a time, on a worker's
//! reusable register file.

use crate::atomic::{self, AtomicArgs};
use crate::elem::{with_elem, Element};
use crate::elementwise::select;
use crate::error::{internal, ExecError};
use crate::memory::{self, Region, TileAddress};
use crate::prepare::{Block, Exec, Instr, Program, Tracked, Transfer, MAX_RANK};
use crate::reduce::{dot, reduce_exact, reduce_float};
use crate::scan_sort::{scan_exact, scan_float, sort};
use crate::swizzle::swizzle;
use crate::value::{put_vec, scalar_int, take_vec, Repr, Scratch, Val};
use metile_ir::DType;

/// Registers and buffers owned by one worker thread, reused across instances and launches.
pub(crate) struct Worker {
    pub regs: Vec<Val>,
    scratch: Scratch,
    shared: Vec<Vec<u64>>,
    /// Staging for values copied out at the end of a region.
    temps: Vec<Val>,
    /// Offsets widened to i64 by `add_ptr`.
    widened: Repr,
    /// Lines printed by the current program instance (`device_print`).
    pub printed: String,
}

impl Worker {
    pub(crate) fn new(program: &Program) -> Worker {
        Worker {
            regs: vec![Val::default(); program.num_slots],
            scratch: Scratch::default(),
            shared: program
                .shared
                .iter()
                .map(|s| vec![0u64; (s.elements * s.dtype.size_bytes()).div_ceil(8)])
                .collect(),
            temps: vec![],
            widened: Repr::Uninit,
            printed: String::new(),
        }
    }
}

/// What every instance of one launch shares.
pub(crate) struct Machine<'a> {
    pub program: &'a Program,
    /// Regions of the pointer parameters, indexed by parameter position.
    pub globals: &'a [Region],
    pub grid: [u32; 3],
    /// False in the dense-only mode: every tile result is materialised at once.
    pub lazy: bool,
    /// Whether the launch should give up (asked between instances and at every
    /// loop iteration, so a long loop can be interrupted too).
    pub stop: &'a (dyn Fn() -> bool + Sync),
}

/// The kernel-facing name of an atomic (`atomic_add`), for messages.
fn ins_name(op: metile_ir::AtomicOp) -> String {
    format!("atomic_{}", op.name())
}

fn splat_i32(v: i64) -> Repr {
    Repr::Splat((v as i32).to_bits())
}

/// Copies slot `src` into slot `dst` of the register file.
fn copy_slot(regs: &mut [Val], dst: usize, src: usize) {
    if dst != src {
        let mut d = std::mem::take(&mut regs[dst]);
        d.assign_from(&regs[src]);
        regs[dst] = d;
    }
}

/// Moves a region's yielded values into their destinations (loop arguments or op
/// results). Copies are staged first so a yield that reads a destination (`yield b, a`
/// for arguments `a, b`) sees the values from before the transfer.
fn transfer(regs: &mut [Val], temps: &mut Vec<Val>, block: &Block, to: &[u32]) {
    if temps.len() < block.yields.len() {
        temps.resize_with(block.yields.len(), Val::default);
    }
    for (k, (&from, &mode)) in block.yields.iter().zip(&block.transfers).enumerate() {
        if mode == Transfer::Copy {
            temps[k].assign_from(&regs[from as usize]);
        }
    }
    for (k, ((&from, &mode), &dst)) in block.yields.iter().zip(&block.transfers).zip(to).enumerate() {
        match mode {
            Transfer::Move => regs.swap(dst as usize, from as usize),
            Transfer::Copy => std::mem::swap(&mut regs[dst as usize], &mut temps[k]),
        }
    }
}

/// The strided view of `src` that `Exec::Broadcast` describes, into `out`.
pub(crate) fn broadcast_dense<T: Element>(
    src: &[T],
    offset: usize,
    strides: &[usize],
    shape: &[usize],
    out: &mut [T],
) {
    let rank = shape.len();
    let Some((&inner_len, outer_shape)) = shape.split_last() else {
        if let (Some(o), Some(&s)) = (out.first_mut(), src.get(offset)) {
            *o = s;
        }
        return;
    };
    let inner_stride = strides[rank - 1];
    let mut counter = [0usize; MAX_RANK];
    for row in out.chunks_exact_mut(inner_len.max(1)) {
        let base: usize = offset
            + counter[..rank - 1]
                .iter()
                .zip(strides)
                .map(|(c, s)| c * s)
                .sum::<usize>();
        match inner_stride {
            0 => row.fill(src[base]),
            1 => row.copy_from_slice(&src[base..base + inner_len]),
            s => {
                for (i, o) in row.iter_mut().enumerate() {
                    *o = src[base + i * s];
                }
            }
        }
        for d in (0..outer_shape.len()).rev() {
            counter[d] += 1;
            if counter[d] < outer_shape[d] {
                break;
            }
            counter[d] = 0;
        }
    }
}

/// Thread-level exchange: lane `i` reads `x[source(i)]`; a source beyond the
/// threadgroup (a partial last simdgroup) reads the lane's own value.
fn exchange<T: Element>(
    x: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
    source: impl Fn(usize) -> usize,
) -> Result<(), ExecError> {
    let [buf, _, _] = T::scratch(&mut scratch.typed);
    let x = x.dense_slice::<T>(n, buf)?;
    let mut v = take_vec::<T>(out, n);
    for (i, o) in v.iter_mut().enumerate() {
        let s = source(i);
        *o = x[if s < n { s } else { i }];
    }
    put_vec(out, v);
    Ok(())
}

impl Machine<'_> {
    pub(crate) fn run_instance(&self, w: &mut Worker, pid: [u32; 3]) -> Result<(), ExecError> {
        self.block(&self.program.body, w, pid)
    }

    fn block(&self, block: &Block, w: &mut Worker, pid: [u32; 3]) -> Result<(), ExecError> {
        for ins in &block.instrs {
            self.step(ins, w, pid)?;
            if ins.scalar_result {
                for &o in &ins.outs {
                    let o = o as usize;
                    if !self.program.slot_is_tile[o] {
                        w.regs[o].repr.normalize_scalar(self.program.slot_storage[o])?;
                    }
                }
            }
            if !self.lazy {
                for &o in &ins.outs {
                    let o = o as usize;
                    if self.program.slot_is_tile[o] {
                        let (n, d) = (self.program.slot_numel[o], self.program.slot_storage[o]);
                        w.regs[o].repr.densify(n, d)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn region(&self, mem: u32, shared: &mut [Vec<u64>]) -> Result<Region, ExecError> {
        let mem = mem as usize;
        if let Some(r) = self.globals.get(mem) {
            return Ok(*r);
        }
        let index = mem - self.globals.len();
        match (shared.get_mut(index), self.program.shared.get(index)) {
            (Some(buf), Some(info)) => Ok(Region {
                ptr: buf.as_mut_ptr() as *mut u8,
                len: info.elements,
            }),
            _ => Err(internal(format!("pointer into unknown memory {mem}"))),
        }
    }

    /// The buffer argument and element index an address read from memory names.
    /// Only the launch's own buffer arguments can be reached this way, so every
    /// access through the pointer is checked against that buffer as usual; an
    /// address anywhere else is refused here rather than dereferenced.
    fn resolve_address(&self, ins: &Instr, address: u64, pointee: DType) -> Result<(u32, u64), ExecError> {
        let size = pointee.size_bytes() as u64;
        let fail = |message: String| ExecError::InvalidValue {
            loc: ins.loc.clone(),
            message,
        };
        for (i, region) in self.globals.iter().enumerate() {
            let Some(Some(dtype)) = self.program.buffer_dtypes.get(i) else {
                continue;
            };
            let base = region.ptr as u64;
            let bytes = region.len as u64 * dtype.size_bytes() as u64;
            if address < base || address - base >= bytes.max(1) || region.ptr.is_null() {
                continue;
            }
            let name = self.program.mem_names.get(i).cloned().unwrap_or_default();
            if *dtype != pointee {
                return Err(fail(format!(
                    "the address {address:#x} read from memory points into `{name}`, a buffer of {dtype}, \
                     but is used as a pointer to {pointee}"
                )));
            }
            let offset = address - base;
            if offset % size != 0 {
                return Err(fail(format!(
                    "the address {address:#x} read from memory is not aligned to {pointee} elements of `{name}` \
                     (byte offset {offset})"
                )));
            }
            return Ok((i as u32, offset / size));
        }
        Err(fail(format!(
            "the address {address:#x} read from memory and cast to a pointer points into no buffer argument \
             of this launch; pointers from memory must point into a buffer the kernel is given as an argument"
        )))
    }

    fn oob<'a>(&'a self, ins: &'a Instr, mem: u32, len: usize) -> impl Fn(i64) -> ExecError + 'a {
        move |index| ExecError::OutOfBounds {
            loc: ins.loc.clone(),
            param: self
                .program
                .mem_names
                .get(mem as usize)
                .cloned()
                .unwrap_or_default(),
            index,
            len,
        }
    }

    /// Runs `f` with the first result's value taken out of the register file, so
    /// operands can be read while it is written; it goes back even on error.
    // Inlined by hand, as `step`: a launch of a small kernel is mostly this
    // dispatch, and a call per op measurably slows it.
    #[inline(always)]
    fn with_out(
        w: &mut Worker,
        ins: &Instr,
        f: impl FnOnce(&[Val], &mut Repr, &mut Scratch) -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        let dst = ins.outs[0] as usize;
        let mut out = std::mem::take(&mut w.regs[dst].repr);
        let result = f(&w.regs, &mut out, &mut w.scratch);
        w.regs[dst].repr = out;
        result
    }

    fn set(w: &mut Worker, ins: &Instr, repr: Repr) {
        w.regs[ins.outs[0] as usize].repr = repr;
    }

    // Inlined into `block` (its one hot caller; `tracked` is the other).
    #[inline(always)]
    fn step(&self, ins: &Instr, w: &mut Worker, pid: [u32; 3]) -> Result<(), ExecError> {
        let n = ins.numel;
        let arg = |i: usize| -> usize { ins.ins[i] as usize };
        match &ins.exec {
            Exec::ProgramId(axis) => Self::set(w, ins, splat_i32(i64::from(pid[*axis]))),
            Exec::NumPrograms(axis) => Self::set(w, ins, splat_i32(i64::from(self.grid[*axis]))),
            Exec::Constant(bits) => Self::set(w, ins, Repr::Splat(*bits)),
            Exec::Arange { start } => Self::set(
                w,
                ins,
                Repr::Affine {
                    start: *start,
                    step: 1,
                },
            ),
            Exec::Broadcast {
                src_numel,
                src_offset,
                src_strides,
                dst_shape,
                storage,
                in_order,
            } => {
                let src = arg(0);
                w.regs[ins.outs[0] as usize].mem = w.regs[src].mem;
                Self::with_out(w, ins, |regs, out, scratch| {
                    let input = &regs[src].repr;
                    if matches!(input, Repr::Splat(_)) || *in_order {
                        // A splat stays a splat; a view in flat order is the operand.
                        out.assign_from(input);
                        return Ok(());
                    }
                    with_elem!(*storage, T => {
                        let [buf, _, _] = T::scratch(&mut scratch.typed);
                        let s = input.dense_slice::<T>(*src_numel, buf)?;
                        let mut v = take_vec::<T>(out, n);
                        broadcast_dense(s, *src_offset, src_strides, dst_shape, &mut v);
                        put_vec(out, v);
                    });
                    Ok(())
                })?;
            }
            Exec::Reshape => copy_slot(&mut w.regs, ins.outs[0] as usize, arg(0)),
            Exec::Cast(f) | Exec::Unary(f) => {
                let a = arg(0);
                Self::with_out(w, ins, |regs, out, scratch| f(&regs[a].repr, out, n, scratch))?;
            }
            Exec::Binary(f) | Exec::Compare(f) => {
                let (a, b) = (arg(0), arg(1));
                Self::with_out(w, ins, |regs, out, scratch| {
                    f(&regs[a].repr, &regs[b].repr, out, n, scratch)
                })?;
            }
            Exec::Select { storage, steal } => {
                let (c, a, b) = (arg(0), arg(1), arg(2));
                let every_lane = match w.regs[c].repr {
                    Repr::Splat(bits) => bits != 0,
                    Repr::Range { lo, hi } => lo == 0 && hi >= n,
                    _ => false,
                };
                // A view aliases memory a later store may change: only owned values move.
                if *steal && every_lane && !matches!(w.regs[a].repr, Repr::View { .. }) {
                    let dst = ins.outs[0] as usize;
                    w.regs[dst].mem = w.regs[a].mem;
                    let taken = std::mem::take(&mut w.regs[a].repr);
                    // `a`'s next definition reuses the result's old allocation.
                    w.regs[a].repr = std::mem::replace(&mut w.regs[dst].repr, taken);
                    return Ok(());
                }
                let (mem_a, mem_b) = (w.regs[a].mem, w.regs[b].mem);
                let cond_splat = match w.regs[c].repr {
                    Repr::Splat(bits) => Some(bits != 0),
                    _ => None,
                };
                let mem = match cond_splat {
                    Some(true) => mem_a,
                    Some(false) => mem_b,
                    None if mem_a == mem_b => mem_a,
                    None => {
                        return Err(ExecError::Unsupported {
                            loc: ins.loc.clone(),
                            op: "select".into(),
                            reason: "selecting lane by lane between pointers into different buffers".into(),
                        })
                    }
                };
                w.regs[ins.outs[0] as usize].mem = mem;
                Self::with_out(
                    w,
                    ins,
                    |regs, out, scratch| with_elem!(*storage, T => select::<T>(&regs[c].repr, &regs[a].repr, &regs[b].repr, out, n, scratch)),
                )?;
            }
            Exec::AddPtr { widen, add } => {
                let (p, o) = (arg(0), arg(1));
                w.regs[ins.outs[0] as usize].mem = w.regs[p].mem;
                let mut widened = std::mem::take(&mut w.widened);
                let result = Self::with_out(w, ins, |regs, out, scratch| {
                    let offsets = match widen {
                        Some(f) => {
                            f(&regs[o].repr, &mut widened, n, scratch)?;
                            &widened
                        }
                        None => &regs[o].repr,
                    };
                    add(&regs[p].repr, offsets, out, n, scratch)
                });
                w.widened = widened;
                result?;
            }
            Exec::IntToPtr { pointee } => {
                let address = w.regs[arg(0)].repr.scalar_bits()?;
                let (mem, index) = self.resolve_address(ins, address, *pointee)?;
                let out = &mut w.regs[ins.outs[0] as usize];
                out.mem = mem;
                out.repr = Repr::Splat(index);
            }
            Exec::Load {
                dtype,
                has_mask,
                has_other,
                view,
            } => {
                let p = arg(0);
                let mem = w.regs[p].mem;
                let region = self.region(mem, &mut w.shared)?;
                let oob = self.oob(ins, mem, region.len);
                let mask = has_mask.then(|| arg(1));
                let other = has_other.then(|| arg(2));
                let is_global = (mem as usize) < self.globals.len();
                Self::with_out(w, ins, |regs, out, scratch| {
                    let mask = mask.map(|m| &regs[m].repr);
                    let other = other.map(|o| &regs[o].repr);
                    with_elem!(*dtype, T => memory::load::<T>(&regs[p].repr, mask, other, out, n, region, scratch, &oob, *view && is_global))
                })?;
            }
            Exec::Store { dtype, has_mask } => {
                let (p, v) = (arg(0), arg(1));
                let mem = w.regs[p].mem;
                let region = self.region(mem, &mut w.shared)?;
                let oob = self.oob(ins, mem, region.len);
                let Worker { regs, scratch, .. } = w;
                let mask = has_mask.then(|| &regs[arg(2)].repr);
                with_elem!(*dtype, T => memory::store::<T>(
                    &regs[p].repr, &regs[v].repr, mask, n, region, scratch, &oob
                ))?;
            }
            Exec::Atomic { spec, has_mask } => {
                let p = arg(0);
                let mem = w.regs[p].mem;
                let region = self.region(mem, &mut w.shared)?;
                let oob = self.oob(ins, mem, region.len);
                let misaligned = || {
                    ExecError::BadArguments(format!(
                        "{}: `{}` on `{}` needs the buffer aligned to its {}-byte elements (an array \
                         made from an offset into raw bytes is not); pass a copy of it",
                        ins.loc,
                        ins_name(spec.op),
                        self.program
                            .mem_names
                            .get(mem as usize)
                            .cloned()
                            .unwrap_or_default(),
                        spec.dtype.size_bytes()
                    ))
                };
                let cas = spec.op == metile_ir::AtomicOp::Cas;
                let value = arg(1 + usize::from(cas));
                let cmp = cas.then(|| arg(1));
                let mask = has_mask.then(|| arg(2 + usize::from(cas)));
                Self::with_out(w, ins, |regs, out, scratch| {
                    let args = AtomicArgs {
                        offsets: &regs[p].repr,
                        values: &regs[value].repr,
                        cmp: cmp.map(|c| &regs[c].repr),
                        mask: mask.map(|m| &regs[m].repr),
                    };
                    atomic::atomic(*spec, args, out, n, region, scratch, &oob, &misaligned)
                })?;
            }
            Exec::TileLoad {
                dtype,
                rows,
                cols,
                index_dtypes,
            }
            | Exec::TileStore {
                dtype,
                rows,
                cols,
                index_dtypes,
            } => {
                let p = arg(0);
                let mem = w.regs[p].mem;
                let region = self.region(mem, &mut w.shared)?;
                let oob = self.oob(ins, mem, region.len);
                let at = TileAddress {
                    offset: scalar_int(&w.regs[p].repr, DType::I64)?,
                    row: scalar_int(&w.regs[arg(1)].repr, index_dtypes[0])?,
                    col: scalar_int(&w.regs[arg(2)].repr, index_dtypes[1])?,
                    stride: scalar_int(&w.regs[arg(3)].repr, index_dtypes[2])?,
                    rows: *rows,
                    cols: *cols,
                };
                if matches!(ins.exec, Exec::TileLoad { .. }) {
                    Self::with_out(
                        w,
                        ins,
                        |_, out, _| with_elem!(*dtype, T => memory::tile_load::<T>(at, out, region, &oob)),
                    )?;
                } else {
                    let v = arg(4);
                    with_elem!(*dtype, T => memory::tile_store::<T>(at, &w.regs[v].repr, region, &mut w.scratch, &oob))?;
                }
            }
            Exec::Dot { operand, acc, shape } => {
                let (a, b, c) = (arg(0), arg(1), arg(2));
                Self::with_out(w, ins, |regs, out, scratch| {
                    with_elem!(*operand, T => with_elem!(*acc, D => dot::<T, D>(
                        *shape, &regs[a].repr, &regs[b].repr, &regs[c].repr, out, scratch
                    )))
                })?;
            }
            Exec::Reduce { op, dtype, shape } => {
                let a = arg(0);
                Self::with_out(w, ins, |regs, out, scratch| {
                    // f64 reduces in f64 (the exact kernel's arithmetic); narrower floats in f32.
                    if dtype.is_float() && *dtype != DType::F64 {
                        with_elem!(*dtype, T => reduce_float::<T>(*op, *shape, &regs[a].repr, out, scratch))
                    } else {
                        with_elem!(*dtype, T => reduce_exact::<T>(*op, *shape, &regs[a].repr, out, scratch))
                    }
                })?;
            }
            Exec::Fma(f) => {
                let (a, b, c) = (arg(0), arg(1), arg(2));
                Self::with_out(w, ins, |regs, out, scratch| {
                    f(&regs[a].repr, &regs[b].repr, &regs[c].repr, out, n, scratch)
                })?;
            }
            Exec::Scan {
                op,
                reverse,
                dtype,
                shape,
            } => {
                let a = arg(0);
                Self::with_out(w, ins, |regs, out, scratch| {
                    let x = &regs[a].repr;
                    if dtype.is_float() && *dtype != DType::F64 {
                        with_elem!(*dtype, T => scan_float::<T>(*op, *reverse, *shape, x, out, scratch))
                    } else {
                        with_elem!(*dtype, T => scan_exact::<T>(*op, *reverse, *shape, x, out, scratch))
                    }
                })?;
            }
            Exec::Sort {
                descending,
                dtype,
                shape,
            } => {
                let a = arg(0);
                Self::with_out(
                    w,
                    ins,
                    |regs, out, scratch| with_elem!(*dtype, T => sort::<T>(*descending, *shape, &regs[a].repr, out, scratch)),
                )?;
            }
            Exec::Swizzle { pattern, block_size } => {
                let m = scalar_int(&w.regs[arg(0)].repr, DType::I32)?;
                let nn = scalar_int(&w.regs[arg(1)].repr, DType::I32)?;
                let grid = (i64::from(self.grid[0]), i64::from(self.grid[1]));
                let (sm, sn) = swizzle(*pattern, m, nn, grid.0, grid.1, i64::from(*block_size));
                w.regs[ins.outs[0] as usize].repr = splat_i32(sm);
                w.regs[ins.outs[1] as usize].repr = splat_i32(sn);
            }
            Exec::For { body, bound_dtypes } => self.run_for(ins, body, bound_dtypes, w, pid)?,
            Exec::If {
                then_block,
                else_block,
            } => {
                let cond = w.regs[arg(0)].repr.scalar_bits()? != 0;
                let block = if cond { then_block } else { else_block };
                self.block(block, w, pid)?;
                transfer(&mut w.regs, &mut w.temps, block, &ins.outs);
            }
            Exec::Region { body } => self.block(body, w, pid)?,
            Exec::While { cond, body } => self.run_while(ins, cond, body, w, pid)?,
            Exec::Print {
                prefix,
                hex,
                items,
                shape,
            } => {
                let values: Vec<&Repr> = ins.ins.iter().map(|&v| &w.regs[v as usize].repr).collect();
                crate::debug::print(&mut w.printed, pid, prefix, *hex, items, shape, &values)?;
            }
            Exec::Assert { message, shape } => {
                crate::debug::check_assert(&w.regs[arg(0)].repr, shape, pid, message, &ins.loc)?;
            }
            Exec::AssumeTrue => crate::debug::check_assume_true(&w.regs[arg(0)].repr, pid, &ins.loc)?,
            Exec::Assume {
                fact,
                value,
                storage,
                shape,
            } => {
                crate::debug::check_assume(&w.regs[arg(0)].repr, *storage, shape, *fact, *value, &ins.loc)?;
                copy_slot(&mut w.regs, ins.outs[0] as usize, arg(0));
            }
            Exec::ThreadId => Self::set(w, ins, Repr::Affine { start: 0, step: 1 }),
            Exec::SimdLaneId => Self::with_out(w, ins, |_, out, _| {
                let mut v = take_vec::<i32>(out, n);
                for (i, o) in v.iter_mut().enumerate() {
                    *o = (i % 32) as i32;
                }
                put_vec(out, v);
                Ok(())
            })?,
            Exec::SimdShuffleXor { storage, lane_dtype } | Exec::SimdBroadcast { storage, lane_dtype } => {
                let (x, l) = (arg(0), arg(1));
                let lane = (scalar_int(&w.regs[l].repr, *lane_dtype)? & 31) as usize;
                let xor = matches!(ins.exec, Exec::SimdShuffleXor { .. });
                Self::with_out(w, ins, |regs, out, scratch| {
                    let source = |i: usize| {
                        if xor {
                            (i & !31) | ((i & 31) ^ lane)
                        } else {
                            (i & !31) | lane
                        }
                    };
                    with_elem!(*storage, T => exchange::<T>(&regs[x].repr, out, n, scratch, source))
                })?;
            }
            Exec::Shared { index } => {
                if let Some(buf) = w.shared.get_mut(*index) {
                    buf.fill(0);
                }
                let out = &mut w.regs[ins.outs[0] as usize];
                out.mem = (self.globals.len() + index) as u32;
                out.repr = Repr::Splat(0);
            }
            Exec::Nop => {}
            Exec::Tracked(t) => self.tracked(t, w, pid)?,
        }
        Ok(())
    }

    /// An op with its poison bookkeeping around it (see `poison.rs`); out of line so
    /// that the ops of kernels without poison run as if it did not exist.
    #[inline(never)]
    fn tracked(&self, t: &Tracked, w: &mut Worker, pid: [u32; 3]) -> Result<(), ExecError> {
        t.rule.check_observed(&t.instr, &w.regs, &mut w.scratch)?;
        self.step(&t.instr, w, pid)?;
        t.rule.set_result(&t.instr, &mut w.regs, &mut w.scratch)
    }

    /// `while`: the body's arguments hold the carried values; each iteration
    /// copies them to the condition's arguments, runs the condition, and ends
    /// the loop when it yields false.
    fn run_while(
        &self,
        ins: &Instr,
        cond: &Block,
        body: &Block,
        w: &mut Worker,
        pid: [u32; 3],
    ) -> Result<(), ExecError> {
        for (k, &arg) in body.args.iter().enumerate() {
            copy_slot(&mut w.regs, arg as usize, ins.ins[k] as usize);
        }
        loop {
            for (&from, &to) in body.args.iter().zip(&cond.args) {
                copy_slot(&mut w.regs, to as usize, from as usize);
            }
            self.block(cond, w, pid)?;
            let flag = cond
                .yields
                .first()
                .ok_or_else(|| internal("a while condition yields nothing"))?;
            if w.regs[*flag as usize].repr.scalar_bits()? == 0 {
                break;
            }
            self.block(body, w, pid)?;
            transfer(&mut w.regs, &mut w.temps, body, &body.args);
        }
        for (&result, &arg) in ins.outs.iter().zip(&body.args) {
            w.regs.swap(result as usize, arg as usize);
        }
        Ok(())
    }

    fn run_for(
        &self,
        ins: &Instr,
        body: &Block,
        bound_dtypes: &[DType; 3],
        w: &mut Worker,
        pid: [u32; 3],
    ) -> Result<(), ExecError> {
        let bound = |w: &Worker, i: usize| scalar_int(&w.regs[ins.ins[i] as usize].repr, bound_dtypes[i]);
        let (start, end, step) = (bound(w, 0)?, bound(w, 1)?, bound(w, 2)?);
        if step == 0 {
            return Err(ExecError::InvalidValue {
                loc: ins.loc.clone(),
                message: "tile_range step must not be zero".into(),
            });
        }
        let Some((&iv_slot, carried)) = body.args.split_first() else {
            return Err(internal("a loop body has no induction variable"));
        };
        for (k, &arg) in carried.iter().enumerate() {
            copy_slot(&mut w.regs, arg as usize, ins.ins[3 + k] as usize);
        }
        let mut iv = start;
        while (step > 0 && iv < end) || (step < 0 && iv > end) {
            if (self.stop)() {
                return Err(ExecError::Interrupted);
            }
            w.regs[iv_slot as usize].repr = splat_i32(iv);
            self.block(body, w, pid)?;
            transfer(&mut w.regs, &mut w.temps, body, carried);
            match iv.checked_add(step) {
                Some(next) => iv = next,
                None => break,
            }
        }
        for (&result, &arg) in ins.outs.iter().zip(carried) {
            w.regs.swap(result as usize, arg as usize);
        }
        Ok(())
    }
}
