//! Element types and tile types shared by every IR level.

use std::fmt;

/// A scalar element type. The set is closed: every backend implements each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I32,
    U32,
    I64,
    F16,
    BF16,
    F32,
}

impl DType {
    pub const ALL: [DType; 7] = [
        DType::Bool,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
    ];

    /// The short name used in the IR text and accepted by `metile.zeros(dtype=...)`.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }

    /// Accepts the IR names and the numpy spellings (`float32`, `int32`, ...).
    pub fn parse(text: &str) -> Option<DType> {
        Some(match text {
            "bool" | "i1" => DType::Bool,
            "i32" | "int32" => DType::I32,
            "u32" | "uint32" => DType::U32,
            "i64" | "int64" => DType::I64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            _ => return None,
        })
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32 | DType::I64)
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// The type both operands of a binary op are converted to.
    ///
    /// bool < integers < floats; among integers the wider wins and u32 beats i32 (as in C);
    /// among floats f32 wins and f16 with bf16 meet at f32.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (Bool, x) | (x, Bool) => x,
            (F32, _) | (_, F32) => F32,
            (F16, BF16) | (BF16, F16) => F32,
            (F16, _) | (_, F16) => F16,
            (BF16, _) | (_, BF16) => BF16,
            (I64, _) | (_, I64) => I64,
            (U32, _) | (_, U32) => U32,
            _ => I32,
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
    }

    #[test]
    fn broadcasting_matches_numpy() {
        assert_eq!(broadcast_shapes(&[4, 1], &[1, 8]), Some(vec![4, 8]));
        assert_eq!(broadcast_shapes(&[], &[8]), Some(vec![8]));
        assert_eq!(broadcast_shapes(&[8], &[4, 8]), Some(vec![4, 8]));
        assert_eq!(broadcast_shapes(&[4], &[8]), None);
    }
}
