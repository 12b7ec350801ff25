//! The JSON manifest of an ahead-of-time artifact (`manifest.json`): what the
//! kernel takes, how it was specialised, and everything a runtime needs to
//! launch its source without the compiler. `docs/aot.md` documents the schema.
//!
//! A manifest is read as untrusted input: [`Manifest::check`] refuses one whose
//! parts disagree (an entry parameter naming a parameter that does not exist, a
//! buffer slot holding a scalar, a grid rule reading an unknown name), so a
//! launch never guesses.

use super::grid::GridRule;
use metile_compiler::{CudaKernel, CudaParam, MslBuiltin, MslKernel, MslParam, MslVersion};
use metile_ir::gpu_ir::{LaunchValue, TensorMapSpec};
use metile_ir::{DType, Loc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The `format` of manifests this version writes and reads.
pub const FORMAT: &str = "metile-aot-1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    /// The kernel's Python name.
    pub kernel: String,
    /// The function the source defines (`kernel void NAME` / `__global__ NAME`).
    pub entry_point: String,
    /// `apple`, `apple10` or `sm_XY`.
    pub target: String,
    pub language: Language,
    /// MSL `3.1`, `3.2` or `4.0`; CUDA `c++17` (the dialect NVRTC compiles).
    pub language_version: String,
    /// The architecture NVRTC compiles the CUDA source for (`sm_90a` where the
    /// kernel uses `wgmma`); absent for MSL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvrtc_arch: Option<String>,
    pub source: FileRef,
    /// A cubin or metallib built with the source, where the machine that
    /// compiled the artifact had the tool for it.
    #[serde(default)]
    pub binary: Option<FileRef>,
    pub header: String,
    /// The kernel's run-time parameters, in launch order.
    pub parameters: Vec<Parameter>,
    /// The constexpr values the kernel was specialised for.
    pub constexprs: Vec<Constexpr>,
    /// The grid rule (`cdiv(N, BLOCK), 1, 1`), if one was given.
    #[serde(default)]
    pub grid: Option<String>,
    /// The simdgroups (warps) per threadgroup asked for; `null`: the default rule.
    #[serde(default)]
    pub num_sgs: Option<u32>,
    pub threads_per_group: u32,
    /// Threadgroup (MSL) or dynamic shared (CUDA) memory per threadgroup.
    pub shared_memory_bytes: usize,
    /// The byte alignment every buffer's base address must have.
    pub buffer_alignment: usize,
    /// The compiled function's parameters in declaration order: the run-time
    /// parameters, and what the runtime adds (threadgroup memory, builtins, the
    /// `-1` NVIDIA kernels take, tensor maps).
    pub entry_parameters: Vec<EntryParameter>,
    /// CUDA: dynamic shared memory above this needs the kernel's opt-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_shared_bytes: Option<usize>,
    /// CUDA: the runtime may copy a tensor-map operand into aligned rows.
    #[serde(default)]
    pub repack_operands: bool,
    /// The kernel prints (`device_print`): each launch is waited for.
    #[serde(default)]
    pub prints: bool,
    /// `[first source line, kernel file, kernel line]` runs, to name the kernel
    /// line of a fault or a compiler diagnostic.
    #[serde(default)]
    pub line_table: Vec<(u32, String, u32)>,
    pub metile_version: String,
    /// SHA-256 of this manifest's JSON written with an empty `checksum`: an
    /// edited manifest (a thread count changed by hand would run the kernel on
    /// the wrong threads) is refused at load.
    #[serde(default)]
    pub checksum: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    Msl,
    Cuda,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRef {
    pub file: String,
    /// SHA-256 of the file's bytes, in hex; checked when the artifact is loaded.
    pub sha256: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    Pointer,
    Scalar,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    pub name: String,
    pub kind: ParamKind,
    /// The element dtype of a pointer, the dtype of a scalar (`f32`, `i32`, ...).
    pub dtype: String,
    /// The position among the run-time arguments of a launch.
    pub index: usize,
    /// Pointers: whether the kernel stores through it.
    #[serde(default)]
    pub written: bool,
    /// Integer scalars: the kernel assumes every value is a multiple of this.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub multiple_of: u64,
}

fn one() -> u64 {
    1
}

fn is_one(v: &u64) -> bool {
    *v == 1
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constexpr {
    pub name: String,
    /// A number or boolean as such; anything else as its Python `repr`.
    pub value: serde_json::Value,
}

/// One parameter of the compiled function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EntryParameter {
    /// Run-time parameter `index` (a pointer). MSL: `[[buffer(index)]]` of `msl_type`.
    Buffer {
        index: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        msl_type: Option<String>,
    },
    /// Run-time parameter `index` (a scalar). MSL: `constant T&` at `[[buffer(index)]]`.
    Scalar {
        index: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        msl_type: Option<String>,
    },
    /// MSL: `threadgroup T*` of `bytes` bytes at the next `[[threadgroup(k)]]`.
    Threadgroup { msl_type: String, bytes: usize },
    /// MSL: a builtin attribute (`threadgroup_position_in_grid`, ...).
    Builtin { builtin: String },
    /// CUDA: an `int` the launch passes as -1.
    MinusOne,
    /// CUDA: a `CUtensorMap` (128 bytes, by value) the runtime encodes from the
    /// arguments.
    TensorMap(TensorMap),
    /// CUDA: an `int`, 1 when the runtime could build that tensor map, else 0.
    TensorMapReady(TensorMap),
}

/// A 2-D row-major matrix a tensor map describes (matrices one after
/// another in the buffer, `rows * stride` elements apart, where `stacked`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorMap {
    /// The run-time parameter (a pointer) holding the matrix.
    pub buffer: usize,
    pub dtype: String,
    pub rows: Extent,
    pub cols: Extent,
    pub stride: Extent,
    pub box_rows: u16,
    pub box_cols: u16,
    pub swizzle_bytes: u16,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stacked: bool,
}

/// A size known at launch: a scalar argument or a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Extent {
    Arg(usize),
    Const(i64),
}

impl TensorMap {
    fn of(spec: &TensorMapSpec) -> TensorMap {
        let extent = |v: LaunchValue| match v {
            LaunchValue::Arg(i) => Extent::Arg(i),
            LaunchValue::Const(c) => Extent::Const(c),
        };
        TensorMap {
            buffer: spec.buffer,
            dtype: spec.dtype.name().to_string(),
            rows: extent(spec.rows),
            cols: extent(spec.cols),
            stride: extent(spec.stride),
            box_rows: spec.box_rows,
            box_cols: spec.box_cols,
            swizzle_bytes: spec.swizzle_bytes,
            stacked: spec.stacked,
        }
    }

    fn spec(&self) -> Result<TensorMapSpec, String> {
        let value = |e: Extent| match e {
            Extent::Arg(i) => LaunchValue::Arg(i),
            Extent::Const(c) => LaunchValue::Const(c),
        };
        Ok(TensorMapSpec {
            buffer: self.buffer,
            dtype: parse_dtype(&self.dtype)?,
            rows: value(self.rows),
            cols: value(self.cols),
            stride: value(self.stride),
            box_rows: self.box_rows,
            box_cols: self.box_cols,
            swizzle_bytes: self.swizzle_bytes,
            stacked: self.stacked,
        })
    }
}

fn parse_dtype(name: &str) -> Result<DType, String> {
    DType::parse(name).ok_or_else(|| format!("unknown dtype '{name}'"))
}

const BUILTINS: [(MslBuiltin, &str); 5] = [
    (
        MslBuiltin::ThreadgroupPositionInGrid,
        "threadgroup_position_in_grid",
    ),
    (MslBuiltin::ThreadgroupsPerGrid, "threadgroups_per_grid"),
    (
        MslBuiltin::ThreadIndexInThreadgroup,
        "thread_index_in_threadgroup",
    ),
    (MslBuiltin::ThreadIndexInSimdgroup, "thread_index_in_simdgroup"),
    (
        MslBuiltin::SimdgroupIndexInThreadgroup,
        "simdgroup_index_in_threadgroup",
    ),
];

fn builtin_name(b: MslBuiltin) -> &'static str {
    BUILTINS.iter().find(|(x, _)| *x == b).map_or("", |(_, n)| n)
}

pub fn msl_version_name(v: MslVersion) -> &'static str {
    match v {
        MslVersion::V3_1 => "3.1",
        MslVersion::V3_2 => "3.2",
        MslVersion::V4_0 => "4.0",
    }
}

fn msl_version(name: &str) -> Result<MslVersion, String> {
    match name {
        "3.1" => Ok(MslVersion::V3_1),
        "3.2" => Ok(MslVersion::V3_2),
        "4.0" => Ok(MslVersion::V4_0),
        other => Err(format!("unknown MSL version '{other}' (3.1, 3.2 or 4.0)")),
    }
}

/// `(first line, file, line)` runs with the kernel file's name only, so an
/// artifact does not record the folders of the machine that built it.
fn line_table(locs: &[(u32, Loc)]) -> Vec<(u32, String, u32)> {
    locs.iter()
        .map(|(first, loc)| {
            let file = std::path::Path::new(&*loc.file)
                .file_name()
                .map_or_else(|| loc.file.to_string(), |n| n.to_string_lossy().into_owned());
            (*first, file, loc.line)
        })
        .collect()
}

fn line_locs(table: &[(u32, String, u32)]) -> Vec<(u32, Loc)> {
    table
        .iter()
        .map(|(first, file, line)| {
            (
                *first,
                Loc {
                    file: Arc::from(file.as_str()),
                    line: *line,
                },
            )
        })
        .collect()
}

impl Manifest {
    /// The MSL entry parameters and line table of `kernel`.
    pub fn msl_parts(kernel: &MslKernel) -> (Vec<EntryParameter>, Vec<(u32, String, u32)>) {
        let params = kernel
            .params
            .iter()
            .map(|p| match p {
                MslParam::Buffer {
                    msl_type,
                    tile_param_index,
                } => EntryParameter::Buffer {
                    index: *tile_param_index,
                    msl_type: Some(msl_type.clone()),
                },
                MslParam::Scalar {
                    msl_type,
                    tile_param_index,
                } => EntryParameter::Scalar {
                    index: *tile_param_index,
                    msl_type: Some(msl_type.clone()),
                },
                MslParam::Threadgroup { msl_type, bytes } => EntryParameter::Threadgroup {
                    msl_type: msl_type.clone(),
                    bytes: *bytes,
                },
                MslParam::Builtin(b) => EntryParameter::Builtin {
                    builtin: builtin_name(*b).to_string(),
                },
            })
            .collect();
        (params, line_table(&kernel.line_locs))
    }

    /// The CUDA entry parameters and line table of `kernel`.
    pub fn cuda_parts(kernel: &CudaKernel) -> (Vec<EntryParameter>, Vec<(u32, String, u32)>) {
        let params = kernel
            .params
            .iter()
            .map(|p| match p {
                CudaParam::Buffer { tile_param_index, .. } => EntryParameter::Buffer {
                    index: *tile_param_index,
                    msl_type: None,
                },
                CudaParam::Scalar { tile_param_index, .. } => EntryParameter::Scalar {
                    index: *tile_param_index,
                    msl_type: None,
                },
                CudaParam::TensorMap(spec) => EntryParameter::TensorMap(TensorMap::of(spec)),
                CudaParam::TensorMapReady(spec) => EntryParameter::TensorMapReady(TensorMap::of(spec)),
                CudaParam::MinusOne => EntryParameter::MinusOne,
            })
            .collect();
        (params, line_table(&kernel.line_locs))
    }

    /// Parses and checks a manifest's text.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let manifest: Manifest = serde_json::from_str(text).map_err(|e| e.to_string())?;
        manifest.check_format()?;
        let expected = manifest.expected_checksum();
        if manifest.checksum != expected {
            return Err(format!(
                "its checksum is {}, its contents' {expected}: it was changed after it was built; build the \
                 artifact again with `python -m metile compile`",
                if manifest.checksum.is_empty() {
                    "missing"
                } else {
                    &manifest.checksum
                }
            ));
        }
        manifest.check()?;
        Ok(manifest)
    }

    /// The SHA-256 of this manifest's JSON with an empty `checksum`.
    pub fn expected_checksum(&self) -> String {
        let unsigned = Manifest {
            checksum: String::new(),
            ..self.clone()
        };
        let text = serde_json::to_string_pretty(&unsigned).unwrap_or_default();
        super::sha256_hex(text.as_bytes())
    }

    /// The manifest as pretty-printed JSON ending with a newline, its checksum set.
    pub fn to_json(&self) -> String {
        let signed = Manifest {
            checksum: self.expected_checksum(),
            ..self.clone()
        };
        let mut text = serde_json::to_string_pretty(&signed).unwrap_or_default();
        text.push('\n');
        text
    }

    fn check_format(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "the manifest is of format '{}'; this meTile reads '{FORMAT}' (rebuild the artifact with \
                 `python -m metile compile`)",
                self.format
            ));
        }
        Ok(())
    }

    /// Refuses a manifest whose parts disagree.
    pub fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "the manifest is of format '{}'; this meTile reads '{FORMAT}' (rebuild the artifact with \
                 `python -m metile compile`)",
                self.format
            ));
        }
        let target_language = match metile_compiler::Target::parse(&self.target).map(|t| t.kind) {
            Some(metile_compiler::TargetKind::Apple(_)) => Language::Msl,
            Some(metile_compiler::TargetKind::Nvidia { .. }) => Language::Cuda,
            None => return Err(format!("unknown target '{}'", self.target)),
        };
        if target_language != self.language {
            return Err(format!(
                "target '{}' does not compile to {:?}",
                self.target, self.language
            ));
        }
        for (position, p) in self.parameters.iter().enumerate() {
            parse_dtype(&p.dtype).map_err(|e| format!("parameter '{}': {e}", p.name))?;
            if p.index != position {
                return Err(format!(
                    "parameter '{}' has index {}, but is listed at position {position}",
                    p.name, p.index
                ));
            }
            if p.multiple_of == 0 {
                return Err(format!("parameter '{}' is a multiple of 0", p.name));
            }
        }
        let kind_of = |index: usize, wanted: ParamKind, what: &str| -> Result<(), String> {
            match self.parameters.get(index) {
                Some(p) if p.kind == wanted => Ok(()),
                Some(p) => Err(format!(
                    "{what} names parameter '{}', which is a {:?}",
                    p.name, p.kind
                )),
                None => Err(format!(
                    "{what} names parameter {index}; the kernel has {}",
                    self.parameters.len()
                )),
            }
        };
        for e in &self.entry_parameters {
            match e {
                EntryParameter::Buffer { index, .. } => {
                    kind_of(*index, ParamKind::Pointer, "a buffer entry parameter")?;
                }
                EntryParameter::Scalar { index, .. } => {
                    kind_of(*index, ParamKind::Scalar, "a scalar entry parameter")?;
                }
                EntryParameter::Builtin { builtin } => {
                    if !BUILTINS.iter().any(|(_, n)| n == builtin) {
                        return Err(format!("unknown builtin '{builtin}'"));
                    }
                }
                EntryParameter::TensorMap(map) | EntryParameter::TensorMapReady(map) => {
                    kind_of(map.buffer, ParamKind::Pointer, "a tensor map")?;
                    for extent in [map.rows, map.cols, map.stride] {
                        if let Extent::Arg(i) = extent {
                            kind_of(i, ParamKind::Scalar, "a tensor map's extent")?;
                        }
                    }
                    map.spec()?;
                }
                EntryParameter::Threadgroup { .. } | EntryParameter::MinusOne => {}
            }
            let msl_only = matches!(
                e,
                EntryParameter::Threadgroup { .. } | EntryParameter::Builtin { .. }
            );
            let cuda_only = matches!(
                e,
                EntryParameter::MinusOne | EntryParameter::TensorMap(_) | EntryParameter::TensorMapReady(_)
            );
            if (msl_only && self.language != Language::Msl) || (cuda_only && self.language != Language::Cuda)
            {
                return Err(format!(
                    "entry parameter {e:?} does not exist in {:?}",
                    self.language
                ));
            }
        }
        if let Some(rule) = &self.grid {
            self.grid_rule(rule)?;
        }
        Ok(())
    }

    /// The parsed grid rule, its names checked against the integer scalar
    /// parameters and integer constexprs.
    pub fn grid_rule(&self, text: &str) -> Result<GridRule, String> {
        let rule = GridRule::parse(text)?;
        for name in rule.names() {
            let scalar = self.parameters.iter().find(|p| p.name == name);
            let constant = self.constexprs.iter().find(|c| c.name == name);
            match (scalar, constant) {
                (Some(p), _) if p.kind == ParamKind::Scalar && is_integer_dtype(&p.dtype) => {}
                (None, Some(c)) if c.value.is_i64() => {}
                (Some(p), _) => {
                    return Err(format!(
                        "the grid rule reads '{name}', a {} {}; it may read integer scalars and integer constexprs",
                        p.dtype,
                        if p.kind == ParamKind::Pointer { "pointer" } else { "scalar" }
                    ))
                }
                (None, Some(c)) => {
                    return Err(format!(
                        "the grid rule reads the constexpr '{name}' = {}, which is not an integer",
                        c.value
                    ))
                }
                (None, None) => {
                    let names: Vec<&str> = self
                        .parameters
                        .iter()
                        .filter(|p| p.kind == ParamKind::Scalar && is_integer_dtype(&p.dtype))
                        .map(|p| p.name.as_str())
                        .chain(self.constexprs.iter().filter(|c| c.value.is_i64()).map(|c| c.name.as_str()))
                        .collect();
                    return Err(format!(
                        "the grid rule reads '{name}', which is no parameter of {}; it may read {}",
                        self.kernel,
                        if names.is_empty() { "numbers only".to_string() } else { names.join(", ") }
                    ));
                }
            }
        }
        Ok(rule)
    }

    /// The MSL kernel the runtime launches, from this manifest and its source.
    pub fn msl_kernel(&self, source: String) -> Result<MslKernel, String> {
        let params = self
            .entry_parameters
            .iter()
            .map(|e| match e {
                EntryParameter::Buffer { index, msl_type } => Ok(MslParam::Buffer {
                    msl_type: msl_type
                        .clone()
                        .ok_or("a buffer entry parameter has no msl_type")?,
                    tile_param_index: *index,
                }),
                EntryParameter::Scalar { index, msl_type } => Ok(MslParam::Scalar {
                    msl_type: msl_type
                        .clone()
                        .ok_or("a scalar entry parameter has no msl_type")?,
                    tile_param_index: *index,
                }),
                EntryParameter::Threadgroup { msl_type, bytes } => Ok(MslParam::Threadgroup {
                    msl_type: msl_type.clone(),
                    bytes: *bytes,
                }),
                EntryParameter::Builtin { builtin } => BUILTINS
                    .iter()
                    .find(|(_, n)| n == builtin)
                    .map(|(b, _)| MslParam::Builtin(*b))
                    .ok_or_else(|| format!("unknown builtin '{builtin}'")),
                other => Err(format!("entry parameter {other:?} does not exist in MSL")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(MslKernel {
            source,
            kernel_name: self.entry_point.clone(),
            params,
            threads_per_group: self.threads_per_group,
            buffer_alignment: self.buffer_alignment,
            line_locs: line_locs(&self.line_table),
            language_version: msl_version(&self.language_version)?,
        })
    }

    /// The CUDA kernel the runtime launches, from this manifest and its source.
    pub fn cuda_kernel(&self, source: String) -> Result<CudaKernel, String> {
        let dtype_of = |index: usize| -> Result<DType, String> {
            let p = self
                .parameters
                .get(index)
                .ok_or_else(|| format!("no parameter {index}"))?;
            parse_dtype(&p.dtype)
        };
        let params = self
            .entry_parameters
            .iter()
            .map(|e| match e {
                EntryParameter::Buffer { index, .. } => Ok(CudaParam::Buffer {
                    dtype: dtype_of(*index)?,
                    tile_param_index: *index,
                    written: self.parameters.get(*index).is_some_and(|p| p.written),
                }),
                EntryParameter::Scalar { index, .. } => Ok(CudaParam::Scalar {
                    dtype: dtype_of(*index)?,
                    tile_param_index: *index,
                }),
                EntryParameter::MinusOne => Ok(CudaParam::MinusOne),
                EntryParameter::TensorMap(map) => Ok(CudaParam::TensorMap(map.spec()?)),
                EntryParameter::TensorMapReady(map) => Ok(CudaParam::TensorMapReady(map.spec()?)),
                other => Err(format!("entry parameter {other:?} does not exist in CUDA")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(CudaKernel {
            arch: self
                .nvrtc_arch
                .clone()
                .ok_or("a CUDA manifest without nvrtc_arch")?,
            source,
            kernel_name: self.entry_point.clone(),
            params,
            threads_per_group: self.threads_per_group,
            shared_bytes: self.shared_memory_bytes,
            default_shared_bytes: self
                .default_shared_bytes
                .ok_or("a CUDA manifest without default_shared_bytes")?,
            buffer_alignment: self.buffer_alignment,
            repack_operands: self.repack_operands,
            line_locs: line_locs(&self.line_table),
            prints: self.prints,
        })
    }
}

pub fn is_integer_dtype(name: &str) -> bool {
    DType::parse(name).is_some_and(|d| d.is_int())
}
