//! meTile's compiler: Tile IR passes, and (per target) layout assignment, lowering
//! to GPU IR and the source emitters.

pub mod tile_passes;

pub use tile_passes::optimize_tile_ir;
