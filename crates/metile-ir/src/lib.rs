//! meTile's intermediate representations: element types, the Tile IR (tile-granular
//! SSA with regions), its builder (which owns the typing rules), printer and verifier,
//! and the GPU IR (per-thread SSA with threadgroup memory, barriers and simdgroup
//! operations) with its builder, printer and verifier.

pub mod builder;
pub mod dtype;
pub mod error;
pub mod fp8;
pub mod gpu_ir;
pub mod gpu_printer;
pub mod gpu_vendor;
pub mod gpu_verify;
pub mod print_format;
pub mod printer;
pub mod text;
pub mod tile_ir;
pub mod verify;

pub use builder::{AtomicFlags, Builder, Operand, MAX_PHILOX_ROUNDS, PHILOX_ROUNDS};
pub use dtype::{AddrSpace, DType, Elem, Type};
pub use error::{IrError, IrResult};
pub use gpu_printer::print_gpu_function;
pub use gpu_vendor::Vendor;
pub use gpu_verify::verify_gpu;
pub use printer::print_function;
pub use text::{parse_function, parse_gpu_function, ParseError};
pub use tile_ir::*;
pub use verify::verify;
