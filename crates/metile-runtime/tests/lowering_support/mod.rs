//! Differential testing of the MSL lowering: a kernel built with
//! `metile_ir::Builder` runs on the interpreter (the semantic oracle, `cpu`) and
//! through `compile_msl` + the MSL emulator (`msl-emu`) on the same random
//! inputs; every buffer must agree afterwards (bit-exact for integers and bools,
//! within a tolerance for floats).

#![allow(dead_code)]

use metile_compiler::AppleArch;
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::{Builder, DType, Function, Operand, Type, ValueId};
use metile_runtime::{open_device, CompileOptions, Device};
use std::sync::{Arc, OnceLock};

/// The emulator device, or `None` (and a note) when no suitable clang++ exists.
pub fn emulator() -> Option<Arc<dyn Device>> {
    static DEVICE: OnceLock<Option<Arc<dyn Device>>> = OnceLock::new();
    DEVICE
        .get_or_init(|| match open_device("msl-emu") {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("skipping MSL lowering tests: {e}");
                None
            }
        })
        .clone()
}

/// A deterministic xorshift generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub fn float(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
}

/// A buffer of `len` elements, 16-byte aligned (the kernels' vector accesses
/// rely on the runtime's alignment guarantee).
#[derive(Clone, Debug)]
pub struct Buf {
    pub dtype: DType,
    pub len: usize,
    words: Vec<u128>,
}

impl Buf {
    pub fn zeros(dtype: DType, len: usize) -> Buf {
        Buf {
            dtype,
            len,
            words: vec![0; (len * dtype.size_bytes()).div_ceil(16).max(1)],
        }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: u128 words are plain bytes; the slice stays inside the allocation.
        unsafe {
            std::slice::from_raw_parts(
                self.words.as_ptr().cast::<u8>(),
                self.len * self.dtype.size_bytes(),
            )
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.len * self.dtype.size_bytes();
        // SAFETY: as above, and `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), n) }
    }

    pub fn set(&mut self, i: usize, value: f64) {
        let size = self.dtype.size_bytes();
        let bytes: Vec<u8> = match self.dtype {
            DType::Bool => vec![u8::from(value != 0.0)],
            DType::I8 => (value as i8).to_le_bytes().to_vec(),
            DType::U8 => (value as u8).to_le_bytes().to_vec(),
            DType::I16 => (value as i16).to_le_bytes().to_vec(),
            DType::U16 => (value as u16).to_le_bytes().to_vec(),
            DType::U64 => (value as u64).to_le_bytes().to_vec(),
            DType::F64 => value.to_le_bytes().to_vec(),
            DType::F8E4M3 => vec![metile_ir::fp8::Fp8::E4M3.encode(value)],
            DType::F8E5M2 => vec![metile_ir::fp8::Fp8::E5M2.encode(value)],
            DType::I32 => (value as i32).to_le_bytes().to_vec(),
            DType::U32 => (value as u32).to_le_bytes().to_vec(),
            DType::I64 => (value as i64).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(value).to_bits().to_le_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f64(value).to_bits().to_le_bytes().to_vec(),
            DType::F32 => (value as f32).to_le_bytes().to_vec(),
        };
        self.bytes_mut()[i * size..(i + 1) * size].copy_from_slice(&bytes);
    }

    pub fn get(&self, i: usize) -> f64 {
        let size = self.dtype.size_bytes();
        let b = &self.bytes()[i * size..(i + 1) * size];
        match self.dtype {
            DType::Bool => f64::from(b[0]),
            DType::I8 => f64::from(b[0] as i8),
            DType::U8 => f64::from(b[0]),
            DType::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
            DType::U16 => f64::from(u16::from_le_bytes([b[0], b[1]])),
            DType::U64 => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
            DType::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            DType::F8E4M3 => f64::from(metile_ir::fp8::Fp8::E4M3.decode(b[0])),
            DType::F8E5M2 => f64::from(metile_ir::fp8::Fp8::E5M2.decode(b[0])),
            DType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::U32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
            DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
            DType::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
            DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        }
    }

    /// Random values: floats in `[-2, 2)`, integers in `[-1000, 1000)` (unsigned:
    /// `[0, 2000)`; 8-bit types: their whole range).
    pub fn random(dtype: DType, len: usize, rng: &mut Rng) -> Buf {
        let mut b = Buf::zeros(dtype, len);
        for i in 0..len {
            let v = match dtype {
                DType::Bool => rng.int(0, 2) as f64,
                DType::I32 | DType::I64 => rng.int(-1000, 1000) as f64,
                DType::U32 | DType::U64 => rng.int(0, 2000) as f64,
                DType::I8 => rng.int(-128, 128) as f64,
                DType::U8 => rng.int(0, 256) as f64,
                DType::I16 => rng.int(-1000, 1000) as f64,
                DType::U16 => rng.int(0, 2000) as f64,
                _ => rng.float(-2.0, 2.0),
            };
            b.set(i, v);
        }
        b
    }

    /// Every element set to `value` (a sentinel for outputs).
    pub fn filled(dtype: DType, len: usize, value: f64) -> Buf {
        let mut b = Buf::zeros(dtype, len);
        for i in 0..len {
            b.set(i, value);
        }
        b
    }

    pub fn from_values(dtype: DType, values: &[f64]) -> Buf {
        let mut b = Buf::zeros(dtype, values.len());
        for (i, &v) in values.iter().enumerate() {
            b.set(i, v);
        }
        b
    }
}

/// A launch argument: a buffer (by index into the buffer list) or a scalar.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Buf(usize),
    Scalar(ScalarValue),
}

pub fn i32_arg(v: i32) -> Arg {
    Arg::Scalar(ScalarValue::I32(v))
}

pub fn f32_arg(v: f32) -> Arg {
    Arg::Scalar(ScalarValue::F32(v))
}

fn launch(
    device: &dyn Device,
    f: &Arc<Function>,
    bufs: &mut [Buf],
    args: &[Arg],
    grid: [u32; 3],
    options: &CompileOptions,
) -> Result<(), String> {
    let kernel = device
        .compile(f.clone(), options)
        .map_err(|e| format!("{} compile: {e}", device.name()))?;
    let mut kargs = Vec::with_capacity(args.len());
    for a in args {
        kargs.push(match *a {
            Arg::Scalar(s) => KernelArg::Scalar(s),
            Arg::Buf(i) => {
                let b = &mut bufs[i];
                KernelArg::Buffer {
                    ptr: b.words.as_mut_ptr().cast::<u8>(),
                    len: b.len,
                    dtype: b.dtype,
                }
            }
        });
    }
    // SAFETY: every buffer is a live allocation of the stated length, used only here.
    unsafe { kernel.launch(&kargs, grid) }.map_err(|e| format!("{} launch: {e}", device.name()))
}

/// Tolerances per dtype: (relative, absolute).
fn tolerance(d: DType, scale: f64) -> (f64, f64) {
    match d {
        DType::F32 => (2e-5 * scale, 1e-5 * scale),
        DType::F16 => (2e-3 * scale, 1e-3 * scale),
        DType::BF16 => (1.6e-2 * scale, 1e-2 * scale),
        _ => (0.0, 0.0),
    }
}

fn same(d: DType, got: f64, want: f64, scale: f64) -> bool {
    if !d.is_float() {
        return got == want;
    }
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    let (rtol, atol) = tolerance(d, scale);
    (got - want).abs() <= atol + rtol * want.abs()
}

/// A differential case: the kernel, its buffers and arguments, the grid.
pub struct Case {
    pub func: Function,
    pub bufs: Vec<Buf>,
    pub args: Vec<Arg>,
    pub grid: [u32; 3],
    pub num_sgs: Option<u32>,
    /// The Apple GPU family the emulator's MSL is compiled for (Apple7 when `None`).
    pub apple_arch: Option<AppleArch>,
    /// Multiplies the float tolerances (long reductions, `dot`).
    pub tolerance_scale: f64,
    /// The GEMM passes switched away from the target's defaults.
    pub passes: metile_compiler::Passes,
}

impl Case {
    pub fn new(func: Function, bufs: Vec<Buf>, args: Vec<Arg>, grid: [u32; 3]) -> Case {
        Case {
            func,
            bufs,
            args,
            grid,
            num_sgs: None,
            apple_arch: None,
            tolerance_scale: 1.0,
            passes: metile_compiler::Passes::default(),
        }
    }

    fn options(&self) -> CompileOptions {
        CompileOptions {
            num_sgs: self.num_sgs,
            apple_arch: self.apple_arch,
            passes: self.passes,
        }
    }

    fn msl(&self, f: &Function) -> String {
        let options = metile_compiler::CompileOptions {
            num_sgs: self.num_sgs,
            passes: self.passes,
            ..Default::default()
        };
        match metile_compiler::compile_msl_for(f, &options, self.apple_arch.unwrap_or_default()) {
            Ok(c) => c.kernel.source,
            Err(e) => format!("<compile error: {e}>"),
        }
    }

    pub fn sgs(mut self, n: u32) -> Case {
        self.num_sgs = Some(n);
        self
    }

    pub fn scale(mut self, s: f64) -> Case {
        self.tolerance_scale = s;
        self
    }

    /// The function as it ships: after the Tile IR passes (absent lanes made
    /// explicit, folding, CSE, DCE).
    /// Also checks that the traced and shipped functions, and the GPU IR the
    /// kernel lowers to, read back from their text (docs/ir.md).
    fn shipped(&self) -> Arc<Function> {
        let f = metile_compiler::optimize_tile_ir(self.func.clone()).unwrap_or_else(|e| panic!("{e}"));
        for tile in [&self.func, &f] {
            metile_ir::text::check_tile_round_trip(tile).unwrap_or_else(|e| panic!("{e}"));
        }
        let options = metile_compiler::CompileOptions {
            num_sgs: self.num_sgs,
            passes: self.passes,
            ..Default::default()
        };
        let target = self.apple_arch.unwrap_or_default().target();
        if let Ok(gpu) = metile_compiler::compile_gpu_ir(&f, &options, &target) {
            metile_ir::text::check_gpu_round_trip(&gpu).unwrap_or_else(|e| panic!("{e}"));
        }
        Arc::new(f)
    }

    /// Runs on the emulator only (for behaviour the interpreter models differently).
    pub fn run_emulator(self) -> Option<Vec<Buf>> {
        let emu = emulator()?;
        let f = self.shipped();
        let options = self.options();
        let mut got = self.bufs.clone();
        if let Err(e) = launch(emu.as_ref(), &f, &mut got, &self.args, self.grid, &options) {
            panic!("{e}\nMSL:\n{}", self.msl(&f));
        }
        Some(got)
    }

    /// Runs on both devices and compares every buffer; returns the emulator's buffers.
    pub fn check(self) -> Option<Vec<Buf>> {
        let emu = emulator()?;
        let cpu = open_device("cpu").expect("the cpu device");
        let f = self.shipped();
        let options = self.options();
        let mut want = self.bufs.clone();
        let mut got = self.bufs.clone();
        // The cpu device ignores the Apple family, as the interpreter has no use for it.
        launch(cpu.as_ref(), &f, &mut want, &self.args, self.grid, &options)
            .unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = launch(emu.as_ref(), &f, &mut got, &self.args, self.grid, &options) {
            panic!("{e}\nMSL:\n{}", self.msl(&f));
        }
        for (bi, (g, w)) in got.iter().zip(&want).enumerate() {
            let mut bad = vec![];
            for i in 0..g.len {
                if !same(g.dtype, g.get(i), w.get(i), self.tolerance_scale) {
                    bad.push((i, g.get(i), w.get(i)));
                }
            }
            if !bad.is_empty() {
                panic!(
                    "kernel `{}` buffer {bi} ({}): {} of {} elements differ; first (index, msl-emu, interpreter): {:?}\nMSL:\n{}",
                    f.name,
                    g.dtype,
                    bad.len(),
                    g.len,
                    &bad[..bad.len().min(8)],
                    self.msl(&f)
                );
            }
        }
        Some(got)
    }
}

pub fn msl_of(f: &Function, num_sgs: Option<u32>) -> String {
    msl_for(f, num_sgs, AppleArch::default())
}

/// The MSL of `f` for Apple GPUs of family `arch`.
pub fn msl_for(f: &Function, num_sgs: Option<u32>, arch: AppleArch) -> String {
    let options = metile_compiler::CompileOptions {
        num_sgs,
        keep_gpu_ir: false,
        ..Default::default()
    };
    match metile_compiler::compile_msl_for(f, &options, arch) {
        Ok(c) => c.kernel.source,
        Err(e) => format!("<compile error: {e}>"),
    }
}

// ------------------------------------------------------------ building kernels

/// `for iv in range(start, end, step)` carrying `inits`; `body` returns the
/// yielded values (converted to the carried types).
pub fn for_loop(
    b: &mut Builder,
    (start, end, step): (Operand, Operand, Operand),
    inits: &[ValueId],
    body: impl FnOnce(&mut Builder, ValueId, &[ValueId]) -> Vec<ValueId>,
) -> Vec<ValueId> {
    b.build_for((start, end, step), inits, |b, iv, carried| {
        Ok(body(b, iv, carried))
    })
    .unwrap()
}

/// `if cond` with both branches yielding values of `types`.
pub fn if_else(
    b: &mut Builder,
    cond: Operand,
    types: &[Type],
    then_body: impl FnOnce(&mut Builder) -> Vec<ValueId>,
    else_body: impl FnOnce(&mut Builder) -> Vec<ValueId>,
) -> Vec<ValueId> {
    let c = b.condition(cond).unwrap();
    let mut blocks = vec![];
    for body in [
        Box::new(then_body) as Box<dyn FnOnce(&mut Builder) -> Vec<ValueId>>,
        Box::new(else_body),
    ] {
        b.push_block(&[]);
        let ys = body(b);
        let ys: Vec<ValueId> = ys
            .iter()
            .zip(types)
            .map(|(&y, t)| b.convert_to(y, t).unwrap())
            .collect();
        b.yield_values(&ys);
        blocks.push(b.pop_block().unwrap());
    }
    let else_block = blocks.pop().unwrap();
    let then_block = blocks.pop().unwrap();
    b.finish_if(c, then_block, else_block, types.to_vec())
}

pub fn v(x: ValueId) -> Operand {
    Operand::Value(x)
}

pub fn int(x: i64) -> Operand {
    Operand::Int(x)
}

pub fn float(x: f64) -> Operand {
    Operand::Float(x)
}
