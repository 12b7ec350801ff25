//! Parsers for the printed forms of the Tile IR ([`crate::print_function`]) and
//! the GPU IR ([`crate::print_gpu_function`]): print → parse → print gives the
//! same bytes, so IR text can be written by hand or saved and read back (the
//! compiler's per-pass filetests do). `docs/ir.md` describes the format.
//!
//! Parsing checks the text's syntax and its SSA numbering (every value defined
//! once, before its uses); the verifiers check the rest. A malformed text is a
//! [`ParseError`] with its line and column, never a panic.
//!
//! Value numbers are kept as written, so a function's value table may have
//! holes (numbers no printed value has, such as the values a pass dropped);
//! they get a placeholder type (`i32`) that nothing reads.

mod cursor;
mod gpu_parse;
mod names;
mod tile_parse;

pub use cursor::{MAX_TILE_ELEMENTS, MAX_VALUE_ID};
pub use gpu_parse::parse_gpu_function;
pub use tile_parse::parse_function;

use std::fmt;

/// Why a text is not IR, and where: 1-based line and column (in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Checks that `f` prints, parses back and prints to the same text; the error
/// says where the texts part.
pub fn check_tile_round_trip(f: &crate::Function) -> Result<(), String> {
    let text = crate::print_function(f);
    let parsed = parse_function(&text).map_err(|e| format!("{e}\n{}", numbered(&text)))?;
    same_text(&text, &crate::print_function(&parsed))
}

/// [`check_tile_round_trip`] for the GPU IR.
pub fn check_gpu_round_trip(f: &crate::gpu_ir::GpuFunction) -> Result<(), String> {
    let text = crate::print_gpu_function(f);
    let parsed = parse_gpu_function(&text).map_err(|e| format!("{e}\n{}", numbered(&text)))?;
    same_text(&text, &crate::print_gpu_function(&parsed))
}

fn numbered(text: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| format!("{:4} {l}\n", i + 1))
        .collect()
}

fn same_text(printed: &str, reprinted: &str) -> Result<(), String> {
    if printed == reprinted {
        return Ok(());
    }
    let line = printed
        .lines()
        .zip(reprinted.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| printed.lines().count().min(reprinted.lines().count()));
    Err(format!(
        "the reprinted text differs at line {}:\n  printed:   {}\n  reprinted: {}",
        line + 1,
        printed.lines().nth(line).unwrap_or("<end>"),
        reprinted.lines().nth(line).unwrap_or("<end>")
    ))
}

/// The value table of a function being parsed: types by number, and which
/// numbers are defined.
struct Values<T: Clone> {
    types: Vec<T>,
    defined: Vec<bool>,
    placeholder: T,
}

impl<T: Clone> Values<T> {
    fn new(placeholder: T) -> Values<T> {
        Values {
            types: Vec::new(),
            defined: Vec::new(),
            placeholder,
        }
    }

    /// Defines value `n`; `Err` with a message when it already is.
    fn define(&mut self, n: u32, ty: T) -> Result<(), String> {
        let i = n as usize;
        if self.types.len() <= i {
            self.types.resize(i + 1, self.placeholder.clone());
            self.defined.resize(i + 1, false);
        }
        if self.defined[i] {
            return Err(format!("value %{n} is defined twice"));
        }
        self.types[i] = ty;
        self.defined[i] = true;
        Ok(())
    }

    fn is_defined(&self, n: u32) -> bool {
        self.defined.get(n as usize).copied().unwrap_or(false)
    }

    /// `%N` at the cursor, a value not defined yet (its type comes later, from
    /// [`Values::define_at`]).
    fn parse_new(&self, c: &mut cursor::Cursor<'_>) -> Result<u32, ParseError> {
        let start = c.pos();
        let n = c.value_number()?;
        if self.is_defined(n) {
            return Err(c.error_at(start, format!("value %{n} is defined twice")));
        }
        Ok(n)
    }

    /// `%N` at the cursor, a value defined earlier.
    fn parse_use(&self, c: &mut cursor::Cursor<'_>) -> Result<u32, ParseError> {
        c.skip_ws();
        let start = c.pos();
        let n = c.value_number()?;
        if !self.is_defined(n) {
            return Err(c.error_at(start, format!("value %{n} is used before it is defined")));
        }
        Ok(n)
    }

    /// [`Values::define`], its error placed at the cursor.
    fn define_at(&mut self, c: &mut cursor::Cursor<'_>, n: u32, ty: T) -> Result<(), ParseError> {
        let pos = c.pos();
        self.define(n, ty).map_err(|m| c.error_at(pos, m))
    }
}
