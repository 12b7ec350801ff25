//! The Tile IR text parser: the inverse of [`crate::print_function`].

use super::cursor::Cursor;
use super::names;
use super::{ParseError, Values};
use crate::dtype::{AddrSpace, DType, Elem, Type};
use crate::tile_ir::*;

/// Parses one function printed by [`crate::print_function`].
pub fn parse_function(text: &str) -> Result<Function, ParseError> {
    let mut p = TileParser {
        c: Cursor::new(text),
        values: Values::new(Type::scalar(DType::I32)),
    };
    let f = p.function()?;
    if !p.c.at_end() {
        return Err(p.c.error("text after the end of the function"));
    }
    Ok(f)
}

struct TileParser<'t> {
    c: Cursor<'t>,
    values: Values<Type>,
}

pub(super) fn dtype(c: &mut Cursor) -> Result<DType, ParseError> {
    let start = c.pos();
    let name = c.word("an element type")?;
    DType::parse(name).ok_or_else(|| c.error_at(start, format!("unknown element type `{name}`")))
}

impl TileParser<'_> {
    fn function(&mut self) -> Result<Function, ParseError> {
        self.c.expect("tile.func")?;
        self.c.expect("@")?;
        let name = self.c.until(&['(', '\n']).trim().to_string();
        if name.is_empty() {
            return Err(self.c.error("expected the function's name after `@`"));
        }
        self.c.expect("(")?;
        let mut params = Vec::new();
        if !self.c.eat(")") {
            loop {
                params.push(self.param()?);
                if self.c.eat(")") {
                    break;
                }
                self.c.expect(",")?;
            }
        }
        let mut constexprs = Vec::new();
        if self.c.eat("constexprs") {
            self.c.expect("{")?;
            if !self.c.eat("}") {
                loop {
                    constexprs.push(self.constexpr()?);
                    if self.c.eat("}") {
                        break;
                    }
                    self.c.expect(",")?;
                }
            }
        }
        let threads_per_group = if self.c.eat("threads") {
            Some(self.c.uint("a thread count")?)
        } else {
            None
        };
        self.c.expect("{")?;
        let body = self.block(vec![])?;
        Ok(Function {
            name,
            params,
            constexprs,
            threads_per_group,
            body,
            values: std::mem::take(&mut self.values.types),
        })
    }

    fn param(&mut self) -> Result<Param, ParseError> {
        let value = self.define_value()?;
        self.c.expect(":")?;
        let ty_at = self.c.pos();
        let ty = self.ty()?;
        let kind = match (ty.elem, ty.shape.is_empty()) {
            (Elem::Ptr(d, AddrSpace::Global), true) => ParamKind::Pointer(d),
            (Elem::Scalar(d), true) => ParamKind::Scalar(d),
            _ => {
                return Err(self
                    .c
                    .error_at(ty_at, format!("a parameter cannot have type {ty}")))
            }
        };
        let divisibility = if self.c.eat("{") {
            self.c.expect("divisible")?;
            let d = self.c.uint("a divisor")?;
            self.c.expect("}")?;
            d
        } else {
            1
        };
        let name = self.c.comment()?.to_string();
        self.set_type(value, ty)?;
        Ok(Param {
            name,
            kind,
            value,
            divisibility,
        })
    }

    fn constexpr(&mut self) -> Result<(String, String), ParseError> {
        let key = self.c.until(&['=', ',', '}', '\n']).trim().to_string();
        if key.is_empty() {
            return Err(self.c.error("expected a constexpr name"));
        }
        self.c.expect("=")?;
        let value = if self.c.peek() == Some('"') {
            self.c.string()?
        } else {
            self.c.until(&[',', '}', '\n']).trim().to_string()
        };
        Ok((key, value))
    }

    /// `%N`, to be defined (its type set by [`TileParser::set_type`]).
    fn define_value(&mut self) -> Result<ValueId, ParseError> {
        self.values.parse_new(&mut self.c).map(ValueId)
    }

    fn set_type(&mut self, v: ValueId, ty: Type) -> Result<(), ParseError> {
        self.values.define_at(&mut self.c, v.0, ty)
    }

    fn use_value(&mut self) -> Result<ValueId, ParseError> {
        self.values.parse_use(&mut self.c).map(ValueId)
    }

    fn ty(&mut self) -> Result<Type, ParseError> {
        let elem = if self.c.eat("ptr") {
            Elem::Ptr(self.pointee()?, AddrSpace::Global)
        } else if self.c.eat("shared_ptr") {
            Elem::Ptr(self.pointee()?, AddrSpace::Shared)
        } else {
            Elem::Scalar(dtype(&mut self.c)?)
        };
        let shape = if self.c.peek() == Some('[') {
            self.c.dims()?
        } else {
            vec![]
        };
        Ok(Type { elem, shape })
    }

    fn pointee(&mut self) -> Result<DType, ParseError> {
        self.c.expect("<")?;
        let d = dtype(&mut self.c)?;
        self.c.expect(">")?;
        Ok(d)
    }

    /// Ops up to the closing `}` (consumed).
    fn block(&mut self, args: Vec<ValueId>) -> Result<Block, ParseError> {
        let mut ops = Vec::new();
        while !self.c.eat("}") {
            if self.c.at_end() {
                return Err(self.c.error("expected `}` closing a block"));
            }
            ops.push(self.op()?);
        }
        Ok(Block { args, ops })
    }

    fn op(&mut self) -> Result<Op, ParseError> {
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
        let mut operands = Vec::new();
        if self.c.peek() == Some('%') {
            loop {
                operands.push(self.use_value()?);
                if !self.c.eat(",") {
                    break;
                }
            }
        }
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
        let mut regions = Vec::new();
        let separator = if matches!(kind, OpKind::While) {
            "do"
        } else {
            "else"
        };
        while self.c.peek() == Some('{') || (!regions.is_empty() && self.c.eat(separator)) {
            self.c.expect("{")?;
            let mut args = Vec::new();
            if self.c.eat("^") {
                self.c.expect("(")?;
                loop {
                    let a = self.define_value()?;
                    self.c.expect(":")?;
                    let ty = self.ty()?;
                    self.set_type(a, ty)?;
                    args.push(a);
                    if self.c.eat(")") {
                        break;
                    }
                    self.c.expect(",")?;
                }
            }
            regions.push(self.block(args)?);
        }
        let loc = self.c.loc()?;
        Ok(Op {
            kind,
            operands,
            results,
            regions,
            loc,
        })
    }

    fn flag(&mut self, word: &str) -> bool {
        self.c.eat(word)
    }

    /// `key=N`.
    fn keyed<T: TryFrom<u64>>(&mut self, key: &str) -> Result<T, ParseError> {
        self.c.expect(key)?;
        self.c.expect("=")?;
        self.c.uint(key)
    }

    fn kind(&mut self, name: &str, name_at: usize) -> Result<OpKind, ParseError> {
        if let Some(kind) = names::plain_tile_kind(name) {
            return Ok(kind);
        }
        let c = &mut self.c;
        Ok(match name {
            "program_id" => OpKind::ProgramId {
                axis: c.uint("an axis")?,
            },
            "num_programs" => OpKind::NumPrograms {
                axis: c.uint("an axis")?,
            },
            "constant" => OpKind::Constant(c.literal()?),
            "arange" => {
                let start = c.int("the start")?;
                c.expect(",")?;
                OpKind::Arange {
                    start,
                    end: c.int("the end")?,
                }
            }
            "expand_dims" => OpKind::ExpandDims {
                axis: self.keyed("axis")?,
            },
            "permute" => {
                c.expect("dims")?;
                c.expect("=")?;
                OpKind::Permute { dims: c.dims()? }
            }
            "take" => OpKind::Take {
                axis: self.keyed("axis")?,
                index: self.keyed("index")?,
            },
            "load" => OpKind::Load {
                has_mask: self.flag("masked"),
                has_other: self.flag("other"),
            },
            "store" => OpKind::Store {
                has_mask: self.flag("masked"),
            },
            "tile_load" | "tile_store" => {
                let at = c.pos();
                let dims = c.dims()?;
                let [rows, cols] = dims[..] else {
                    return Err(c.error_at(at, "expected `[rows,cols]`"));
                };
                if name == "tile_load" {
                    OpKind::TileLoad { rows, cols }
                } else {
                    OpKind::TileStore { rows, cols }
                }
            }
            "sort" => OpKind::Sort {
                axis: self.keyed("axis")?,
                descending: self.flag("descending"),
            },
            "tile_swizzle" => {
                let at = c.pos();
                let word = c.word("a swizzle pattern")?;
                let pattern = names::swizzle_pattern(word)
                    .ok_or_else(|| c.error_at(at, format!("unknown swizzle pattern `{word}`")))?;
                OpKind::Swizzle {
                    pattern,
                    block_size: self.keyed("block")?,
                }
            }
            "shared" => OpKind::Shared {
                size: self.keyed("size")?,
            },
            "simdgroup_role" => {
                let role = self.keyed("role")?;
                self.c.expect("/")?;
                OpKind::SimdgroupRole {
                    role,
                    num_roles: self.c.uint("a role count")?,
                }
            }
            "for" => OpKind::For {
                num_stages: if c.peek() == Some('s') {
                    Some(self.keyed("stages")?)
                } else {
                    None
                },
            },
            "print" => OpKind::Print {
                prefix: c.string()?,
                hex: self.flag("hex"),
            },
            "assert" => OpKind::Assert { message: c.string()? },
            "assume" => {
                let at = c.pos();
                let word = c.word("a fact")?;
                let fact = names::assume_fact(word)
                    .ok_or_else(|| c.error_at(at, format!("unknown fact `{word}`")))?;
                c.expect("=")?;
                OpKind::Assume {
                    fact,
                    value: c.uint("a value")?,
                }
            }
            _ => return self.family_kind(name, name_at),
        })
    }

    /// Reductions, scans and atomics: a family name with attributes.
    fn family_kind(&mut self, name: &str, name_at: usize) -> Result<OpKind, ParseError> {
        if let Some(op) = names::reduce_op(name) {
            let axis = if self.c.peek() == Some('a') {
                Some(self.keyed("axis")?)
            } else {
                None
            };
            return Ok(OpKind::Reduce { op, axis });
        }
        if let Some(op) = names::scan_op(name) {
            return Ok(OpKind::Scan {
                op,
                axis: self.keyed("axis")?,
                reverse: self.flag("reverse"),
            });
        }
        if let Some(op) = names::atomic_op(name) {
            let (sem, scope) = sem_scope(&mut self.c)?;
            return Ok(OpKind::Atomic {
                op,
                sem,
                scope,
                has_mask: self.flag("masked"),
            });
        }
        Err(self.c.error_at(name_at, format!("unknown Tile IR op `{name}`")))
    }
}

/// An atomic's `sem scope` words.
pub(super) fn sem_scope(c: &mut Cursor) -> Result<(MemSem, MemScope), ParseError> {
    let at = c.pos();
    let word = c.word("a memory order")?;
    let sem = names::mem_sem(word).ok_or_else(|| c.error_at(at, format!("unknown memory order `{word}`")))?;
    let at = c.pos();
    let word = c.word("a memory scope")?;
    let scope =
        names::mem_scope(word).ok_or_else(|| c.error_at(at, format!("unknown memory scope `{word}`")))?;
    Ok((sem, scope))
}
