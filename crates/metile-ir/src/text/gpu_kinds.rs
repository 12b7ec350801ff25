//! GPU IR op names and attributes, read back.

use super::GpuParser;
use crate::gpu_ir::*;
use crate::text::names;
use crate::text::tile_parse::sem_scope;
use crate::text::ParseError;
use crate::tile_ir::{AtomicOp, OpKind};

const ATOMS: [AtomKind; 7] = [
    AtomKind::AppleSimdgroup8x8,
    AtomKind::AppleMatmul2d16x32x16,
    AtomKind::NvidiaMmaM16N8K16,
    AtomKind::NvidiaMmaM16N8K8Tf32,
    AtomKind::NvidiaWgmmaM64K16 { n: 0 },
    AtomKind::NvidiaWgmmaM64K32F8 { n: 0 },
    AtomKind::NvidiaWgmmaM64K8Tf32 { n: 0 },
];

const PLAIN: [GpuOpKind; 16] = [
    GpuOpKind::Fma,
    GpuOpKind::Select,
    GpuOpKind::Cast,
    GpuOpKind::MakeVector,
    GpuOpKind::SimdShuffleXor,
    GpuOpKind::SimdBroadcast,
    GpuOpKind::AssumeUniform,
    GpuOpKind::WgmmaFence,
    GpuOpKind::ProxyFence,
    GpuOpKind::WgmmaCommit,
    GpuOpKind::AsyncCommit,
    GpuOpKind::MbarrierWait,
    GpuOpKind::TmaLoad,
    GpuOpKind::Barrier,
    GpuOpKind::DeviceBarrier,
    GpuOpKind::Condition,
];

/// `name` without `prefix`, as a number.
fn suffix_number<T: std::str::FromStr>(name: &str, prefix: &str) -> Option<T> {
    name.strip_prefix(prefix)?.parse().ok()
}

impl GpuParser<'_> {
    pub(super) fn kind(&mut self, name: &str, at: usize) -> Result<GpuOpKind, ParseError> {
        if let Some(kind) = PLAIN.into_iter().find(|k| k.name() == name) {
            return Ok(kind);
        }
        if let Some(kind) = names::elementwise_kinds().find(|k| k.name() == name) {
            return Ok(match kind {
                OpKind::Unary(u) => GpuOpKind::Unary(u),
                OpKind::Binary(b) => GpuOpKind::Binary(b),
                OpKind::Compare(c) => GpuOpKind::Compare(c),
                _ => return Err(self.c.error_at(at, format!("`{name}` is not a GPU IR op"))),
            });
        }
        if let Some(op) = names::REDUCE
            .into_iter()
            .find(|&op| GpuOpKind::SimdReduce(op).name() == name)
        {
            return Ok(GpuOpKind::SimdReduce(op));
        }
        let unknown = |p: &GpuParser| p.c.error_at(at, format!("unknown GPU IR op `{name}`"));
        Ok(match name {
            "builtin" => self.builtin()?,
            "const" => GpuOpKind::Const(self.c.literal()?),
            "reg_read" => {
                let (reg, index) = self.reg_element()?;
                GpuOpKind::RegRead { reg, index }
            }
            "reg_write" => {
                let (reg, index) = self.reg_element()?;
                self.c.expect("=")?;
                GpuOpKind::RegWrite { reg, index }
            }
            "load" => self.load(1)?,
            "store" => GpuOpKind::Store {
                width: 1,
                has_mask: self.c.eat("masked"),
            },
            "mbarrier_arrive" => GpuOpKind::MbarrierArrive { expect_tx: false },
            "mbarrier_arrive.expect_tx" => GpuOpKind::MbarrierArrive { expect_tx: true },
            "atomic_add" if self.c.peek() == Some('%') => GpuOpKind::AtomicAdd,
            "print" => self.print()?,
            "assert" => GpuOpKind::Assert {
                message: self.c.string()?,
            },
            _ => {
                if let Some(op) = names::atomic_op(name) {
                    return self.atomic(op);
                }
                return self.numbered_kind(name).ok_or_else(|| unknown(self))?;
            }
        })
    }

    fn builtin(&mut self) -> Result<GpuOpKind, ParseError> {
        let at = self.c.pos();
        let word = self.c.word("a builtin")?;
        let mut all = vec![Builtin::ThreadIndex, Builtin::SimdLane, Builtin::SimdgroupIndex];
        for axis in 0..3 {
            all.push(Builtin::ThreadgroupPosition(axis));
            all.push(Builtin::ThreadgroupsPerGrid(axis));
        }
        all.into_iter()
            .find(|b| b.name() == word)
            .map(GpuOpKind::Builtin)
            .ok_or_else(|| self.c.error_at(at, format!("unknown builtin `{word}`")))
    }

    fn load(&mut self, width: u8) -> Result<GpuOpKind, ParseError> {
        Ok(GpuOpKind::Load {
            width,
            has_mask: self.c.eat("masked"),
            has_other: self.c.eat("other"),
        })
    }

    fn atomic(&mut self, op: AtomicOp) -> Result<GpuOpKind, ParseError> {
        let (sem, scope) = sem_scope(&mut self.c)?;
        Ok(GpuOpKind::Atomic {
            op,
            sem,
            scope,
            has_mask: self.c.eat("masked"),
        })
    }

    /// `["piece", ...] [hex_from=N]`.
    fn print(&mut self) -> Result<GpuOpKind, ParseError> {
        self.c.expect("[")?;
        let mut pieces = Vec::new();
        if !self.c.eat("]") {
            loop {
                pieces.push(self.c.string()?);
                if self.c.eat("]") {
                    break;
                }
                self.c.expect(",")?;
            }
        }
        let hex_from = if self.c.peek() == Some('h') {
            Some(self.keyed("hex_from")?)
        } else {
            None
        };
        Ok(GpuOpKind::Print { pieces, hex_from })
    }

    /// Ops whose name carries a number (`load.v4`, `wgmma_wait.0`, ...);
    /// `None` for an unknown name, `Some(Err)` for bad attributes.
    fn numbered_kind(&mut self, name: &str) -> Option<Result<GpuOpKind, ParseError>> {
        if let Some(width) = suffix_number::<u8>(name, "load.v") {
            return Some(self.load(width));
        }
        if let Some(width) = suffix_number::<u8>(name, "store.v") {
            let has_mask = self.c.eat("masked");
            return Some(Ok(GpuOpKind::Store { width, has_mask }));
        }
        if let Some(lane) = suffix_number(name, "extract.") {
            return Some(Ok(GpuOpKind::Extract { lane }));
        }
        if let Some(pending) = suffix_number(name, "async_wait.") {
            return Some(Ok(GpuOpKind::AsyncWait { pending }));
        }
        if let Some(count) = suffix_number(name, "mbarrier_init.") {
            return Some(Ok(GpuOpKind::MbarrierInit { count }));
        }
        if let Some(bytes) = suffix_number(name, "async_copy.b") {
            let has_mask = self.c.eat("masked");
            let zero_fill = self.c.eat("zero_fill");
            return Some(Ok(GpuOpKind::AsyncCopy {
                bytes,
                has_mask,
                zero_fill,
            }));
        }
        if let Some(rest) = name.strip_prefix("ldmatrix.x") {
            let (count, trans) = match rest.strip_suffix(".trans") {
                Some(c) => (c, true),
                None => (rest, false),
            };
            let count = count.parse().ok()?;
            return Some(Ok(GpuOpKind::LdMatrix { count, trans }));
        }
        match name {
            "simdgroup_load" => return Some(Ok(GpuOpKind::SimdgroupLoad { transpose: false })),
            "simdgroup_load.trans" => return Some(Ok(GpuOpKind::SimdgroupLoad { transpose: true })),
            _ => {}
        }
        if let Some(atom) = name.strip_prefix("mma.") {
            let kind = ATOMS.into_iter().find(|k| k.name() == atom)?;
            return Some(self.mma(kind));
        }
        if let Some(pending) = suffix_number(name, "wgmma_wait.") {
            return Some(self.wgmma_wait(pending));
        }
        if let Some(n) = name.strip_prefix("wgmma.m64n") {
            if let Some(n) = n.strip_suffix("k16").and_then(|n| n.parse().ok()) {
                return Some(self.wgmma(n));
            }
            let n = n.strip_suffix("k8.tf32.rs").and_then(|n| n.parse().ok())?;
            return Some(self.wgmma_reg_a(n));
        }
        None
    }

    fn mma(&mut self, kind: AtomKind) -> Result<GpuOpKind, ParseError> {
        Ok(GpuOpKind::Mma(match kind {
            AtomKind::NvidiaWgmmaM64K16 { .. } => AtomKind::NvidiaWgmmaM64K16 { n: self.keyed("n")? },
            AtomKind::NvidiaWgmmaM64K32F8 { .. } => AtomKind::NvidiaWgmmaM64K32F8 { n: self.keyed("n")? },
            AtomKind::NvidiaWgmmaM64K8Tf32 { .. } => AtomKind::NvidiaWgmmaM64K8Tf32 { n: self.keyed("n")? },
            other => other,
        }))
    }

    /// `key=rN[i]`.
    fn keyed_reg(&mut self, key: &str) -> Result<(RegId, u32), ParseError> {
        self.c.expect(key)?;
        self.c.expect("=")?;
        self.reg_element()
    }

    /// `{swizzle=S lbo=L sbo=B k_major|mn_major}`.
    fn operand(&mut self, key: &str) -> Result<WgmmaOperand, ParseError> {
        self.c.expect(key)?;
        self.c.expect("=")?;
        self.c.expect("{")?;
        let swizzle_bytes = self.keyed("swizzle")?;
        let lbo = self.keyed("lbo")?;
        let sbo = self.keyed("sbo")?;
        let mn_major = if self.c.eat("mn_major") {
            true
        } else {
            self.c.expect("k_major")?;
            false
        };
        self.c.expect("}")?;
        Ok(WgmmaOperand {
            swizzle_bytes,
            lbo,
            sbo,
            mn_major,
        })
    }

    fn wgmma(&mut self, n: u16) -> Result<GpuOpKind, ParseError> {
        let (acc, first) = self.keyed_reg("acc")?;
        let a = self.operand("a")?;
        let b = self.operand("b")?;
        let accumulate = !self.c.eat("overwrite");
        Ok(GpuOpKind::Wgmma {
            n,
            a,
            b,
            acc,
            first,
            accumulate,
        })
    }

    fn wgmma_reg_a(&mut self, n: u16) -> Result<GpuOpKind, ParseError> {
        let (acc, first) = self.keyed_reg("acc")?;
        let (a, a_first) = self.keyed_reg("a")?;
        let b = self.operand("b")?;
        Ok(GpuOpKind::WgmmaRegA {
            n,
            b,
            acc,
            first,
            a,
            a_first,
        })
    }

    /// `acc=rA count=C [held=rH[first..end]]`.
    fn wgmma_wait(&mut self, pending: u8) -> Result<GpuOpKind, ParseError> {
        self.c.expect("acc")?;
        self.c.expect("=")?;
        let acc = self.declared_reg()?;
        let count = self.keyed("count")?;
        let held = if self.c.eat("held") {
            self.c.expect("=")?;
            let reg = self.declared_reg()?;
            self.c.expect("[")?;
            let first: u32 = self.c.uint("the first register")?;
            self.c.expect("..")?;
            let at = self.c.pos();
            let end: u32 = self.c.uint("the end register")?;
            let Some(count) = end.checked_sub(first) else {
                return Err(self.c.error_at(at, "the held range ends before it starts"));
            };
            self.c.expect("]")?;
            Some((reg, first, count))
        } else {
            None
        };
        Ok(GpuOpKind::WgmmaWait {
            pending,
            acc,
            count,
            held,
        })
    }
}
