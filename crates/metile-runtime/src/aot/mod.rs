//! Ahead-of-time artifacts: a kernel specialised and compiled once for a
//! target (`python -m metile compile`), written as its MSL or CUDA C++ source,
//! a C header and a JSON manifest, then loaded and launched from Rust without
//! Python or the compiler ([`Artifact`]). `docs/aot.md` describes the files.
//!
//! The source is what a launch from Python compiles for the same
//! specialisation: [`build`] runs the backends' own emit functions. Loading
//! checks the manifest and the source's SHA-256, and every launch checks its
//! arguments against the manifest, so a stale or edited artifact is refused,
//! never run with the wrong arguments.

pub mod grid;
mod header;
pub mod manifest;

pub use grid::GridRule;
pub use manifest::{Constexpr, EntryParameter, FileRef, Language, Manifest, ParamKind, Parameter};

use crate::device::{check_grid, grid_is_empty, CompileOptions, CompiledKernel, Device, Prebuilt};
use crate::error::RuntimeError;
use crate::msl_emu_device::EMU_LIMITS;
use metile_compiler::{AppleArch, Target, TargetKind};
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::{DType, Function, ParamKind as TileParamKind};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The manifest's file name in an artifact folder.
pub const MANIFEST_FILE: &str = "manifest.json";

/// What to build: the target and the launch choices a Python launch would make.
#[derive(Clone, Debug, Default)]
pub struct BuildRequest<'a> {
    /// `apple`, `apple10` or `sm_XY`.
    pub target: &'a str,
    /// Simdgroups (warps) per threadgroup; `None`: the default rule, as a launch without `num_sgs`.
    pub num_sgs: Option<u32>,
    /// The grid rule to record (checked against the parameters).
    pub grid: Option<&'a str>,
    /// The meTile version recorded in the manifest.
    pub metile_version: &'a str,
    /// Build a cubin with NVRTC where it is installed (CUDA targets).
    pub cubin: bool,
}

/// A built artifact: its manifest and its files (name, bytes), the manifest's included.
#[derive(Clone, Debug)]
pub struct Built {
    pub manifest: Manifest,
    pub files: Vec<(String, Vec<u8>)>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A constexpr's Python `repr` as a JSON value: numbers and booleans as such.
fn constexpr_value(repr: &str) -> serde_json::Value {
    if let Ok(i) = repr.parse::<i64>() {
        return i.into();
    }
    match repr {
        "True" => return true.into(),
        "False" => return false.into(),
        _ => {}
    }
    match repr.parse::<f64>() {
        // A Python float's repr has a '.' or an exponent; digits alone are an
        // int beyond 64 bits, kept exact as text.
        Ok(f)
            if f.is_finite()
                && repr.contains(['.', 'e', 'E'])
                && repr.chars().all(|c| c.is_ascii_digit() || ".eE+-".contains(c)) =>
        {
            serde_json::Number::from_f64(f).map_or_else(|| repr.into(), serde_json::Value::Number)
        }
        _ => repr.into(),
    }
}

fn artifact_error(message: impl Into<String>) -> RuntimeError {
    RuntimeError::Artifact(message.into())
}

/// Compiles the traced, specialised `func` for `request.target` into an artifact.
pub fn build(func: &Function, request: &BuildRequest<'_>) -> Result<Built, RuntimeError> {
    let target = Target::parse(request.target).ok_or_else(|| {
        artifact_error(format!(
            "unknown target '{}'; the targets are {}, and sm_XY for NVIDIA GPUs of compute capability X.Y \
             (sm_80, sm_90, ...)",
            request.target,
            AppleArch::names_text()
        ))
    })?;
    let written = metile_compiler::written_params(func);
    let parameters = func
        .params
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let (kind, dtype) = match p.kind {
                TileParamKind::Pointer(d) => (ParamKind::Pointer, d),
                TileParamKind::Scalar(d) => (ParamKind::Scalar, d),
            };
            Parameter {
                name: p.name.clone(),
                kind,
                dtype: dtype.name().to_string(),
                index,
                written: kind == ParamKind::Pointer && written.get(index).copied().unwrap_or(true),
                multiple_of: p.divisibility.max(1),
            }
        })
        .collect();
    let constexprs = func
        .constexprs
        .iter()
        .map(|(name, repr)| Constexpr {
            name: name.clone(),
            value: constexpr_value(repr),
        })
        .collect();
    let mut manifest = Manifest {
        format: manifest::FORMAT.to_string(),
        kernel: func.name.clone(),
        entry_point: String::new(),
        target: target.arch_name(),
        language: Language::Msl,
        language_version: String::new(),
        nvrtc_arch: None,
        source: FileRef {
            file: String::new(),
            sha256: String::new(),
        },
        binary: None,
        header: String::new(),
        parameters,
        constexprs,
        grid: request.grid.map(str::to_string),
        num_sgs: request.num_sgs,
        threads_per_group: 0,
        shared_memory_bytes: 0,
        buffer_alignment: 1,
        entry_parameters: Vec::new(),
        default_shared_bytes: None,
        repack_operands: false,
        prints: false,
        line_table: Vec::new(),
        metile_version: request.metile_version.to_string(),
        checksum: String::new(),
    };
    let rule = match request.grid {
        Some(text) => Some(manifest.grid_rule(text).map_err(artifact_error)?),
        None => None,
    };
    let mut files = Vec::new();
    let stem = header::c_identifier(&func.name);
    match target.kind {
        TargetKind::Apple(arch) => {
            let options = CompileOptions {
                num_sgs: request.num_sgs,
                passes: Default::default(),
                apple_arch: Some(arch),
            };
            let msl = crate::msl_launch::emit(func, &options, &EMU_LIMITS)?;
            let (entry_parameters, line_table) = Manifest::msl_parts(&msl);
            manifest.entry_point = msl.kernel_name.clone();
            manifest.language_version = manifest::msl_version_name(msl.language_version).to_string();
            manifest.source = FileRef {
                file: crate::msl_launch::source_file_name(&msl.kernel_name),
                sha256: sha256_hex(msl.source.as_bytes()),
            };
            manifest.threads_per_group = msl.threads_per_group;
            manifest.shared_memory_bytes = crate::msl_launch::threadgroup_lengths(&msl).iter().sum();
            manifest.buffer_alignment = msl.buffer_alignment;
            manifest.entry_parameters = entry_parameters;
            manifest.line_table = line_table;
            files.push((manifest.source.file.clone(), msl.source.into_bytes()));
        }
        TargetKind::Nvidia { .. } => {
            let options = CompileOptions {
                num_sgs: request.num_sgs,
                ..Default::default()
            };
            let kernel = crate::cuda::emit(func, &options, &target)?;
            let (entry_parameters, line_table) = Manifest::cuda_parts(&kernel);
            manifest.language = Language::Cuda;
            manifest.entry_point = kernel.kernel_name.clone();
            manifest.language_version = "c++17".to_string();
            manifest.nvrtc_arch = Some(kernel.arch.clone());
            let file = crate::msl_launch::source_file_name(&kernel.kernel_name).replace(".metal", ".cu");
            manifest.source = FileRef {
                file,
                sha256: sha256_hex(kernel.source.as_bytes()),
            };
            manifest.threads_per_group = kernel.threads_per_group;
            manifest.shared_memory_bytes = kernel.shared_bytes;
            manifest.default_shared_bytes = Some(kernel.default_shared_bytes);
            manifest.buffer_alignment = kernel.buffer_alignment;
            manifest.repack_operands = kernel.repack_operands;
            manifest.prints = kernel.prints;
            manifest.entry_parameters = entry_parameters;
            manifest.line_table = line_table;
            if request.cubin {
                if let Some(cubin) = crate::cuda::compile_cubin(&kernel)? {
                    let file = format!("{stem}.cubin");
                    manifest.binary = Some(FileRef {
                        file: file.clone(),
                        sha256: sha256_hex(&cubin),
                    });
                    files.push((file, cubin));
                }
            }
            files.insert(0, (manifest.source.file.clone(), kernel.source.into_bytes()));
        }
    }
    manifest.header = format!("{stem}.h");
    manifest
        .check()
        .map_err(|e| artifact_error(format!("internal error: {e}")))?;
    manifest.checksum = manifest.expected_checksum();
    files.push((
        manifest.header.clone(),
        header::header(&manifest, rule.as_ref()).into_bytes(),
    ));
    files.push((MANIFEST_FILE.to_string(), manifest.to_json().into_bytes()));
    Ok(Built { manifest, files })
}

/// A kernel of an artifact loaded on one device: its name, its ordinal, the kernel.
type LoadedKernel = (String, u32, Arc<dyn CompiledKernel>);

/// An artifact loaded from its folder: checked, ready to launch on any device
/// that runs its language (msl-emu and metal for MSL, cuda for CUDA C++).
pub struct Artifact {
    dir: PathBuf,
    manifest: Manifest,
    source: String,
    binary: Option<Vec<u8>>,
    grid: Option<GridRule>,
    /// Kernels loaded so far, by device name and ordinal.
    loaded: Mutex<Vec<LoadedKernel>>,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("dir", &self.dir)
            .field("kernel", &self.manifest.kernel)
            .field("target", &self.manifest.target)
            .finish()
    }
}

/// A file of the artifact folder, by the name the manifest gives (a plain file
/// name: the manifest cannot send a load elsewhere).
fn read_member(dir: &Path, name: &str) -> Result<Vec<u8>, RuntimeError> {
    let plain = Path::new(name).file_name().is_some_and(|n| n == name) && name != "." && name != "..";
    if !plain {
        return Err(artifact_error(format!(
            "the manifest in {} names the file '{name}', which is not a plain file name",
            dir.display()
        )));
    }
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| artifact_error(format!("cannot read {}: {e}", path.display())))
}

impl Artifact {
    /// Loads the artifact in folder `dir`: its manifest (checked), its source
    /// and any binary (checked against the manifest's SHA-256).
    pub fn load(dir: impl AsRef<Path>) -> Result<Artifact, RuntimeError> {
        let dir = dir.as_ref();
        let text = read_member(dir, MANIFEST_FILE)?;
        let text = String::from_utf8(text)
            .map_err(|_| artifact_error(format!("{} is not UTF-8", dir.join(MANIFEST_FILE).display())))?;
        let manifest = Manifest::parse(&text).map_err(|e| {
            artifact_error(format!("bad manifest {}: {e}", dir.join(MANIFEST_FILE).display()))
        })?;
        let checked = |file: &FileRef| -> Result<Vec<u8>, RuntimeError> {
            let bytes = read_member(dir, &file.file)?;
            let found = sha256_hex(&bytes);
            if found != file.sha256 {
                return Err(artifact_error(format!(
                    "{} does not match the manifest (sha256 {found}, the manifest says {}): the artifact was \
                     changed after it was built; build it again with `python -m metile compile`",
                    dir.join(&file.file).display(),
                    file.sha256
                )));
            }
            Ok(bytes)
        };
        let source = String::from_utf8(checked(&manifest.source)?)
            .map_err(|_| artifact_error(format!("{} is not UTF-8", manifest.source.file)))?;
        let binary = manifest.binary.as_ref().map(checked).transpose()?;
        let grid = match &manifest.grid {
            Some(text) => Some(manifest.grid_rule(text).map_err(artifact_error)?),
            None => None,
        };
        Ok(Artifact {
            dir: dir.to_path_buf(),
            manifest,
            source,
            binary,
            grid,
            loaded: Mutex::new(Vec::new()),
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The kernel's MSL or CUDA C++ source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Refuses arguments that do not match the manifest: their number, each
    /// one's kind and dtype, and the multiples integer scalars were specialised for.
    pub fn check_args(&self, args: &[KernelArg]) -> Result<(), RuntimeError> {
        let m = &self.manifest;
        let signature = || {
            let names: Vec<String> = m
                .parameters
                .iter()
                .map(|p| match p.kind {
                    ParamKind::Pointer => format!("{}: *{}", p.name, p.dtype),
                    ParamKind::Scalar => format!("{}: {}", p.name, p.dtype),
                })
                .collect();
            format!("{}({})", m.kernel, names.join(", "))
        };
        if args.len() != m.parameters.len() {
            return Err(RuntimeError::BadArguments(format!(
                "{} takes {} arguments, {} were given",
                signature(),
                m.parameters.len(),
                args.len()
            )));
        }
        for (p, arg) in m.parameters.iter().zip(args) {
            let wanted =
                DType::parse(&p.dtype).ok_or_else(|| artifact_error(format!("bad dtype {}", p.dtype)))?;
            let fail = |what: String| {
                RuntimeError::BadArguments(format!("{}: argument '{}' {what}", signature(), p.name))
            };
            match (p.kind, arg) {
                (ParamKind::Pointer, KernelArg::Buffer { dtype, .. }) if *dtype != wanted => {
                    return Err(fail(format!(
                        "must be a buffer of {wanted}, got a buffer of {dtype}"
                    )))
                }
                (ParamKind::Pointer, KernelArg::Buffer { .. }) => {}
                (ParamKind::Pointer, KernelArg::Scalar(s)) => {
                    return Err(fail(format!(
                        "must be a buffer of {wanted}, got the scalar {s:?}"
                    )))
                }
                (ParamKind::Scalar, KernelArg::Buffer { dtype, .. }) => {
                    return Err(fail(format!(
                        "must be a {wanted} scalar, got a buffer of {dtype}"
                    )))
                }
                (ParamKind::Scalar, KernelArg::Scalar(s)) if s.dtype() != wanted => {
                    return Err(fail(format!("must be a {wanted} scalar, got {s:?}")))
                }
                (ParamKind::Scalar, KernelArg::Scalar(s)) => {
                    if let Some(v) = integer_value(s) {
                        if p.multiple_of > 1 && v % p.multiple_of as i128 != 0 {
                            return Err(fail(format!(
                                "is {v}, but the artifact was compiled for multiples of {} (the signature's \
                                 {}:{}:{}); build one without the hint for other values",
                                p.multiple_of, p.name, p.dtype, p.multiple_of
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The grid the manifest's rule gives for `args`.
    pub fn grid(&self, args: &[KernelArg]) -> Result<[u32; 3], RuntimeError> {
        let rule = self.grid.as_ref().ok_or_else(|| {
            RuntimeError::InvalidLaunch(format!(
                "the artifact of {} has no grid rule (compile it with --grid, or pass the grid)",
                self.manifest.kernel
            ))
        })?;
        self.check_args(args)?;
        let mut values: HashMap<&str, i64> = HashMap::new();
        for c in &self.manifest.constexprs {
            if let Some(v) = c.value.as_i64() {
                values.insert(&c.name, v);
            }
        }
        for (p, arg) in self.manifest.parameters.iter().zip(args) {
            if let KernelArg::Scalar(s) = arg {
                if let Some(v) = integer_value(s).and_then(|v| i64::try_from(v).ok()) {
                    values.insert(&p.name, v);
                }
            }
        }
        rule.evaluate(&values).map_err(RuntimeError::InvalidLaunch)
    }

    /// The kernel loaded on `device` (compiled by its backend on first use:
    /// msl-emu through its verified cache, cuda from the cubin or with NVRTC).
    pub fn kernel(&self, device: &dyn Device) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let (name, ordinal) = (device.name(), device.ordinal());
        if let Some(k) = self.loaded.lock().ok().and_then(|l| {
            l.iter()
                .find(|(n, o, _)| n == name && *o == ordinal)
                .map(|(_, _, k)| k.clone())
        }) {
            return Ok(k);
        }
        let source = self.source.clone();
        let prebuilt = match self.manifest.language {
            Language::Msl => Prebuilt::Msl(self.manifest.msl_kernel(source).map_err(artifact_error)?),
            Language::Cuda => Prebuilt::Cuda {
                kernel: self.manifest.cuda_kernel(source).map_err(artifact_error)?,
                cubin: self.binary.clone(),
            },
        };
        let kernel = device.load_prebuilt(prebuilt)?;
        if let Ok(mut l) = self.loaded.lock() {
            l.push((name.to_string(), ordinal, kernel.clone()));
        }
        Ok(kernel)
    }

    /// Launches the kernel on `device` over `grid` with `args` (in the
    /// manifest's parameter order), after checking them against the manifest.
    /// On devices with memory of their own (cuda) buffers are device addresses.
    ///
    /// # Safety
    /// Buffer arguments must point to live allocations of the stated length
    /// (on the device, for cuda) that no one else mutates during the launch.
    pub unsafe fn launch(
        &self,
        device: &dyn Device,
        grid: [u32; 3],
        args: &[KernelArg],
    ) -> Result<(), RuntimeError> {
        self.check_args(args)?;
        let kernel = self.kernel(device)?;
        check_grid(grid, kernel.as_ref(), device.name())?;
        if grid_is_empty(grid) {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { crate::launch_plan::launch_alone(kernel.as_ref(), args, grid) }
    }
}

/// An integer scalar's value.
fn integer_value(s: &ScalarValue) -> Option<i128> {
    Some(match *s {
        ScalarValue::I8(v) => v.into(),
        ScalarValue::U8(v) => v.into(),
        ScalarValue::I16(v) => v.into(),
        ScalarValue::U16(v) => v.into(),
        ScalarValue::I32(v) => v.into(),
        ScalarValue::U32(v) => v.into(),
        ScalarValue::I64(v) => v.into(),
        ScalarValue::U64(v) => v.into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constexprs_are_json_numbers_and_booleans_where_they_can_be() {
        assert_eq!(constexpr_value("256"), serde_json::json!(256));
        assert_eq!(constexpr_value("-3"), serde_json::json!(-3));
        assert_eq!(constexpr_value("1e-05"), serde_json::json!(1e-5));
        assert_eq!(constexpr_value("True"), serde_json::json!(true));
        assert_eq!(constexpr_value("'float16'"), serde_json::json!("'float16'"));
        assert_eq!(constexpr_value("inf"), serde_json::json!("inf"));
        assert_eq!(constexpr_value("(1, 2)"), serde_json::json!("(1, 2)"));
        // Beyond 64 bits: kept exact, as its digits.
        let big = "123456789012345678901234567890";
        assert_eq!(constexpr_value(big), serde_json::json!(big));
    }
}
