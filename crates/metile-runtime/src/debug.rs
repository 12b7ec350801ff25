//! `METILE_DEBUG=tile_ir,gpu_ir,msl,cuda` (or `all`): which compilation stages are
//! printed to stderr; `repack`: the operands a cuda kernel's first launch copies
//! into aligned rows. Read at compile time only, never on the launch path.

pub fn debug_enabled(stage: &str) -> bool {
    std::env::var("METILE_DEBUG").is_ok_and(|v| v.split(',').map(str::trim).any(|s| s == stage || s == "all"))
}
