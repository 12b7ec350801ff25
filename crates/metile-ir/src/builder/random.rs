//! Random numbers (`randint4x`, `randint`, `rand`, `randn`, `rand4x`,
//! `randn4x`): Philox4x32 (Salmon et al., "Parallel random numbers: as easy as
//! 1, 2, 3", the Random123 library) spelled with ordinary Tile IR ops, exactly
//! as Triton's `random.py` spells it, so every backend runs the same integer
//! ops and a seed and offsets give Triton's bits.
//!
//! * The counter is `(offset, 0, 0, 0)` and the key the seed widened to 64 bits
//!   (sign-extended from a signed seed, as Triton's `seed.to(uint64)`), low
//!   word first.
//! * A round: `c0' = umulhi(B, c2) ^ c1 ^ k0`, `c1' = B * c2`,
//!   `c2' = umulhi(A, c0) ^ c3 ^ k1`, `c3' = A * c0`, then the key gains the
//!   Weyl constants. Ten rounds by default.
//! * A u32 `x` becomes a uniform float in `[0, 1)` as `i * 4.6566127342e-10`
//!   with `i = x` read as i32, folded onto the non-negatives (`-i - 1` where
//!   negative) and converted to f32: integer work, one rounding of the
//!   conversion and one of the product, so `rand` is bit-identical everywhere.
//! * `randn` is Box-Muller on the first two words: `sqrt(-2 log u1) cos(2 pi u2)`
//!   with `u1` at least `1e-7`; its float functions differ by ulps between
//!   backends (docs/language.md).

use super::{Builder, Operand};
use crate::dtype::{DType, Elem};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

/// The Weyl sequence constants added to the key after each round.
const PHILOX_KEY_A: i64 = 0x9E37_79B9;
const PHILOX_KEY_B: i64 = 0xBB67_AE85;
/// The round multipliers.
const PHILOX_ROUND_A: i64 = 0xD251_1F53;
const PHILOX_ROUND_B: i64 = 0xCD9E_8D57;

/// Rounds when the kernel does not say (Philox4x32-10).
pub const PHILOX_ROUNDS: u32 = 10;
/// The most rounds a kernel may ask for (each is unrolled into ten ops).
pub const MAX_PHILOX_ROUNDS: u32 = 64;

/// About 2^-31, chosen (by Triton) so that `i32::MAX` times it still rounds
/// below 1.0 in f32: uniforms stay in `[0, 1)`.
const UNIFORM_SCALE: f64 = 4.6566127342e-10;

/// A Python literal as the kernel wrote it, for messages.
fn literal_text(op: Operand) -> String {
    match op {
        Operand::Bool(b) => format!("the bool {}", if b { "True" } else { "False" }),
        Operand::Int(i) => format!("the int {i}"),
        Operand::Float(x) => format!("the float {x}"),
        Operand::Value(v) => format!("{v}"),
    }
}

impl Builder {
    /// The Philox key of `seed`: an integer scalar (or literal) widened to 64
    /// bits, split into its low and high words.
    fn philox_key(&mut self, seed: Operand, what: &str) -> IrResult<[Operand; 2]> {
        let v = match seed {
            Operand::Int(i) => {
                let bits = i as u64;
                return Ok([
                    Operand::Int((bits & 0xFFFF_FFFF) as i64),
                    Operand::Int((bits >> 32) as i64),
                ]);
            }
            Operand::Value(v) => v,
            Operand::Bool(_) | Operand::Float(_) => {
                ir_bail!("{what}: the seed must be an integer, got {}", literal_text(seed))
            }
        };
        let ty = self.ty(v).clone();
        let dtype = match ty.elem {
            Elem::Scalar(d) if d.is_int() && ty.is_scalar() => d,
            _ => ir_bail!("{what}: the seed must be an integer scalar, got {ty}"),
        };
        let low = self.cast(v, DType::U32)?;
        let high = match dtype {
            DType::U32 => return Ok([low.into(), Operand::Int(0)]),
            // The sign of an i32 seed fills the high word.
            DType::I32 => self.binary(BinaryOp::Shr, v.into(), Operand::Int(31))?,
            _ => self.binary(BinaryOp::Shr, v.into(), Operand::Int(32))?,
        };
        let high = self.cast(high, DType::U32)?;
        Ok([low.into(), high.into()])
    }

    /// Offsets as the u32 counters Philox takes: i32 or u32 integers, read
    /// bit for bit.
    fn philox_counter(&mut self, offset: Operand, what: &str) -> IrResult<ValueId> {
        match offset {
            Operand::Int(i) if (i64::from(i32::MIN)..=i64::from(u32::MAX)).contains(&i) => {
                Ok(self.constant(Literal::Int(i64::from(i as u32)), DType::U32))
            }
            Operand::Int(i) => ir_bail!("{what}: the offset {i} does not fit in 32 bits"),
            Operand::Value(v) => match self.ty(v).elem {
                Elem::Scalar(DType::I32 | DType::U32) => self.cast(v, DType::U32),
                _ => ir_bail!(
                    "{what}: the offsets must be i32 or u32 integers (Philox4x32 counters), got {}",
                    self.ty(v)
                ),
            },
            Operand::Bool(_) | Operand::Float(_) => {
                ir_bail!(
                    "{what}: the offsets must be i32 or u32 integers, got {}",
                    literal_text(offset)
                )
            }
        }
    }

    /// `rounds` rounds of Philox4x32 on counters `c` (u32, scalars or tiles of
    /// one shape) and key `k`, returning the four words.
    pub fn philox(&mut self, c: [Operand; 4], k: [Operand; 2], rounds: u32) -> IrResult<[Operand; 4]> {
        let [mut c0, mut c1, mut c2, mut c3] = c;
        let [mut k0, mut k1] = k;
        for round in 0..rounds {
            let (a, b) = (Operand::Int(PHILOX_ROUND_A), Operand::Int(PHILOX_ROUND_B));
            let hi_b = self.binary(BinaryOp::MulHi, b, c2)?;
            let hi_a = self.binary(BinaryOp::MulHi, a, c0)?;
            let lo_b = self.binary(BinaryOp::Mul, b, c2)?;
            let lo_a = self.binary(BinaryOp::Mul, a, c0)?;
            let x0 = self.binary(BinaryOp::Xor, hi_b.into(), c1)?;
            let x2 = self.binary(BinaryOp::Xor, hi_a.into(), c3)?;
            c0 = self.binary(BinaryOp::Xor, x0.into(), k0)?.into();
            c2 = self.binary(BinaryOp::Xor, x2.into(), k1)?.into();
            c1 = lo_b.into();
            c3 = lo_a.into();
            if round + 1 < rounds {
                k0 = self.binary(BinaryOp::Add, k0, Operand::Int(PHILOX_KEY_A))?.into();
                k1 = self.binary(BinaryOp::Add, k1, Operand::Int(PHILOX_KEY_B))?.into();
            }
        }
        Ok([c0, c1, c2, c3])
    }

    /// Four u32 words of Philox4x32 for each offset (Triton's `randint4x`).
    pub fn randint4x(
        &mut self,
        seed: Operand,
        offset: Operand,
        rounds: u32,
        what: &str,
    ) -> IrResult<[ValueId; 4]> {
        if rounds > MAX_PHILOX_ROUNDS {
            ir_bail!("{what}: n_rounds must be at most {MAX_PHILOX_ROUNDS}, got {rounds}");
        }
        let counter = self.philox_counter(offset, what)?;
        let key = self.philox_key(seed, what)?;
        let key = key.map(|k| match k {
            Operand::Int(i) => Operand::Value(self.constant(Literal::Int(i), DType::U32)),
            other => other,
        });
        let zero = Operand::Value(self.constant(Literal::Int(0), DType::U32));
        let words = self.philox([counter.into(), zero, zero, zero], key, rounds)?;
        // With few rounds some words never met the offsets: give each their shape.
        let shape = self.ty(counter).shape.clone();
        let mut out = [counter; 4];
        for (slot, w) in out.iter_mut().zip(words) {
            let v = self.materialize(w, Some(DType::U32));
            *slot = self.broadcast_to(v, &shape)?;
        }
        Ok(out)
    }

    /// A u32 word as a uniform f32 in `[0, 1)` (Triton's `uint_to_uniform_float`).
    pub fn uniform_float(&mut self, x: ValueId) -> IrResult<ValueId> {
        let i = self.cast(x, DType::I32)?;
        let negative = self.compare(CmpOp::Lt, i.into(), Operand::Int(0))?;
        let minus = self.unary(UnaryOp::Neg, i.into())?;
        let folded = self.binary(BinaryOp::Sub, minus.into(), Operand::Int(1))?;
        let i = self.select(negative.into(), folded.into(), i.into())?;
        self.binary(BinaryOp::Mul, i.into(), Operand::Float(UNIFORM_SCALE))
    }

    /// Box-Muller: two independent normal samples from two uniforms.
    pub fn pair_uniform_to_normal(&mut self, u1: ValueId, u2: ValueId) -> IrResult<(ValueId, ValueId)> {
        let u1 = self.binary(BinaryOp::Max, Operand::Float(1.0e-7), u1.into())?;
        let theta = self.binary(BinaryOp::Mul, Operand::Float(std::f64::consts::TAU), u2.into())?;
        let log = self.unary(UnaryOp::Log, u1.into())?;
        let scaled = self.binary(BinaryOp::Mul, Operand::Float(-2.0), log.into())?;
        let r = self.unary(UnaryOp::Sqrt, scaled.into())?;
        let cos = self.unary(UnaryOp::Cos, theta.into())?;
        let sin = self.unary(UnaryOp::Sin, theta.into())?;
        Ok((
            self.binary(BinaryOp::Mul, r.into(), cos.into())?,
            self.binary(BinaryOp::Mul, r.into(), sin.into())?,
        ))
    }
}
