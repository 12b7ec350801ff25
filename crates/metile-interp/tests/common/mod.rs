//! Shared helpers: typed host buffers, and a runner that executes every kernel twice
//! (lazy values on and off) and insists both modes agree exactly.

#![allow(dead_code)]

use half::{bf16, f16};
use metile_interp::{ExecError, ExecOptions, Executable, KernelArg, ScalarValue};
use metile_ir::fp8::Fp8;
use metile_ir::{DType, Function, Loc};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Bool(Vec<bool>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    /// fp8 codes.
    F8E4M3(Vec<u8>),
    F8E5M2(Vec<u8>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Scalar(ScalarValue),
}

impl Data {
    pub fn arg(&mut self) -> KernelArg {
        fn buf<T>(v: &mut [T], dtype: DType) -> KernelArg {
            KernelArg::Buffer {
                ptr: v.as_mut_ptr() as *mut u8,
                len: v.len(),
                dtype,
            }
        }
        match self {
            Data::Bool(v) => buf(v, DType::Bool),
            Data::I8(v) => buf(v, DType::I8),
            Data::U8(v) => buf(v, DType::U8),
            Data::I16(v) => buf(v, DType::I16),
            Data::U16(v) => buf(v, DType::U16),
            Data::I32(v) => buf(v, DType::I32),
            Data::U32(v) => buf(v, DType::U32),
            Data::I64(v) => buf(v, DType::I64),
            Data::U64(v) => buf(v, DType::U64),
            Data::F8E4M3(v) => buf(v, DType::F8E4M3),
            Data::F8E5M2(v) => buf(v, DType::F8E5M2),
            Data::F16(v) => buf(v, DType::F16),
            Data::BF16(v) => buf(v, DType::BF16),
            Data::F32(v) => buf(v, DType::F32),
            Data::F64(v) => buf(v, DType::F64),
            Data::Scalar(s) => KernelArg::Scalar(*s),
        }
    }

    /// Bit patterns, so NaNs compare equal to themselves.
    pub fn bits(&self) -> Vec<u64> {
        match self {
            Data::Bool(v) => v.iter().map(|&x| u64::from(x)).collect(),
            Data::I8(v) => v.iter().map(|&x| x as u8 as u64).collect(),
            Data::U8(v) | Data::F8E4M3(v) | Data::F8E5M2(v) => v.iter().map(|&x| u64::from(x)).collect(),
            Data::I16(v) => v.iter().map(|&x| x as u16 as u64).collect(),
            Data::U16(v) => v.iter().map(|&x| u64::from(x)).collect(),
            Data::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
            Data::U32(v) => v.iter().map(|&x| u64::from(x)).collect(),
            Data::I64(v) => v.iter().map(|&x| x as u64).collect(),
            Data::U64(v) => v.clone(),
            Data::F16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
            Data::BF16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
            Data::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
            Data::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
            Data::Scalar(_) => vec![],
        }
    }

    pub fn f32s(&self) -> Vec<f32> {
        match self {
            Data::F32(v) => v.clone(),
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            other => other.f64s().iter().map(|&x| x as f32).collect(),
        }
    }

    /// Float elements as f64 (exact for every float dtype).
    pub fn f64s(&self) -> Vec<f64> {
        match self {
            Data::F64(v) => v.clone(),
            Data::F8E4M3(v) => v.iter().map(|&x| f64::from(Fp8::E4M3.decode(x))).collect(),
            Data::F8E5M2(v) => v.iter().map(|&x| f64::from(Fp8::E5M2.decode(x))).collect(),
            Data::F32(_) | Data::F16(_) | Data::BF16(_) => {
                self.f32s().iter().map(|&x| f64::from(x)).collect()
            }
            other => panic!("not a float buffer: {other:?}"),
        }
    }

    pub fn i32s(&self) -> Vec<i32> {
        match self {
            Data::I32(v) => v.clone(),
            other => panic!("not an i32 buffer: {other:?}"),
        }
    }

    /// Integer elements as i64 (a u64 beyond i64 wraps; see [`Data::i128s`]).
    pub fn i64s(&self) -> Vec<i64> {
        self.i128s().iter().map(|&x| x as i64).collect()
    }

    pub fn i128s(&self) -> Vec<i128> {
        match self {
            Data::Bool(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::I8(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::U8(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::I16(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::U16(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::I32(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::U32(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::I64(v) => v.iter().map(|&x| i128::from(x)).collect(),
            Data::U64(v) => v.iter().map(|&x| i128::from(x)).collect(),
            other => panic!("not an integer buffer: {other:?}"),
        }
    }

    /// The elements as f64: floats exactly, integers as `as f64` would.
    pub fn values(&self) -> Vec<f64> {
        match self {
            Data::F64(_)
            | Data::F32(_)
            | Data::F16(_)
            | Data::BF16(_)
            | Data::F8E4M3(_)
            | Data::F8E5M2(_) => self.f64s(),
            _ => self.i128s().iter().map(|&x| x as f64).collect(),
        }
    }

    pub fn bools(&self) -> Vec<bool> {
        match self {
            Data::Bool(v) => v.clone(),
            other => panic!("not a bool buffer: {other:?}"),
        }
    }

    /// A zero-filled buffer of `n` elements of `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Data {
        Data::from_f64(dtype, &vec![0.0; n])
    }

    /// A buffer of `dtype` holding `values` converted the way numpy's `astype` would
    /// for in-range values (fp8: rounded once, as the language converts).
    pub fn from_f64(dtype: DType, values: &[f64]) -> Data {
        let ints = || values.iter().map(|&x| x as i128);
        match dtype {
            DType::Bool => Data::Bool(values.iter().map(|&x| x != 0.0).collect()),
            DType::I8 => Data::I8(ints().map(|x| x as i8).collect()),
            DType::U8 => Data::U8(ints().map(|x| x as u8).collect()),
            DType::I16 => Data::I16(ints().map(|x| x as i16).collect()),
            DType::U16 => Data::U16(ints().map(|x| x as u16).collect()),
            DType::I32 => Data::I32(ints().map(|x| x as i32).collect()),
            DType::U32 => Data::U32(ints().map(|x| x as u32).collect()),
            DType::I64 => Data::I64(ints().map(|x| x as i64).collect()),
            DType::U64 => Data::U64(ints().map(|x| x as u64).collect()),
            DType::F8E4M3 => Data::F8E4M3(values.iter().map(|&x| Fp8::E4M3.encode(x)).collect()),
            DType::F8E5M2 => Data::F8E5M2(values.iter().map(|&x| Fp8::E5M2.encode(x)).collect()),
            DType::F16 => Data::F16(values.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::BF16 => Data::BF16(values.iter().map(|&x| bf16::from_f64(x)).collect()),
            DType::F32 => Data::F32(values.iter().map(|&x| x as f32).collect()),
            DType::F64 => Data::F64(values.to_vec()),
        }
    }
}

pub fn i32s(v: &[i32]) -> Data {
    Data::I32(v.to_vec())
}

pub fn f32s(v: &[f32]) -> Data {
    Data::F32(v.to_vec())
}

pub fn scalar_i32(v: i32) -> Data {
    Data::Scalar(ScalarValue::I32(v))
}

pub fn loc(line: u32) -> Loc {
    Loc {
        file: Arc::from("/home/user/kernels/test_kernel.py"),
        line,
    }
}

fn run_mode(
    f: &Arc<Function>,
    args: &[Data],
    grid: [u32; 3],
    lazy: bool,
) -> (Result<(), ExecError>, Vec<Data>) {
    let exe = Executable::with_options(f.clone(), ExecOptions { lazy_values: lazy }).expect("prepare");
    let mut data = args.to_vec();
    let kargs: Vec<KernelArg> = data.iter_mut().map(Data::arg).collect();
    // SAFETY: every buffer lives in `data` for the whole launch.
    let result = unsafe { exe.launch(&kargs, grid) };
    (result, data)
}

/// Runs `f` with lazy values and dense-only, asserts both agree (results, errors and
/// every buffer, bit for bit), and returns the buffers after the lazy run.
pub fn try_run(f: Function, args: &[Data], grid: [u32; 3]) -> Result<Vec<Data>, ExecError> {
    let f = Arc::new(f);
    let (lazy_result, lazy_data) = run_mode(&f, args, grid, true);
    let (dense_result, dense_data) = run_mode(&f, args, grid, false);
    assert_eq!(
        lazy_result, dense_result,
        "lazy and dense modes disagree on the outcome"
    );
    for (i, (a, b)) in lazy_data.iter().zip(&dense_data).enumerate() {
        assert_eq!(a.bits(), b.bits(), "lazy and dense modes disagree on buffer {i}");
    }
    // The function read back from its text runs the same (docs/ir.md).
    let text = metile_ir::print_function(&f);
    let parsed = metile_ir::parse_function(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        metile_ir::print_function(&parsed),
        text,
        "the text does not read back"
    );
    let (parsed_result, parsed_data) = run_mode(&Arc::new(parsed), args, grid, true);
    assert_eq!(
        parsed_result.as_ref().map_err(|e| e.to_string()),
        lazy_result.as_ref().map_err(|e| e.to_string()),
        "the function read back from its text has another outcome"
    );
    for (i, (a, b)) in lazy_data.iter().zip(&parsed_data).enumerate() {
        assert_eq!(
            a.bits(),
            b.bits(),
            "the function read back from its text disagrees on buffer {i}"
        );
    }
    lazy_result.map(|()| lazy_data)
}

pub fn run(f: Function, args: &[Data], grid: [u32; 3]) -> Vec<Data> {
    match try_run(f, args, grid) {
        Ok(d) => d,
        Err(e) => panic!("launch failed: {e}"),
    }
}

pub fn run1(f: Function, args: &[Data]) -> Vec<Data> {
    run(f, args, [1, 1, 1])
}
