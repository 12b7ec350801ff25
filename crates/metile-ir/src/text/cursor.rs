//! A character cursor over IR text, shared by the Tile IR and GPU IR parsers:
//! whitespace skipping, words, numbers, quoted strings and `// file:line`
//! locations, each failure a [`ParseError`] at the line and column where it
//! was found.

use super::ParseError;
use crate::tile_ir::{Literal, Loc};
use std::sync::Arc;

/// The largest value number a parsed function may use. Values are stored in a
/// table indexed by number, so a number is a memory size: this bounds what a
/// damaged text can ask for (printed functions stay far below it).
pub const MAX_VALUE_ID: u32 = 1 << 20;

/// The largest number of elements a parsed tile type may have.
pub const MAX_TILE_ELEMENTS: usize = 1 << 31;

pub struct Cursor<'t> {
    text: &'t str,
    pos: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

impl<'t> Cursor<'t> {
    pub fn new(text: &'t str) -> Cursor<'t> {
        Cursor { text, pos: 0 }
    }

    fn rest(&self) -> &'t str {
        &self.text[self.pos..]
    }

    /// An error at the current position (after skipping whitespace).
    pub fn error(&mut self, message: impl Into<String>) -> ParseError {
        self.skip_ws();
        self.error_at(self.pos, message)
    }

    pub fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        let before = &self.text[..pos.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        ParseError {
            line,
            column,
            message: message.into(),
        }
    }

    /// The position of what comes next (whitespace skipped).
    pub fn pos(&mut self) -> usize {
        self.skip_ws();
        self.pos
    }

    pub fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    pub fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.rest().is_empty()
    }

    pub fn peek(&mut self) -> Option<char> {
        self.skip_ws();
        self.rest().chars().next()
    }

    /// What the text holds here, for messages: the next word or character.
    fn found(&mut self) -> String {
        self.skip_ws();
        let rest = self.rest();
        match rest.chars().next() {
            None => "the end of the text".into(),
            Some(c) if is_word_char(c) => {
                let word: String = rest.chars().take_while(|&c| is_word_char(c)).take(40).collect();
                format!("`{word}`")
            }
            Some(c) => format!("`{c}`"),
        }
    }

    /// Consumes `token` (punctuation or a keyword) if it is next.
    pub fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if !self.rest().starts_with(token) {
            return false;
        }
        let ends_word = token
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let after = self.rest()[token.len()..].chars().next();
        if ends_word && after.is_some_and(is_word_char) {
            return false;
        }
        self.pos += token.len();
        true
    }

    pub fn expect(&mut self, token: &str) -> Result<(), ParseError> {
        if self.eat(token) {
            Ok(())
        } else {
            let found = self.found();
            Err(self.error(format!("expected `{token}`, found {found}")))
        }
    }

    /// A word: letters, digits, `_` and `.` (op names such as `load.v4`).
    pub fn word(&mut self, what: &str) -> Result<&'t str, ParseError> {
        self.skip_ws();
        let rest = self.rest();
        let len = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
        if len == 0 {
            let found = self.found();
            return Err(self.error(format!("expected {what}, found {found}")));
        }
        self.pos += len;
        Ok(&rest[..len])
    }

    /// The raw text up to (not including) the first of `stops`, or the end.
    pub fn until(&mut self, stops: &[char]) -> &'t str {
        let rest = self.rest();
        let len = rest.find(|c: char| stops.contains(&c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    /// An unsigned decimal number that fits `T`.
    pub fn uint<T: TryFrom<u64>>(&mut self, what: &str) -> Result<T, ParseError> {
        self.skip_ws();
        let start = self.pos;
        let digits = self.until_not(|c| c.is_ascii_digit());
        let value = digits.parse::<u64>().ok().and_then(|v| T::try_from(v).ok());
        value.ok_or_else(|| {
            self.pos = start;
            let found = self.found();
            self.error(format!(
                "expected {what} (an unsigned number in range), found {found}"
            ))
        })
    }

    pub fn int(&mut self, what: &str) -> Result<i64, ParseError> {
        self.skip_ws();
        let start = self.pos;
        let negative = self.rest().starts_with('-');
        if negative {
            self.pos += 1;
        }
        let digits = self.until_not(|c| c.is_ascii_digit());
        let text = &self.text[start..start + usize::from(negative) + digits.len()];
        text.parse::<i64>().map_err(|_| {
            self.pos = start;
            let found = self.found();
            self.error(format!("expected {what} (an integer), found {found}"))
        })
    }

    fn until_not(&mut self, keep: impl Fn(char) -> bool) -> &'t str {
        let rest = self.rest();
        let len = rest.find(|c: char| !keep(c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    /// A literal as [`Literal`]'s `Display` writes it: `true`/`false`, an
    /// integer, or a float in Rust's shortest round-trip form (`0.5`, `1e38`,
    /// `NaN`, `-inf`).
    pub fn literal(&mut self) -> Result<Literal, ParseError> {
        if self.eat("true") {
            return Ok(Literal::Bool(true));
        }
        if self.eat("false") {
            return Ok(Literal::Bool(false));
        }
        self.skip_ws();
        let start = self.pos;
        let text = self.until_not(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.'));
        let is_float = text.contains(['.', 'e', 'E']) || text.ends_with("NaN") || text.ends_with("inf");
        let parsed = if is_float {
            text.parse::<f64>().ok().map(Literal::Float)
        } else {
            text.parse::<i64>().ok().map(Literal::Int)
        };
        let parsed = match parsed {
            Some(Literal::Float(x)) if x.is_nan() && self.rest().starts_with('(') => {
                self.nan_bits().map(|bits| Literal::Float(f64::from_bits(bits)))
            }
            other => other,
        };
        parsed.ok_or_else(|| {
            self.pos = start;
            let found = self.found();
            self.error(format!("expected a literal, found {found}"))
        })
    }

    /// `(0x...)` after `NaN`: the bits of a NaN other than `f64::NAN`.
    fn nan_bits(&mut self) -> Option<u64> {
        let rest = self.rest();
        let inner = rest.strip_prefix("(0x")?;
        let end = inner.find(')')?;
        let bits = u64::from_str_radix(&inner[..end], 16).ok()?;
        f64::from_bits(bits).is_nan().then(|| {
            self.pos += 3 + end + 1;
            bits
        })
    }

    /// A string as Rust's `{:?}` writes it: quoted, with `\"`, `\\`, `\n`,
    /// `\r`, `\t`, `\0`, `\'` and `\u{..}` escapes.
    pub fn string(&mut self) -> Result<String, ParseError> {
        let start = self.pos();
        self.expect("\"")?;
        let mut out = String::new();
        loop {
            let rest = self.rest();
            let Some(c) = rest.chars().next() else {
                return Err(self.error_at(start, "unterminated string"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let escape_at = self.pos - 1;
                    let Some(e) = self.rest().chars().next() else {
                        return Err(self.error_at(start, "unterminated string"));
                    };
                    self.pos += e.len_utf8();
                    out.push(match e {
                        '"' => '"',
                        '\\' => '\\',
                        '\'' => '\'',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        '0' => '\0',
                        'u' => self.unicode_escape(escape_at)?,
                        _ => return Err(self.error_at(escape_at, format!("unknown escape `\\{e}`"))),
                    });
                }
                c => out.push(c),
            }
        }
    }

    fn unicode_escape(&mut self, escape_at: usize) -> Result<char, ParseError> {
        let bad = |c: &Cursor| c.error_at(escape_at, "bad `\\u{..}` escape");
        if !self.rest().starts_with('{') {
            return Err(bad(self));
        }
        self.pos += 1;
        let hex = self.until_not(|c| c.is_ascii_hexdigit());
        if !self.rest().starts_with('}') || hex.is_empty() || hex.len() > 6 {
            return Err(bad(self));
        }
        self.pos += 1;
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| bad(self))
    }

    /// A `/* ... */` comment's text.
    pub fn comment(&mut self) -> Result<&'t str, ParseError> {
        self.expect("/*")?;
        let rest = self.rest();
        let Some(end) = rest.find("*/") else {
            return Err(self.error("unterminated `/*` comment"));
        };
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    /// `// file:line`, to the end of the line.
    pub fn loc(&mut self) -> Result<Loc, ParseError> {
        self.expect("//")?;
        let start = self.pos;
        let text = self.until(&['\n']).trim();
        let parsed = text
            .rsplit_once(':')
            .and_then(|(file, line)| Some((file, line.parse::<u32>().ok()?)));
        match parsed {
            Some((file, line)) => Ok(Loc {
                file: Arc::from(file),
                line,
            }),
            None => Err(self.error_at(start, format!("expected a location `file:line`, found `{text}`"))),
        }
    }

    /// `%N`, the number of a value.
    pub fn value_number(&mut self) -> Result<u32, ParseError> {
        self.expect("%")?;
        let start = self.pos;
        let n: u32 = self.uint("a value number")?;
        if n >= MAX_VALUE_ID {
            return Err(self.error_at(start, format!("value %{n} is numbered beyond {MAX_VALUE_ID}")));
        }
        Ok(n)
    }

    /// `[a,b,...]`: a shape (possibly empty: `[]`).
    pub fn dims(&mut self) -> Result<Vec<usize>, ParseError> {
        let start = self.pos();
        self.expect("[")?;
        let mut dims = Vec::new();
        if !self.eat("]") {
            loop {
                dims.push(self.uint::<usize>("a dimension")?);
                if self.eat("]") {
                    break;
                }
                self.expect(",")?;
            }
        }
        let elements = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if elements.is_none_or(|n| n > MAX_TILE_ELEMENTS) {
            return Err(self.error_at(start, format!("a tile of more than {MAX_TILE_ELEMENTS} elements")));
        }
        Ok(dims)
    }
}
