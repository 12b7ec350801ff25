//! CuTe's text notation: `((2,2),3):((24,2),8)`.
//!
//! Printing is exact CuTe output for dynamic integers. Parsing accepts what
//! CuTe prints, including the `_` prefix CuTe uses for static integers (it
//! carries no meaning here), optional whitespace, negative strides, a bare
//! shape (which gets the default column-major strides) and scalars like `8:1`.

use std::fmt;
use std::str::FromStr;

use crate::error::LayoutError;
use crate::int_tuple::IntTuple;
use crate::layout::Layout;

impl fmt::Display for IntTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntTuple::Int(value) => write!(f, "{value}"),
            IntTuple::Tuple(elements) => {
                f.write_str("(")?;
                for (i, element) in elements.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{element}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.shape(), self.stride())
    }
}

/// Deepest tuple nesting accepted from text; far beyond any real layout, and
/// low enough that hostile input cannot exhaust the stack.
const MAX_NESTING: usize = 64;

/// A small recursive-descent reader shared by every text format of the crate.
pub(crate) struct Parser<'a> {
    input: &'a str,
    position: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(input: &'a str) -> Self {
        Parser {
            input,
            position: 0,
            depth: 0,
        }
    }

    pub(crate) fn error(&self, reason: impl Into<String>) -> LayoutError {
        LayoutError::Parse {
            input: self.input.to_string(),
            position: self.position,
            reason: reason.into(),
        }
    }

    pub(crate) fn checkpoint(&self) -> usize {
        self.position
    }

    pub(crate) fn restore(&mut self, checkpoint: usize) {
        self.position = checkpoint;
    }

    fn rest(&self) -> &'a str {
        self.input.get(self.position..).unwrap_or("")
    }

    pub(crate) fn skip_whitespace(&mut self) {
        let rest = self.rest();
        self.position += rest.len() - rest.trim_start().len();
    }

    pub(crate) fn peek(&mut self) -> Option<char> {
        self.skip_whitespace();
        self.rest().chars().next()
    }

    /// Consumes `token` (after whitespace) if it is next.
    pub(crate) fn eat(&mut self, token: &str) -> bool {
        self.skip_whitespace();
        if self.rest().starts_with(token) {
            self.position += token.len();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, token: &str) -> Result<(), LayoutError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{token}'")))
        }
    }

    pub(crate) fn at_end(&mut self) -> bool {
        self.skip_whitespace();
        self.rest().is_empty()
    }

    pub(crate) fn finish(&mut self) -> Result<(), LayoutError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.error("unexpected trailing text"))
        }
    }

    /// An integer, optionally marked static (`_8`) and/or negative.
    pub(crate) fn integer(&mut self) -> Result<i64, LayoutError> {
        self.skip_whitespace();
        self.eat("_");
        let start = self.position;
        let rest = self.rest();
        let sign_len = usize::from(rest.starts_with('-'));
        let digit_len = rest[sign_len..].bytes().take_while(u8::is_ascii_digit).count();
        if digit_len == 0 {
            return Err(self.error("expected an integer"));
        }
        let text = &rest[..sign_len + digit_len];
        let value = text
            .parse::<i64>()
            .map_err(|_| self.error(format!("integer {text} does not fit in i64")))?;
        self.position = start + text.len();
        Ok(value)
    }

    /// An integer or a parenthesized, comma-separated tuple of int tuples.
    pub(crate) fn int_tuple(&mut self) -> Result<IntTuple, LayoutError> {
        if !self.eat("(") {
            return self.integer().map(IntTuple::Int);
        }
        if self.peek() == Some(')') {
            return Err(self.error("empty tuple"));
        }
        let elements = self.nested(|parser| {
            let mut elements = vec![parser.int_tuple()?];
            while parser.eat(",") {
                elements.push(parser.int_tuple()?);
            }
            Ok(elements)
        })?;
        self.expect(")")?;
        Ok(IntTuple::Tuple(elements))
    }

    /// Runs `body` one nesting level deeper, refusing to go past
    /// `MAX_NESTING`.
    pub(crate) fn nested<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, LayoutError>,
    ) -> Result<T, LayoutError> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(format!("nested deeper than {MAX_NESTING} levels")));
        }
        self.depth += 1;
        let result = body(self);
        self.depth -= 1;
        result
    }

    /// `shape:stride`, or a bare shape with default column-major strides.
    pub(crate) fn layout(&mut self) -> Result<Layout, LayoutError> {
        let start = self.position;
        let shape = self.int_tuple()?;
        let result = if self.eat(":") {
            let stride = self.int_tuple()?;
            Layout::new(shape, stride)
        } else {
            Layout::column_major(shape)
        };
        result.map_err(|cause| LayoutError::Parse {
            input: self.input.to_string(),
            position: start,
            reason: cause.to_string(),
        })
    }
}

impl FromStr for IntTuple {
    type Err = LayoutError;

    /// Parses `8`, `(4,8)`, `(3,(2,3))`, ...
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parser = Parser::new(text);
        let tuple = parser.int_tuple()?;
        parser.finish()?;
        Ok(tuple)
    }
}

impl FromStr for Layout {
    type Err = LayoutError;

    /// Parses `shape:stride` in CuTe notation, or a bare shape.
    ///
    /// ```
    /// use metile_layout::Layout;
    /// let layout: Layout = "((2,2),3):((24,2),8)".parse().unwrap();
    /// assert_eq!(layout.to_string(), "((2,2),3):((24,2),8)");
    /// assert_eq!("(4,8)".parse::<Layout>().unwrap().to_string(), "(4,8):(1,4)");
    /// assert_eq!("(_2,_4):(_1,_2)".parse::<Layout>().unwrap().to_string(), "(2,4):(1,2)");
    /// assert!("(4,8):(1)".parse::<Layout>().is_err());
    /// ```
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parser = Parser::new(text);
        let layout = parser.layout()?;
        parser.finish()?;
        Ok(layout)
    }
}

impl Layout {
    /// Same as `text.parse::<Layout>()`.
    pub fn parse(text: &str) -> Result<Layout, LayoutError> {
        text.parse()
    }
}
