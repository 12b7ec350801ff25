//! CuTe's layout algebra, for assigning thread/value layouts to tiles.
//!
//! # What a layout is
//!
//! A [`Layout`] is a pair of congruent integer tuples, a *shape* and a
//! *stride*, written `shape:stride`. It is a function from coordinates to
//! offsets: a coordinate is paired with the shape's modes, and the offset is
//! the inner product of the coordinate with the strides. `(4,2):(2,1)` is a
//! 4x2 row-major matrix: coordinate `(3,1)` maps to `3*2 + 1*1 = 7`.
//!
//! Shapes nest. `(3,(2,3)):(3,(12,1))` is a 3x6 matrix whose column mode is
//! itself a 2x3 block with its own strides, which is how CuTe describes
//! layouts that are neither row- nor column-major, such as the register
//! fragments of a tensor-core instruction.
//!
//! # Colexicographic order
//!
//! Every layout also accepts a single linear index in `[0, size)`. The index
//! is unranked *colexicographically*: the first mode varies fastest, like
//! column-major order, recursively inside nested modes. So a layout is, above
//! all, a function from integers to integers, and two layouts can be compared,
//! composed and inverted as such functions.
//!
//! ```
//! use metile_layout::{IntTuple, Layout};
//!
//! let layout: Layout = "(3,(2,3)):(3,(12,1))".parse()?;
//! assert_eq!(layout.size(), 18);
//! assert_eq!(layout.cosize(), 21); // one past the largest offset, 20
//! assert_eq!(layout.eval(16)?, 17); // 16 -> natural coordinate (1,(1,2))
//! assert_eq!(layout.eval_coord(&IntTuple::from([1, 5]))?, 17);
//! // Omitted strides are compact column-major; row-major is available too.
//! assert_eq!(Layout::column_major(IntTuple::from([4, 8]))?.to_string(), "(4,8):(1,4)");
//! assert_eq!(Layout::row_major(IntTuple::from([4, 8]))?.to_string(), "(4,8):(8,1)");
//! # Ok::<(), metile_layout::LayoutError>(())
//! ```
//!
//! # The algebra
//!
//! * [`coalesce`] simplifies a layout without changing the function:
//!   size-1 modes vanish and a mode whose stride is the previous mode's
//!   extent times stride merges into it. `(2,(1,6)):(1,(6,2))` is `12:1`.
//!   [`filter`] additionally drops stride-0 (broadcast) modes.
//! * [`composition`] `A o B` is the layout of `i -> A(B(i))`, shaped like `B`.
//!   It exists when `B`'s strides and extents line up with `A`'s extents (the
//!   divisibility conditions); otherwise it is an error, never an
//!   approximation. A by-mode [`Tiler`] `<B0, B1>` composes mode by mode:
//!   this is how "the 3x8 block of this matrix" is written.
//! * [`complement`] `A*` with respect to a size `M` is the layout of the
//!   offsets `A` does not reach: `(A, A*)` is a one-to-one map onto at least
//!   `[0, M)`. If `A` is a tile, `A*` is "where the other tiles start".
//! * [`right_inverse`] and [`left_inverse`] undo a layout where possible:
//!   they turn "element -> offset" into "offset -> element", which is what a
//!   compiler needs to find which thread holds a given element.
//! * [`logical_divide`] `A / B = A o (B, B*)` splits `A` into
//!   (elements of one tile, which tile); [`zipped_divide`], [`tiled_divide`]
//!   and [`flat_divide`] regroup those modes. [`logical_product`]
//!   `A x B = (A, A* o B)` repeats `A` at every element of `B`;
//!   [`blocked_product`] and [`raked_product`] do so mode by mode, giving
//!   blocked or interleaved (cyclic) distributions.
//! * [`max_common_vector`] is how many leading elements two layouts store
//!   identically and contiguously: the widest vector access for a copy.
//! * [`Swizzle`] XORs high offset bits into low ones so that the rows of a
//!   shared-memory tile fall into different banks; a [`SwizzledLayout`]
//!   evaluates `swizzle(layout(i))`.
//!
//! ```
//! use metile_layout::*;
//!
//! // A 1-D vector of 24 elements tiled by 4 elements at stride 2.
//! let data: Layout = "(4,2,3):(2,1,8)".parse()?;
//! let tile: Layout = "4:2".parse()?;
//! assert_eq!(complement(&tile, 24)?.to_string(), "(2,3):(1,8)");
//! let divided = logical_divide(&data, &tile)?;
//! assert_eq!(divided.to_string(), "((2,2),(2,3)):((4,1),(2,8))");
//! // Mode 0 is the first tile, mode 1 where each tile starts.
//! assert_eq!(divided.mode(0)?, composition(&data, &tile)?);
//!
//! // Repeat a 2x5 row-major block over a 3x4 column-major grid of blocks.
//! let block: Layout = "(2,5):(5,1)".parse()?;
//! let grid: Layout = "(3,4):(1,3)".parse()?;
//! assert_eq!(blocked_product(&block, &grid)?.to_string(), "(6,(5,4)):(5,(1,30))");
//!
//! // Which element does offset k of a transposed tile hold?
//! let transposed: Layout = "(4,8):(8,1)".parse()?;
//! let inverse = left_inverse(&transposed)?;
//! assert_eq!(inverse.eval(transposed.eval(13)?)?, 13);
//!
//! // Preconditions are errors, with the operands in the message.
//! let err = composition(&"(4,3):(1,10)".parse()?, &"6:1".parse::<Layout>()?).unwrap_err();
//! assert!(err.to_string().contains("shape divisibility"));
//! # Ok::<(), metile_layout::LayoutError>(())
//! ```
//!
//! # Why a GPU compiler wants this
//!
//! A tile program talks about logical tiles; the hardware wants a thread
//! index, a register index and a memory offset. Layouts are the one
//! representation that covers all three and that composes: the layout of
//! "thread t, value v -> element" composed with "element -> address" gives
//! "thread t, value v -> address" exactly, and divisibility failures show up
//! at compile time instead of as scrambled data on the GPU.
//!
//! # Text
//!
//! [`Layout`], [`IntTuple`], [`Tiler`], [`Swizzle`] and [`SwizzledLayout`]
//! print in CuTe's notation and parse it back (`FromStr`).
//!
//! # Where this differs from CuTe
//!
//! CuTe distinguishes compile-time and run-time integers; here every value is
//! known, and the crate behaves like CuTe with everything static: size-1 modes
//! are simplified away, extent-1 modes get stride 0, and every divisibility
//! condition is checked. Beyond that, it prefers an error to a wrong answer:
//!
//! * [`Layout::eval`] rejects indices outside `[0, size)`; CuTe lets the last
//!   mode run on. Composition still treats the left operand's last mode as
//!   unbounded, exactly as CuTe does.
//! * [`composition`] rejects right operands whose modes overlap so that their
//!   offsets carry across a mode boundary of the left operand (CuTe returns a
//!   layout that is not the composition there). It accepts a stride that
//!   does not divide a left extent when the whole walk stays inside that mode.
//! * [`complement`] rejects layouts whose modes interleave or whose gaps are
//!   not whole repetitions, where CuTe's result would not cover the cotarget.
//! * [`right_inverse`] never follows negative strides.
//! * [`max_common_vector`] requires operands of equal size.
//! * Empty tuples and extents below 1 are rejected on construction.

mod algebra;
mod error;
mod int_tuple;
mod layout;
mod swizzle;
mod text;
mod tiler;
mod tiling;

pub use algebra::{
    coalesce, coalesce_by_mode, complement, composition, filter, filter_by_mode, left_inverse,
    max_common_vector, right_inverse,
};
pub use error::LayoutError;
pub use int_tuple::{colex_index, crd2idx, idx2crd, IntTuple};
pub use layout::Layout;
pub use swizzle::{Swizzle, SwizzledLayout};
pub use tiler::Tiler;
pub use tiling::{
    blocked_product, flat_divide, logical_divide, logical_product, raked_product, tiled_divide, zipped_divide,
};
