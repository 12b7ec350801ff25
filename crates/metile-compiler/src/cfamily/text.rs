//! The text of values: how values are named, literals, zeros and register
//! elements, written so the emitter's hottest paths append to the output
//! directly (not through the formatting machinery).

use super::Dialect;
use metile_ir::fp8::Fp8;
use metile_ir::gpu_ir::*;
use metile_ir::{DType, Literal};
use std::fmt;
use std::rc::Rc;

/// How a value is spelled in the body. Most values are `vN` locals, printed
/// from their number when used; parameters, threadgroup memory and constants
/// carry their text (shared, so using a name never copies it).
#[derive(Clone, Debug, Default)]
pub enum Name {
    /// Not defined (yet): using it is an emitter bug.
    #[default]
    Unset,
    /// The local `vN`.
    Local(u32),
    Text(Rc<str>),
}

impl Name {
    pub fn text(text: String) -> Name {
        Name::Text(Rc::from(text))
    }
}

impl Name {
    /// Appends the name to `out` (the emitter's hottest text, so not through
    /// the formatting machinery).
    pub fn push_to(&self, out: &mut String) {
        match self {
            Name::Unset => out.push_str("<unset>"),
            Name::Local(n) => {
                out.push('v');
                push_u32(out, *n);
            }
            Name::Text(t) => out.push_str(t),
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Name::Text(t) => f.write_str(t),
            _ => {
                let mut text = String::with_capacity(12);
                self.push_to(&mut text);
                f.write_str(&text)
            }
        }
    }
}

/// Appends `a sym b`.
pub(super) fn push_infix(out: &mut String, a: &Name, sym: &str, b: &Name) {
    a.push_to(out);
    out.push(' ');
    out.push_str(sym);
    out.push(' ');
    b.push_to(out);
}

/// Appends `n` in decimal.
pub(crate) fn push_u32(out: &mut String, mut n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &buf[i..] {
        out.push(char::from(d));
    }
}

/// The shortest decimal that reads back as `x`, as a float literal.
pub(super) fn f32_literal(x: f32) -> String {
    if x.is_nan() {
        return "as_type<float>(0x7fc00000u)".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "as_type<float>(0x7f800000u)".into()
        } else {
            "as_type<float>(0xff800000u)".into()
        };
    }
    let text = format!("{x:?}");
    let text = if text.contains(['.', 'e']) {
        text
    } else {
        format!("{text}.0")
    };
    if x.is_sign_negative() {
        format!("({text}f)")
    } else {
        format!("{text}f")
    }
}

/// Rounds to f32 with "round to odd", so that a later rounding to f16/bf16 is
/// the same as rounding the f64 once (how the interpreter reads float literals).
pub(super) fn f64_to_f32_round_to_odd(x: f64) -> f32 {
    let y = x as f32;
    if !y.is_finite() || f64::from(y) == x || y.to_bits() & 1 == 1 {
        return y;
    }
    let toward_zero = f64::from(y).abs() > x.abs();
    f32::from_bits(if toward_zero {
        y.to_bits() - 1
    } else {
        y.to_bits() + 1
    })
}

/// The shortest decimal that reads back as `x`, as a C double literal.
fn f64_literal(x: f64) -> String {
    if !x.is_finite() {
        return format!("as_type<double>(0x{:016x}UL)", x.to_bits());
    }
    let text = format!("{x:?}");
    let text = if text.contains(['.', 'e']) {
        text
    } else {
        format!("{text}.0")
    };
    if x.is_sign_negative() {
        format!("({text})")
    } else {
        text
    }
}

pub(crate) fn literal<D: Dialect>(lit: &Literal, d: DType) -> String {
    let as_f64 = lit.as_f64();
    match d {
        // Typed, so overloads and templates see the value's own type.
        DType::I8 | DType::U8 | DType::I16 | DType::U16 => {
            let bits = d.bits();
            let v = int_literal(lit, d);
            let v = if d.is_signed_int() {
                (v << (64 - bits)) >> (64 - bits)
            } else {
                ((v as u64) << (64 - bits) >> (64 - bits)) as i64
            };
            format!("{}({v})", D::scalar(d))
        }
        DType::U64 => format!("{}UL", int_literal(lit, d) as u64),
        DType::F64 => f64_literal(match lit {
            Literal::Float(x) => *x,
            Literal::Int(i) => *i as f64,
            Literal::Bool(b) => f64::from(u8::from(*b)),
        }),
        DType::F8E4M3 | DType::F8E5M2 => {
            let format = if d == DType::F8E4M3 { Fp8::E4M3 } else { Fp8::E5M2 };
            format!("uchar(0x{:02x})", format.encode(as_f64))
        }
        DType::Bool => (as_f64 != 0.0 || matches!(lit, Literal::Float(x) if x.is_nan())).to_string(),
        DType::I32 => {
            let v = int_literal(lit, d) as i32;
            if v == i32::MIN {
                "(-2147483647 - 1)".into()
            } else if v < 0 {
                format!("({v})")
            } else {
                v.to_string()
            }
        }
        DType::U32 => format!("{}u", int_literal(lit, d) as u32),
        DType::I64 => {
            let v = int_literal(lit, d);
            if v == i64::MIN {
                "(-9223372036854775807L - 1L)".into()
            } else if v < 0 {
                format!("({v}L)")
            } else {
                format!("{v}L")
            }
        }
        DType::F32 => f32_literal(match lit {
            Literal::Float(x) => *x as f32,
            Literal::Int(i) => *i as f32,
            Literal::Bool(b) => f32::from(u8::from(*b)),
        }),
        DType::F16 | DType::BF16 => {
            let wide = match lit {
                Literal::Float(x) => f64_to_f32_round_to_odd(*x),
                Literal::Int(i) => f64_to_f32_round_to_odd(*i as f64),
                Literal::Bool(b) => f32::from(u8::from(*b)),
            };
            let (narrow, bits, ty) = if d == DType::F16 {
                let h = half::f16::from_f32(wide);
                (h.to_f32(), h.to_bits(), "half")
            } else {
                let h = half::bf16::from_f32(wide);
                (h.to_f32(), h.to_bits(), "bfloat")
            };
            if narrow.is_finite() {
                format!("{ty}({})", f32_literal(narrow))
            } else {
                format!("as_type<{ty}>(ushort(0x{bits:04x}))")
            }
        }
    }
}

/// An integer literal's value in `d`, converted like a C cast (floats truncate and saturate).
pub(super) fn int_literal(lit: &Literal, d: DType) -> i64 {
    match lit {
        Literal::Int(i) => *i,
        Literal::Bool(b) => i64::from(*b),
        Literal::Float(x) => match d {
            DType::I8 => i64::from(*x as i8),
            DType::U8 => i64::from(*x as u8),
            DType::I16 => i64::from(*x as i16),
            DType::U16 => i64::from(*x as u16),
            DType::I32 => i64::from(*x as i32),
            DType::U32 => i64::from(*x as u32),
            DType::U64 => *x as u64 as i64,
            _ => *x as i64,
        },
    }
}

/// Zero in `d`; narrow integers' zero is the int `0` (their arithmetic is int's).
pub(crate) fn zero_text(d: DType) -> &'static str {
    match d {
        DType::Bool => "false",
        DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32 => "0",
        DType::U64 => "0UL",
        DType::F64 => "0.0",
        DType::F8E4M3 | DType::F8E5M2 => "uchar(0)",
        DType::U32 => "0u",
        DType::I64 => "0L",
        DType::F32 => "0.0f",
        DType::F16 => "half(0.0f)",
        DType::BF16 => "bfloat(0.0f)",
    }
}

/// A register array element: `rN[i]`, or `rN` for a one-element array (a scalar).
pub(crate) struct RegText {
    pub reg: RegId,
    pub index: u32,
    pub single: bool,
}

impl RegText {
    /// Appends `rN` or `rN[i]` without the formatting machinery (register
    /// accesses are a large share of a GEMM's statements).
    pub fn push_to(&self, out: &mut String) {
        out.push('r');
        push_u32(out, self.reg.0);
        if !self.single {
            out.push('[');
            push_u32(out, self.index);
            out.push(']');
        }
    }
}

impl fmt::Display for RegText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.single {
            write!(f, "r{}", self.reg.0)
        } else {
            write!(f, "r{}[{}]", self.reg.0, self.index)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::Cuda;
    use crate::msl::Msl;

    fn literal_msl(lit: &Literal, d: DType) -> String {
        literal::<Msl>(lit, d)
    }

    #[test]
    fn new_dtype_literals() {
        assert_eq!(literal::<Msl>(&Literal::Int(-1), DType::U8), "uchar(255)");
        assert_eq!(literal::<Cuda>(&Literal::Int(200), DType::I8), "schar(-56)");
        assert_eq!(
            literal::<Cuda>(&Literal::Int(-1), DType::U64),
            "18446744073709551615UL"
        );
        assert_eq!(literal::<Cuda>(&Literal::Float(0.1), DType::F64), "0.1");
        assert_eq!(literal::<Msl>(&Literal::Float(1.0), DType::F8E4M3), "uchar(0x38)");
        assert_eq!(literal::<Msl>(&Literal::Float(1e6), DType::F8E5M2), "uchar(0x7b)");
    }

    #[test]
    fn float_literals_round_trip() {
        assert_eq!(f32_literal(1.0), "1.0f");
        assert_eq!(f32_literal(0.1), "0.1f");
        assert_eq!(f32_literal(-1e38), "(-1e38f)");
        assert_eq!(f32_literal(f32::INFINITY), "as_type<float>(0x7f800000u)");
        assert_eq!(literal_msl(&Literal::Float(-1e38), DType::F32), "(-1e38f)");
        assert_eq!(
            literal_msl(&Literal::Float(0.1), DType::F16),
            "half(0.099975586f)"
        );
        assert_eq!(
            literal_msl(&Literal::Float(1e6), DType::F16),
            "as_type<half>(ushort(0x7c00))"
        );
        assert_eq!(literal_msl(&Literal::Float(1.0), DType::BF16), "bfloat(1.0f)");
        assert_eq!(
            literal_msl(&Literal::Int(i64::from(i32::MIN)), DType::I32),
            "(-2147483647 - 1)"
        );
        assert_eq!(literal_msl(&Literal::Int(-3), DType::I64), "(-3L)");
        assert_eq!(literal_msl(&Literal::Int(7), DType::U32), "7u");
    }
}
