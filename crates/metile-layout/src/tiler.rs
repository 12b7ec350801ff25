//! Tilers: the right-hand operand of by-mode composition, divide and product.

use std::fmt;
use std::str::FromStr;

use crate::error::LayoutError;
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::text::Parser;

/// What a layout is composed with, divided by, or multiplied by.
///
/// A `Tiler::Layout` acts on the whole layout as a 1-D function. A
/// `Tiler::Modes` list acts mode by mode: element `i` applies to mode `i` of
/// the layout (CuTe writes these `<3:4, 8:2>`). A shape used as a tiler
/// (`Tiler::from_shape`) means one stride-1 layout per mode, so `(3,8)` is
/// `<3:1, 8:1>` and a bare `8` is the layout `8:1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tiler {
    Layout(Layout),
    Modes(Vec<Tiler>),
}

impl From<Layout> for Tiler {
    fn from(layout: Layout) -> Self {
        Tiler::Layout(layout)
    }
}

impl From<&Layout> for Tiler {
    fn from(layout: &Layout) -> Self {
        Tiler::Layout(layout.clone())
    }
}

impl From<Vec<Tiler>> for Tiler {
    fn from(modes: Vec<Tiler>) -> Self {
        Tiler::Modes(modes)
    }
}

impl Tiler {
    /// The tiler a CuTe shape stands for: an integer `n` is the layout `n:1`,
    /// a tuple is a by-mode tiler of its elements.
    ///
    /// ```
    /// use metile_layout::Tiler;
    /// let tiler = Tiler::from_shape(&"(3,8)".parse().unwrap()).unwrap();
    /// assert_eq!(tiler.to_string(), "<3:1,8:1>");
    /// ```
    pub fn from_shape(shape: &IntTuple) -> Result<Tiler, LayoutError> {
        match shape {
            IntTuple::Int(extent) => Layout::vector(*extent, 1).map(Tiler::Layout),
            IntTuple::Tuple(elements) => {
                if elements.is_empty() {
                    return Err(LayoutError::EmptyTuple { context: "tiler" });
                }
                elements
                    .iter()
                    .map(Tiler::from_shape)
                    .collect::<Result<Vec<_>, _>>()
                    .map(Tiler::Modes)
            }
        }
    }

    /// Number of modes the tiler addresses (1 for a layout tiler).
    pub fn rank(&self) -> usize {
        match self {
            Tiler::Layout(_) => 1,
            Tiler::Modes(modes) => modes.len(),
        }
    }
}

impl fmt::Display for Tiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tiler::Layout(layout) => write!(f, "{layout}"),
            Tiler::Modes(modes) => {
                f.write_str("<")?;
                for (i, mode) in modes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{mode}")?;
                }
                f.write_str(">")
            }
        }
    }
}

impl Parser<'_> {
    fn tiler(&mut self) -> Result<Tiler, LayoutError> {
        if self.eat("<") {
            let modes = self.nested(|parser| {
                let mut modes = vec![parser.tiler()?];
                while parser.eat(",") {
                    modes.push(parser.tiler()?);
                }
                Ok(modes)
            })?;
            self.expect(">")?;
            return Ok(Tiler::Modes(modes));
        }
        let start_shape = self.int_tuple()?;
        if self.eat(":") {
            let stride = self.int_tuple()?;
            let layout = Layout::new(start_shape, stride).map_err(|e| self.error(e.to_string()))?;
            Ok(Tiler::Layout(layout))
        } else {
            Tiler::from_shape(&start_shape).map_err(|e| self.error(e.to_string()))
        }
    }
}

impl FromStr for Tiler {
    type Err = LayoutError;

    /// Parses `<3:3,(2,4):(1,8)>`, a layout such as `4:2`, or a shape such as
    /// `(3,8)` (meaning `<3:1,8:1>`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parser = Parser::new(text);
        let tiler = parser.tiler()?;
        parser.finish()?;
        Ok(tiler)
    }
}
