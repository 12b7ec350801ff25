//! Element types and tile types shared by every IR level.

use std::fmt;

/// A scalar element type. The set is closed: every backend implements each one
/// (f64 on cpu and cuda only: Metal has no double).
///
/// `F8E4M3` (Triton's `float8e4nv`, OCP e4m3fn) and `F8E5M2` (`float8e5`) are
/// storage types: values are loaded, stored, selected and moved as bytes; the
/// builder computes every other op on them in f32 (see `DType::compute_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F8E4M3,
    F8E5M2,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 15] = [
        DType::Bool,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// The short name used in the IR text and accepted by `metile.zeros(dtype=...)`.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Accepts the IR names, the numpy and torch spellings (`float32`, `int8`,
    /// `float8_e4m3fn`, ...) and Triton's (`fp8e4nv`, `float8e5`, ...).
    pub fn parse(text: &str) -> Option<DType> {
        Some(match text {
            "bool" | "i1" | "int1" => DType::Bool,
            "i8" | "int8" => DType::I8,
            "u8" | "uint8" => DType::U8,
            "i16" | "int16" => DType::I16,
            "u16" | "uint16" => DType::U16,
            "i32" | "int32" => DType::I32,
            "u32" | "uint32" => DType::U32,
            "i64" | "int64" => DType::I64,
            "u64" | "uint64" => DType::U64,
            "f8e4m3" | "fp8e4nv" | "float8e4nv" | "float8_e4m3fn" | "e4m3" => DType::F8E4M3,
            "f8e5m2" | "fp8e5" | "float8e5" | "float8_e5m2" | "e5m2" => DType::F8E5M2,
            "f16" | "fp16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "fp32" | "float32" | "float" => DType::F32,
            "f64" | "fp64" | "float64" | "double" => DType::F64,
            _ => return None,
        })
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// The width in bits (bool counts as 1).
    pub fn bits(self) -> u32 {
        match self {
            DType::Bool => 1,
            d => 8 * d.size_bytes() as u32,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F8E4M3 | DType::F8E5M2 | DType::F16 | DType::BF16 | DType::F32 | DType::F64
        )
    }

    /// The 8-bit float storage types.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Integers narrower than 32 bits, which reductions widen (as Triton does).
    pub fn is_narrow_int(self) -> bool {
        matches!(self, DType::I8 | DType::U8 | DType::I16 | DType::U16)
    }

    /// The type an op computes in: f32 for the fp8 storage types, else the type itself.
    pub fn compute_dtype(self) -> DType {
        if self.is_fp8() {
            DType::F32
        } else {
            self
        }
    }

    /// The type both operands of a binary op are converted to (Triton's rules,
    /// which follow C's usual arithmetic conversions for integers):
    ///
    /// * bool < integers < floats;
    /// * integers of one signedness: the wider; mixed: the unsigned one unless
    ///   the signed one is wider (`u32 ⊕ i32 = u32`, `u8 ⊕ i16 = i16`);
    /// * floats: f64 beats all, then f32; f16 with bf16 meet at f32; f16 beats
    ///   fp8; bf16 with fp8 meet at f32; the two fp8 types meet at f16.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (Bool, x) | (x, Bool) => x,
            (F64, _) | (_, F64) => F64,
            (F32, _) | (_, F32) => F32,
            (F16, BF16) | (BF16, F16) => F32,
            (F16, _) | (_, F16) => F16,
            (BF16, x) | (x, BF16) if x.is_fp8() => F32,
            (BF16, _) | (_, BF16) => BF16,
            (x, y) if x.is_fp8() && y.is_fp8() => F16,
            (x, _) | (_, x) if x.is_fp8() => x,
            (x, y) => {
                let (xb, yb) = (x.bits(), y.bits());
                match (x.is_unsigned_int(), y.is_unsigned_int()) {
                    (true, false) => {
                        if xb >= yb {
                            x
                        } else {
                            y
                        }
                    }
                    (false, true) => {
                        if yb >= xb {
                            y
                        } else {
                            x
                        }
                    }
                    _ => {
                        if xb >= yb {
                            x
                        } else {
                            y
                        }
                    }
                }
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which memory a pointer points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrSpace {
    /// Kernel arguments: device memory visible to every program instance.
    Global,
    /// Threadgroup memory from `metile.shared`, private to one program instance.
    Shared,
}

/// What one element of a tile is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Scalar(DType),
    Ptr(DType, AddrSpace),
}

impl Elem {
    pub fn dtype(self) -> Option<DType> {
        match self {
            Elem::Scalar(d) => Some(d),
            Elem::Ptr(..) => None,
        }
    }

    pub fn pointee(self) -> Option<DType> {
        match self {
            Elem::Ptr(d, _) => Some(d),
            Elem::Scalar(_) => None,
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Scalar(d) => write!(f, "{d}"),
            Elem::Ptr(d, AddrSpace::Global) => write!(f, "ptr<{d}>"),
            Elem::Ptr(d, AddrSpace::Shared) => write!(f, "shared_ptr<{d}>"),
        }
    }
}

/// The type of a Tile IR value: an element type and a shape; an empty shape is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub elem: Elem,
    pub shape: Vec<usize>,
}

impl Type {
    pub fn scalar(d: DType) -> Type {
        Type {
            elem: Elem::Scalar(d),
            shape: vec![],
        }
    }

    pub fn tile(d: DType, shape: &[usize]) -> Type {
        Type {
            elem: Elem::Scalar(d),
            shape: shape.to_vec(),
        }
    }

    pub fn with_shape(&self, shape: &[usize]) -> Type {
        Type {
            elem: self.elem,
            shape: shape.to_vec(),
        }
    }

    pub fn with_dtype(&self, d: DType) -> Type {
        Type {
            elem: Elem::Scalar(d),
            shape: self.shape.clone(),
        }
    }

    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn dtype(&self) -> Option<DType> {
        self.elem.dtype()
    }

    pub fn is_ptr(&self) -> bool {
        matches!(self.elem, Elem::Ptr(..))
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.elem)?;
        if !self.shape.is_empty() {
            f.write_str("[")?;
            for (i, d) in self.shape.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{d}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// Shape of a binary op's result under numpy broadcasting, or `None` when the shapes clash.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_the_documented_lattice() {
        use DType::*;
        assert_eq!(DType::promote(I32, F32), F32);
        assert_eq!(DType::promote(F16, F32), F32);
        assert_eq!(DType::promote(F16, BF16), F32);
        assert_eq!(DType::promote(I32, F16), F16);
        assert_eq!(DType::promote(I32, U32), U32);
        assert_eq!(DType::promote(Bool, I32), I32);
        assert_eq!(DType::promote(I32, I64), I64);
        assert_eq!(DType::promote(I8, I8), I8);
        assert_eq!(DType::promote(U8, I8), U8);
        assert_eq!(DType::promote(U8, I16), I16);
        assert_eq!(DType::promote(I16, U16), U16);
        assert_eq!(DType::promote(U32, I64), I64);
        assert_eq!(DType::promote(U64, I64), U64);
        assert_eq!(DType::promote(I8, U64), U64);
        assert_eq!(DType::promote(F64, F32), F64);
        assert_eq!(DType::promote(F64, I64), F64);
        assert_eq!(DType::promote(F8E4M3, F8E5M2), F16);
        assert_eq!(DType::promote(F8E4M3, I32), F8E4M3);
        assert_eq!(DType::promote(F8E5M2, F16), F16);
        assert_eq!(DType::promote(F8E5M2, BF16), F32);
        assert_eq!(DType::promote(F8E4M3, F32), F32);
        assert_eq!(DType::promote(Bool, F8E4M3), F8E4M3);
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(DType::promote(a, b), DType::promote(b, a), "{a} with {b}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("float8e4nv"), Some(DType::F8E4M3));
        assert_eq!(DType::parse("float8_e5m2"), Some(DType::F8E5M2));
    }

    #[test]
    fn broadcasting_matches_numpy() {
        assert_eq!(broadcast_shapes(&[4, 1], &[1, 8]), Some(vec![4, 8]));
        assert_eq!(broadcast_shapes(&[], &[8]), Some(vec![8]));
        assert_eq!(broadcast_shapes(&[8], &[4, 8]), Some(vec![4, 8]));
        assert_eq!(broadcast_shapes(&[4], &[8]), None);
    }
}
