//! CuTe's `Swizzle<B, M, S>` bit permutation and layouts composed with it.

use std::fmt;
use std::str::FromStr;

use crate::algebra::compose_with_tiler;
use crate::error::LayoutError;
use crate::layout::Layout;
use crate::text::Parser;
use crate::tiler::Tiler;

/// Largest bit position a swizzle may touch, so masks fit in a positive i64.
const MAX_SWIZZLE_BITS: i64 = 62;

/// `Swizzle<B, M, S>`: XORs a group of `B` bits of an offset into another
/// group of `B` bits `|S|` positions away. Stated exactly, as in CuTe:
///
/// - `yyy_mask = ((1 << B) - 1) << (M + max(0, S))` selects the source bits,
/// - `zzz_mask = ((1 << B) - 1) << (M - min(0, S))` selects the target bits,
/// - `swizzle(x) = x ^ ((x & yyy_mask) >> S)` (a left shift when `S < 0`).
///
/// The low `M` bits (the vector that must stay contiguous) are never
/// changed. Because `|S| >= B` the two masks do not overlap, so the
/// swizzle is an involution and hence a bijection on every range
/// `[0, 2^(B+M+|S|))`. Shared-memory layouts use it to spread the rows of a
/// tile across banks.
///
/// ```
/// use metile_layout::Swizzle;
/// let swizzle = Swizzle::new(3, 4, 3).unwrap();
/// assert_eq!(swizzle.to_string(), "Sw<3,4,3>");
/// // Bit 7 (a source bit) is copied onto bit 4 (a target bit).
/// assert_eq!(swizzle.apply(128), 128 + 16);
/// // Bits below M = 4 never move.
/// assert_eq!(swizzle.apply(15), 15);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Swizzle {
    bits: u32,
    base: u32,
    shift: i32,
}

impl Swizzle {
    /// Validates CuTe's rules: `B >= 0`, `M >= 0`, `|S| >= B`; in addition the
    /// touched bits must stay below bit 62.
    pub fn new(bits: i64, base: i64, shift: i64) -> Result<Swizzle, LayoutError> {
        let invalid = |reason| LayoutError::InvalidSwizzle {
            bits,
            base,
            shift,
            reason,
        };
        if bits < 0 || base < 0 {
            return Err(invalid("B and M must be non-negative"));
        }
        if shift.checked_abs().is_none_or(|s| s < bits) {
            return Err(invalid("|S| must be at least B"));
        }
        let top = bits
            .checked_add(base)
            .and_then(|v| v.checked_add(shift.abs()))
            .filter(|&v| v <= MAX_SWIZZLE_BITS);
        if top.is_none() {
            return Err(invalid("B + M + |S| must not exceed 62"));
        }
        // The checks above bound all three well inside u32/i32.
        Ok(Swizzle {
            bits: bits as u32,
            base: base as u32,
            shift: shift as i32,
        })
    }

    pub fn bits(&self) -> i64 {
        i64::from(self.bits)
    }

    pub fn base(&self) -> i64 {
        i64::from(self.base)
    }

    pub fn shift(&self) -> i64 {
        i64::from(self.shift)
    }

    fn bit_mask(&self) -> i64 {
        (1i64 << self.bits) - 1
    }

    /// Mask of the bits that are read (`YYY`).
    pub fn yyy_mask(&self) -> i64 {
        self.bit_mask() << (self.base + self.shift.max(0).unsigned_abs())
    }

    /// Mask of the bits that are flipped (`ZZZ`).
    pub fn zzz_mask(&self) -> i64 {
        self.bit_mask() << (self.base + self.shift.min(0).unsigned_abs())
    }

    /// The swizzled offset.
    pub fn apply(&self, offset: i64) -> i64 {
        let selected = offset & self.yyy_mask();
        let moved = if self.shift >= 0 {
            selected >> self.shift.unsigned_abs()
        } else {
            selected << self.shift.unsigned_abs()
        };
        offset ^ moved
    }

    /// `self o layout` with no offset.
    pub fn compose(&self, layout: Layout) -> SwizzledLayout {
        SwizzledLayout::new(*self, 0, layout)
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sw<{},{},{}>", self.bits, self.base, self.shift)
    }
}

impl Parser<'_> {
    fn swizzle(&mut self) -> Result<Swizzle, LayoutError> {
        self.expect("Sw<")?;
        let bits = self.integer()?;
        self.expect(",")?;
        let base = self.integer()?;
        self.expect(",")?;
        let shift = self.integer()?;
        self.expect(">")?;
        Swizzle::new(bits, base, shift).map_err(|e| self.error(e.to_string()))
    }
}

impl FromStr for Swizzle {
    type Err = LayoutError;

    /// Parses `Sw<B,M,S>`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parser = Parser::new(text);
        let swizzle = parser.swizzle()?;
        parser.finish()?;
        Ok(swizzle)
    }
}

/// CuTe's `ComposedLayout<Swizzle, offset, Layout>`: evaluates
/// `swizzle(offset + layout(i))`. The domain (shape, size) is the layout's.
///
/// ```
/// use metile_layout::{Layout, Swizzle};
/// let layout: Layout = "(8,8):(8,1)".parse().unwrap();
/// let swizzled = Swizzle::new(3, 0, 3).unwrap().compose(layout);
/// assert_eq!(swizzled.to_string(), "Sw<3,0,3> o 0 o (8,8):(8,1)");
/// // Row 1 of the 8x8 tile: column c lands at 8 + (c ^ 1).
/// assert_eq!(swizzled.eval_coord(&[1, 0].into()).unwrap(), 9);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SwizzledLayout {
    swizzle: Swizzle,
    offset: i64,
    layout: Layout,
}

impl SwizzledLayout {
    pub fn new(swizzle: Swizzle, offset: i64, layout: Layout) -> SwizzledLayout {
        SwizzledLayout {
            swizzle,
            offset,
            layout,
        }
    }

    pub fn swizzle(&self) -> Swizzle {
        self.swizzle
    }

    pub fn offset(&self) -> i64 {
        self.offset
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn size(&self) -> i64 {
        self.layout.size()
    }

    fn finish(&self, inner: i64) -> Result<i64, LayoutError> {
        let shifted = inner
            .checked_add(self.offset)
            .ok_or_else(|| LayoutError::Overflow {
                operation: "swizzled layout",
                operands: self.to_string(),
            })?;
        Ok(self.swizzle.apply(shifted))
    }

    /// `swizzle(offset + layout(index))`.
    pub fn eval(&self, index: i64) -> Result<i64, LayoutError> {
        self.finish(self.layout.eval(index)?)
    }

    /// `swizzle(offset + layout(coord))` for any coordinate form.
    pub fn eval_coord(&self, coord: &crate::IntTuple) -> Result<i64, LayoutError> {
        self.finish(self.layout.eval_coord(coord)?)
    }

    /// `(swizzle o offset o layout) o tiler = swizzle o offset o (layout o tiler)`:
    /// tiles a swizzled layout without touching the swizzle.
    pub fn compose(&self, tiler: impl Into<Tiler>) -> Result<SwizzledLayout, LayoutError> {
        let layout = compose_with_tiler(&self.layout, &tiler.into())?;
        Ok(SwizzledLayout::new(self.swizzle, self.offset, layout))
    }
}

impl fmt::Display for SwizzledLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} o {} o {}", self.swizzle, self.offset, self.layout)
    }
}

impl FromStr for SwizzledLayout {
    type Err = LayoutError;

    /// Parses `Sw<B,M,S> o offset o layout` or `Sw<B,M,S> o layout`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parser = Parser::new(text);
        let swizzle = parser.swizzle()?;
        parser.expect("o")?;
        let checkpoint = parser.checkpoint();
        let offset = match parser.integer() {
            Ok(offset) if parser.eat("o") => offset,
            _ => {
                parser.restore(checkpoint);
                0
            }
        };
        let layout = parser.layout()?;
        parser.finish()?;
        Ok(SwizzledLayout::new(swizzle, offset, layout))
    }
}
