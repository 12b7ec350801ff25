//! The GPU IR text parser: the inverse of [`crate::print_gpu_function`].

use super::cursor::Cursor;
use super::tile_parse::dtype;
use super::{ParseError, Values};
use crate::dtype::DType;
use crate::gpu_ir::*;
use crate::tile_ir::Loc;

/// Parses one function printed by [`crate::print_gpu_function`].
pub fn parse_gpu_function(text: &str) -> Result<GpuFunction, ParseError> {
    let mut p = GpuParser {
        c: Cursor::new(text),
        values: Values::new(GpuType::Scalar(DType::I32)),
        regs: 0,
    };
    let f = p.function()?;
    if !p.c.at_end() {
        return Err(p.c.error("text after the end of the function"));
    }
    Ok(f)
}

struct GpuParser<'t> {
    c: Cursor<'t>,
    values: Values<GpuType>,
    /// Register arrays declared so far.
    regs: u32,
}

impl GpuParser<'_> {
    fn function(&mut self) -> Result<GpuFunction, ParseError> {
        self.c.expect("gpu.func")?;
        self.c.expect("@")?;
        let name = self.c.until(&['(', '\n']).trim().to_string();
        if name.is_empty() {
            return Err(self.c.error("expected the function's name after `@`"));
        }
        self.c.expect("(")?;
        let mut params = Vec::new();
        if !self.c.eat(")") {
            loop {
                let p = self.param(&params)?;
                params.push(p);
                if self.c.eat(")") {
                    break;
                }
                self.c.expect(",")?;
            }
        }
        self.c.expect("threads")?;
        let threads_per_group = self.c.uint("a thread count")?;
        self.c.expect("{")?;
        let mut threadgroup = Vec::new();
        while self.c.eat("threadgroup") {
            threadgroup.push(self.threadgroup_alloc()?);
        }
        let mut regs = Vec::new();
        while self.c.eat("reg") {
            let at = self.c.pos();
            let reg = self.reg()?;
            if reg.0 as usize != regs.len() {
                return Err(self
                    .c
                    .error_at(at, format!("expected register array r{}", regs.len())));
            }
            self.c.expect(":")?;
            let dtype = dtype(&mut self.c)?;
            self.c.expect("[")?;
            let len = self.c.uint("a register count")?;
            self.c.expect("]")?;
            regs.push(RegArray { dtype, len });
            self.regs += 1;
        }
        let body = self.block(vec![])?;
        Ok(GpuFunction {
            name,
            params,
            threadgroup,
            regs,
            threads_per_group,
            body,
            values: std::mem::take(&mut self.values.types),
        })
    }

    fn param(&mut self, before: &[GpuParam]) -> Result<GpuParam, ParseError> {
        let value = self.define_value()?;
        self.c.expect(":")?;
        let ty_at = self.c.pos();
        let ty = self.ty()?;
        let name = self.c.comment()?.to_string();
        let mut tile_index = None;
        let (kind, usual_index) = if self.c.eat("{") {
            let at = self.c.pos();
            let kind = match self.c.word("a parameter kind")? {
                "tensor_map" => {
                    let spec = self.spec()?;
                    (GpuParamKind::TensorMap(spec), spec.buffer)
                }
                "tensor_map_ready" => {
                    let spec = self.spec()?;
                    (GpuParamKind::TensorMapReady(spec), spec.buffer)
                }
                "minus_one" => (GpuParamKind::MinusOne, 0),
                "arg" => {
                    tile_index = Some(self.c.uint("a parameter index")?);
                    self.plain_kind(ty, ty_at, before)?
                }
                other => return Err(self.c.error_at(at, format!("unknown parameter kind `{other}`"))),
            };
            self.c.expect("}")?;
            kind
        } else {
            self.plain_kind(ty, ty_at, before)?
        };
        if tile_index.is_none() && self.c.eat("{") {
            self.c.expect("arg")?;
            tile_index = Some(self.c.uint("a parameter index")?);
            self.c.expect("}")?;
        }
        let tile_index = tile_index.unwrap_or(usual_index);
        self.set_type(value, ty)?;
        Ok(GpuParam {
            name,
            kind,
            tile_index,
            value,
        })
    }

    fn plain_kind(
        &mut self,
        ty: GpuType,
        ty_at: usize,
        before: &[GpuParam],
    ) -> Result<(GpuParamKind, usize), ParseError> {
        let kind = match ty {
            GpuType::Ptr(d, MemSpace::Device) => GpuParamKind::Buffer(d),
            GpuType::Scalar(d) => GpuParamKind::Scalar(d),
            _ => {
                return Err(self
                    .c
                    .error_at(ty_at, format!("a parameter cannot have type {ty}")))
            }
        };
        let position = before
            .iter()
            .filter(|q| matches!(q.kind, GpuParamKind::Buffer(_) | GpuParamKind::Scalar(_)))
            .count();
        Ok((kind, position))
    }

    fn spec(&mut self) -> Result<TensorMapSpec, ParseError> {
        let buffer = self.keyed("buffer")?;
        self.c.expect("dtype")?;
        self.c.expect("=")?;
        let dtype = dtype(&mut self.c)?;
        let rows = self.launch_value("rows")?;
        let cols = self.launch_value("cols")?;
        let stride = self.launch_value("stride")?;
        self.c.expect("box")?;
        self.c.expect("=")?;
        let at = self.c.pos();
        let word = self.c.word("a box `ROWSxCOLS`")?;
        let (box_rows, box_cols) = word
            .split_once('x')
            .and_then(|(r, c)| Some((r.parse::<u16>().ok()?, c.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                self.c
                    .error_at(at, format!("expected a box `ROWSxCOLS`, found `{word}`"))
            })?;
        Ok(TensorMapSpec {
            buffer,
            dtype,
            rows,
            cols,
            stride,
            box_rows,
            box_cols,
            swizzle_bytes: self.keyed("swizzle")?,
            stacked: self.c.eat("stacked"),
        })
    }

    fn launch_value(&mut self, key: &str) -> Result<LaunchValue, ParseError> {
        self.c.expect(key)?;
        self.c.expect("=")?;
        if self.c.peek() == Some('a') {
            let at = self.c.pos();
            let word = self.c.word("a parameter `argN`")?;
            word.strip_prefix("arg")
                .and_then(|n| n.parse::<usize>().ok())
                .map(LaunchValue::Arg)
                .ok_or_else(|| self.c.error_at(at, format!("expected `argN`, found `{word}`")))
        } else {
            Ok(LaunchValue::Const(self.c.int("a constant")?))
        }
    }

    /// `tgN %v = T[len] /*purpose, B bytes*/`.
    fn threadgroup_alloc(&mut self) -> Result<TgAlloc, ParseError> {
        self.c.word("the allocation's name")?;
        let value = self.define_value()?;
        self.c.expect("=")?;
        let dtype = dtype(&mut self.c)?;
        self.c.expect("[")?;
        let len = self.c.uint("an element count")?;
        self.c.expect("]")?;
        let at = self.c.pos();
        let comment = self.c.comment()?;
        let what = comment.split(',').next().unwrap_or("").trim();
        let purpose = match what {
            "shared" => TgPurpose::User,
            "scratch" => TgPurpose::Scratch,
            _ => {
                let of = what
                    .strip_prefix("reusing %")
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|&n| self.values.is_defined(n));
                match of {
                    Some(n) => TgPurpose::Alias(GpuValue(n)),
                    None => {
                        return Err(self
                            .c
                            .error_at(at, format!("unknown threadgroup purpose `{what}`")))
                    }
                }
            }
        };
        self.set_type(value, GpuType::Ptr(dtype, MemSpace::Threadgroup))?;
        Ok(TgAlloc {
            dtype,
            len,
            purpose,
            value,
        })
    }

    fn define_value(&mut self) -> Result<GpuValue, ParseError> {
        self.values.parse_new(&mut self.c).map(GpuValue)
    }

    fn set_type(&mut self, v: GpuValue, ty: GpuType) -> Result<(), ParseError> {
        self.values.define_at(&mut self.c, v.0, ty)
    }

    fn use_value(&mut self) -> Result<GpuValue, ParseError> {
        self.values.parse_use(&mut self.c).map(GpuValue)
    }

    fn values_list(&mut self) -> Result<ValueList, ParseError> {
        let mut list = ValueList::new();
        if self.c.peek() == Some('%') {
            loop {
                list.push(self.use_value()?);
                if !self.c.eat(",") {
                    break;
                }
            }
        }
        Ok(list)
    }

    fn ty(&mut self) -> Result<GpuType, ParseError> {
        if self.c.eat("ptr") {
            self.c.expect("<")?;
            let d = dtype(&mut self.c)?;
            self.c.expect(",")?;
            let at = self.c.pos();
            let space = match self.c.word("a memory space")? {
                "device" => MemSpace::Device,
                "threadgroup" => MemSpace::Threadgroup,
                "tensor_map" => MemSpace::TensorMap,
                other => return Err(self.c.error_at(at, format!("unknown memory space `{other}`"))),
            };
            self.c.expect(">")?;
            return Ok(GpuType::Ptr(d, space));
        }
        self.c.skip_ws();
        let at = self.c.pos();
        let word = self.c.word("a type")?;
        let (name, lanes) = match word.rsplit_once('x') {
            Some((d, n)) if DType::parse(d).is_some() && !n.is_empty() => (d, Some(n)),
            _ => (word, None),
        };
        let Some(d) = DType::parse(name) else {
            return Err(self.c.error_at(at, format!("unknown type `{word}`")));
        };
        match lanes.map(str::parse::<u8>) {
            None => Ok(GpuType::Scalar(d)),
            Some(Ok(n)) => Ok(GpuType::Vector(d, n)),
            Some(Err(_)) => Err(self.c.error_at(at, format!("bad vector width in `{word}`"))),
        }
    }

    fn reg(&mut self) -> Result<RegId, ParseError> {
        self.c.skip_ws();
        let at = self.c.pos();
        let word = self.c.word("a register array")?;
        word.strip_prefix('r')
            .and_then(|n| n.parse::<u32>().ok())
            .map(RegId)
            .ok_or_else(|| {
                self.c
                    .error_at(at, format!("expected a register array `rN`, found `{word}`"))
            })
    }

    /// A register array that the function declares.
    fn declared_reg(&mut self) -> Result<RegId, ParseError> {
        self.c.skip_ws();
        let at = self.c.pos();
        let reg = self.reg()?;
        if reg.0 >= self.regs {
            return Err(self
                .c
                .error_at(at, format!("register array {reg} is not declared")));
        }
        Ok(reg)
    }

    /// `rN[i]`.
    fn reg_element(&mut self) -> Result<(RegId, u32), ParseError> {
        let reg = self.declared_reg()?;
        self.c.expect("[")?;
        let index = self.c.uint("a register index")?;
        self.c.expect("]")?;
        Ok((reg, index))
    }

    fn keyed<T: TryFrom<u64>>(&mut self, key: &str) -> Result<T, ParseError> {
        self.c.expect(key)?;
        self.c.expect("=")?;
        self.c.uint(key)
    }

    /// Ops up to the closing `}` (consumed).
    fn block(&mut self, args: Vec<GpuValue>) -> Result<GpuBlock, ParseError> {
        let mut ops = Vec::new();
        while !self.c.eat("}") {
            if self.c.at_end() {
                return Err(self.c.error("expected `}` closing a block"));
            }
            ops.push(self.op()?);
        }
        Ok(GpuBlock { args, ops })
    }

    fn region_op(
        &mut self,
        kind: GpuOpKind,
        operands: ValueList,
        regions: Vec<GpuBlock>,
    ) -> Result<GpuOp, ParseError> {
        Ok(GpuOp {
            kind,
            operands,
            results: ValueList::new(),
            regions,
            loc: self.c.loc()?,
        })
    }

    fn op(&mut self) -> Result<GpuOp, ParseError> {
        if self.c.eat("for") {
            let iv = self.define_value()?;
            self.set_type(iv, GpuType::Scalar(DType::I32))?;
            self.c.expect("=")?;
            let start = self.use_value()?;
            self.c.expect("to")?;
            let end = self.use_value()?;
            self.c.expect("step")?;
            let step = self.use_value()?;
            self.c.expect("{")?;
            let body = self.block(vec![iv])?;
            return self.region_op(GpuOpKind::For, ValueList::from([start, end, step]), vec![body]);
        }
        if self.c.eat("if") {
            let cond = self.use_value()?;
            self.c.expect("{")?;
            let then_b = self.block(vec![])?;
            let else_b = if self.c.eat("else") {
                self.c.expect("{")?;
                self.block(vec![])?
            } else {
                GpuBlock::default()
            };
            return self.region_op(GpuOpKind::If, ValueList::from([cond]), vec![then_b, else_b]);
        }
        if self.c.eat("while") {
            self.c.expect("{")?;
            let cond = self.block(vec![])?;
            self.c.expect("do")?;
            self.c.expect("{")?;
            let body = self.block(vec![])?;
            return self.region_op(GpuOpKind::While, ValueList::new(), vec![cond, body]);
        }
        let mut results = Vec::new();
        if self.c.peek() == Some('%') {
            loop {
                results.push(self.define_value()?);
                if self.c.eat("=") {
                    break;
                }
                self.c.expect(",")?;
            }
        }
        let name_at = self.c.pos();
        let name = self.c.word("an op name")?;
        let kind = self.kind(name, name_at)?;
        let operands = self.values_list()?;
        if !results.is_empty() {
            self.c.expect(":")?;
            for (i, &r) in results.iter().enumerate() {
                if i > 0 {
                    self.c.expect(",")?;
                }
                let ty = self.ty()?;
                self.set_type(r, ty)?;
            }
        }
        let loc: Loc = self.c.loc()?;
        Ok(GpuOp {
            kind,
            operands,
            results: ValueList::from_slice(&results),
            regions: vec![],
            loc,
        })
    }
}

#[path = "gpu_kinds.rs"]
mod kinds;
