//! meTile's intermediate representations: element types, the Tile IR (tile-granular
//! SSA with regions), its builder (which owns the typing rules), printer and verifier.

pub mod builder;
pub mod dtype;
pub mod error;
pub mod printer;
pub mod tile_ir;
pub mod verify;

pub use builder::{Builder, Operand};
pub use dtype::{AddrSpace, DType, Elem, Type};
pub use error::{IrError, IrResult};
pub use printer::print_function;
pub use tile_ir::*;
pub use verify::verify;
