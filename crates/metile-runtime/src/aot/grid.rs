//! An artifact's grid rule: up to three integer expressions over the kernel's
//! integer scalar parameters and constexprs (`cdiv(N, BLOCK), 1, 1`), checked
//! when the artifact is built, evaluated at launch and printed as C for the
//! header. Arithmetic is on i64 and division truncates, as in C; an overflow, a
//! division by zero or an extent outside `0..=u32::MAX` is an error, never a
//! wrapped grid.

use std::collections::HashMap;

/// One expression of a grid rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Int(i64),
    Name(String),
    Binary(Op, Box<Expr>, Box<Expr>),
    /// `cdiv(a, b)`, `min(a, b)` or `max(a, b)`.
    Call(Func, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Cdiv,
    Min,
    Max,
}

impl Func {
    fn parse(name: &str) -> Option<Func> {
        match name {
            "cdiv" => Some(Func::Cdiv),
            "min" => Some(Func::Min),
            "max" => Some(Func::Max),
            _ => None,
        }
    }
}

/// A parsed grid rule: one expression per axis (missing axes are 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GridRule {
    pub axes: Vec<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Int(i64),
    Name(String),
    Punct(&'static str),
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '_') {
                i += 1;
            }
            let digits: String = chars[start..i].iter().filter(|&&c| c != '_').collect();
            let value = digits
                .parse::<i64>()
                .map_err(|_| format!("the number {digits} is too large"))?;
            tokens.push(Token::Int(value));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Name(chars[start..i].iter().collect()));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let punct = if two == "//" {
                "//"
            } else {
                match c {
                    '+' => "+",
                    '-' => "-",
                    '*' => "*",
                    '/' => "/",
                    '%' => "%",
                    '(' => "(",
                    ')' => ")",
                    ',' => ",",
                    other => return Err(format!("unexpected character '{other}'")),
                }
            };
            i += punct.len();
            tokens.push(Token::Punct(punct));
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, punct: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Punct(p)) if *p == punct);
        self.at += usize::from(found);
        found
    }

    fn expect(&mut self, punct: &str) -> Result<(), String> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(format!("expected '{punct}' {}", self.where_()))
        }
    }

    fn where_(&self) -> String {
        match self.peek() {
            None => "at the end".to_string(),
            Some(Token::Int(v)) => format!("before {v}"),
            Some(Token::Name(n)) => format!("before '{n}'"),
            Some(Token::Punct(p)) => format!("before '{p}'"),
        }
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut left = self.product()?;
        loop {
            let op = if self.eat("+") {
                Op::Add
            } else if self.eat("-") {
                Op::Sub
            } else {
                return Ok(left);
            };
            left = Expr::Binary(op, Box::new(left), Box::new(self.product()?));
        }
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            let op = if self.eat("*") {
                Op::Mul
            } else if self.eat("//") || self.eat("/") {
                Op::Div
            } else if self.eat("%") {
                Op::Rem
            } else {
                return Ok(left);
            };
            left = Expr::Binary(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("-") {
            let operand = self.unary()?;
            return Ok(Expr::Binary(Op::Sub, Box::new(Expr::Int(0)), Box::new(operand)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, String> {
        if self.eat("(") {
            let inner = self.sum()?;
            self.expect(")")?;
            return Ok(inner);
        }
        match self.peek().cloned() {
            Some(Token::Int(v)) => {
                self.at += 1;
                Ok(Expr::Int(v))
            }
            Some(Token::Name(name)) => {
                self.at += 1;
                if !self.eat("(") {
                    return Ok(Expr::Name(name));
                }
                let func = Func::parse(&name).ok_or_else(|| {
                    format!("unknown function '{name}'; a grid rule may call cdiv, min and max")
                })?;
                let a = self.sum()?;
                self.expect(",")?;
                let b = self.sum()?;
                self.expect(")")?;
                Ok(Expr::Call(func, Box::new(a), Box::new(b)))
            }
            _ => Err(format!("expected a number, a name or '(' {}", self.where_())),
        }
    }
}

impl GridRule {
    /// Parses `text`: one to three comma-separated expressions.
    pub fn parse(text: &str) -> Result<GridRule, String> {
        let fail = |reason: String| format!("bad grid rule '{text}': {reason}");
        let mut parser = Parser {
            tokens: tokenize(text).map_err(fail)?,
            at: 0,
        };
        let mut axes = vec![parser.sum().map_err(fail)?];
        while parser.eat(",") {
            axes.push(parser.sum().map_err(fail)?);
        }
        if parser.peek().is_some() {
            return Err(fail(format!("unexpected text {}", parser.where_())));
        }
        if axes.len() > 3 {
            return Err(fail(format!(
                "a grid has 1 to 3 axes, this rule has {}",
                axes.len()
            )));
        }
        Ok(GridRule { axes })
    }

    /// Every name the rule reads, in order of first use.
    pub fn names(&self) -> Vec<&str> {
        fn walk<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
            match e {
                Expr::Int(_) => {}
                Expr::Name(n) => {
                    if !out.contains(&n.as_str()) {
                        out.push(n);
                    }
                }
                Expr::Binary(_, a, b) | Expr::Call(_, a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        for axis in &self.axes {
            walk(axis, &mut out);
        }
        out
    }

    /// The grid for the values of the names the rule reads.
    pub fn evaluate(&self, values: &HashMap<&str, i64>) -> Result<[u32; 3], String> {
        let mut grid = [1u32; 3];
        for (axis, expr) in self.axes.iter().enumerate() {
            let v = eval(expr, values)?;
            grid[axis] = u32::try_from(v).map_err(|_| {
                format!(
                    "the grid rule gives {v} programs along axis {axis}; an extent is 0 to {}",
                    u32::MAX
                )
            })?;
        }
        Ok(grid)
    }

    /// Each axis as a C expression on `int64_t` values, names spelled by `name`.
    pub fn to_c(&self, name: &dyn Fn(&str) -> String) -> Vec<String> {
        let mut axes: Vec<String> = self.axes.iter().map(|e| c_expr(e, name)).collect();
        axes.resize(3, "INT64_C(1)".to_string());
        axes
    }
}

fn eval(e: &Expr, values: &HashMap<&str, i64>) -> Result<i64, String> {
    let overflow = || "the grid rule overflows 64-bit integers".to_string();
    Ok(match e {
        Expr::Int(v) => *v,
        Expr::Name(n) => *values
            .get(n.as_str())
            .ok_or_else(|| format!("the grid rule reads '{n}', which has no value"))?,
        Expr::Binary(op, a, b) => {
            let (a, b) = (eval(a, values)?, eval(b, values)?);
            match op {
                Op::Add => a.checked_add(b).ok_or_else(overflow)?,
                Op::Sub => a.checked_sub(b).ok_or_else(overflow)?,
                Op::Mul => a.checked_mul(b).ok_or_else(overflow)?,
                Op::Div | Op::Rem if b == 0 => return Err("the grid rule divides by zero".to_string()),
                Op::Div => a.checked_div(b).ok_or_else(overflow)?,
                Op::Rem => a.checked_rem(b).ok_or_else(overflow)?,
            }
        }
        Expr::Call(f, a, b) => {
            let (a, b) = (eval(a, values)?, eval(b, values)?);
            match f {
                Func::Min => a.min(b),
                Func::Max => a.max(b),
                Func::Cdiv if b == 0 => return Err("the grid rule divides by zero".to_string()),
                Func::Cdiv => a
                    .checked_add(b)
                    .and_then(|s| s.checked_sub(1))
                    .and_then(|s| s.checked_div(b))
                    .ok_or_else(overflow)?,
            }
        }
    })
}

fn c_expr(e: &Expr, name: &dyn Fn(&str) -> String) -> String {
    match e {
        Expr::Int(v) => format!("INT64_C({v})"),
        Expr::Name(n) => format!("(int64_t)({})", name(n)),
        Expr::Binary(op, a, b) => {
            let op = match op {
                Op::Add => "+",
                Op::Sub => "-",
                Op::Mul => "*",
                Op::Div => "/",
                Op::Rem => "%",
            };
            format!("({} {op} {})", c_expr(a, name), c_expr(b, name))
        }
        Expr::Call(f, a, b) => {
            let (a, b) = (c_expr(a, name), c_expr(b, name));
            match f {
                Func::Cdiv => format!("(({a} + {b} - 1) / {b})"),
                Func::Min => format!("({a} < {b} ? {a} : {b})"),
                Func::Max => format!("({a} > {b} ? {a} : {b})"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&'static str, i64)]) -> HashMap<&'static str, i64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn rules_evaluate_with_c_division() {
        let rule = GridRule::parse("cdiv(N, BLOCK), M // 2 + 1").unwrap();
        assert_eq!(rule.names(), vec!["N", "BLOCK", "M"]);
        let grid = rule
            .evaluate(&values(&[("N", 1000), ("BLOCK", 256), ("M", 7)]))
            .unwrap();
        assert_eq!(grid, [4, 4, 1]);
        let rule = GridRule::parse("min(N, 3) * (2 - 1), max(-N, 5) % 3, 1").unwrap();
        assert_eq!(rule.evaluate(&values(&[("N", 10)])).unwrap(), [3, 2, 1]);
        let c = rule.to_c(&|n| format!("a->{n}"));
        assert_eq!(
            c[0],
            "(((int64_t)(a->N) < INT64_C(3) ? (int64_t)(a->N) : INT64_C(3)) * (INT64_C(2) - INT64_C(1)))"
        );
        assert_eq!(c[2], "INT64_C(1)");
    }

    #[test]
    fn bad_rules_and_values_are_refused() {
        for (text, reason) in [
            ("", "expected a number, a name or '(' at the end"),
            ("cdiv(N)", "expected ',' before ')'"),
            ("f(N, 2)", "unknown function 'f'"),
            ("1, 2, 3, 4", "a grid has 1 to 3 axes, this rule has 4"),
            ("N $ 2", "unexpected character '$'"),
            ("(N", "expected ')' at the end"),
            ("N 2", "unexpected text before 2"),
        ] {
            let err = GridRule::parse(text).unwrap_err();
            assert!(err.starts_with(&format!("bad grid rule '{text}': ")), "{err}");
            assert!(err.contains(reason), "{text}: {err}");
        }
        let rule = GridRule::parse("N / D, N - 5").unwrap();
        let err = rule.evaluate(&values(&[("N", 4), ("D", 0)])).unwrap_err();
        assert_eq!(err, "the grid rule divides by zero");
        let err = rule.evaluate(&values(&[("N", 4), ("D", 1)])).unwrap_err();
        assert_eq!(
            err,
            "the grid rule gives -1 programs along axis 1; an extent is 0 to 4294967295"
        );
        let err = GridRule::parse("N * N")
            .unwrap()
            .evaluate(&values(&[("N", i64::MAX)]))
            .unwrap_err();
        assert_eq!(err, "the grid rule overflows 64-bit integers");
    }
}
