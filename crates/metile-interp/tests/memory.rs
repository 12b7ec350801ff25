//! Loads and stores: masks, `other`, pointer arithmetic, tile loads/stores, bounds
//! errors naming the parameter and the kernel line, and argument checking.

mod common;

use common::*;
use metile_interp::{ExecError, Executable, KernelArg, ScalarValue};
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, Operand, ParamKind};
use std::sync::Arc;

/// `offs = pid * block + arange(block) * step + start`; loads `X[offs]` under
/// `offs < N` (with `other`) and stores to `Out[pid * block + arange]` unmasked.
fn gather_kernel(block: usize, start: i64, step: i64, other: Option<f64>, masked: bool) -> Function {
    let mut b = Builder::new("gather");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(12));
    let pid = b.program_id(0).unwrap();
    let base = b
        .binary(BinaryOp::Mul, pid.into(), Operand::Int(block as i64))
        .unwrap();
    let ar = b.arange(0, block as i64).unwrap();
    let lanes = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
    let scaled = b.binary(BinaryOp::Mul, ar.into(), Operand::Int(step)).unwrap();
    let o1 = b.binary(BinaryOp::Add, scaled.into(), base.into()).unwrap();
    let offs = b.binary(BinaryOp::Add, o1.into(), Operand::Int(start)).unwrap();
    let mask = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
    let p = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
    b.set_loc(loc(13));
    let v = if masked {
        b.load(p.into(), Some(mask.into()), other.map(Operand::Float))
            .unwrap()
    } else {
        b.load(p.into(), None, None).unwrap()
    };
    b.set_loc(loc(14));
    let q = b.binary(BinaryOp::Add, out.into(), lanes.into()).unwrap();
    b.store(q.into(), v.into(), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn masked_loads_read_other_and_skip_masked_lanes() {
    let x: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let out = run(
        gather_kernel(8, 0, 1, Some(-1.0), true),
        &[f32s(&x), Data::zeros(DType::F32, 16), scalar_i32(10)],
        [2, 1, 1],
    );
    let want: Vec<f32> = (0..16).map(|i| if i < 10 { i as f32 } else { -1.0 }).collect();
    assert_eq!(out[1].f32s(), want);
    // Without other, masked-off lanes read 0.
    let out = run(
        gather_kernel(8, 0, 1, None, true),
        &[f32s(&x), Data::zeros(DType::F32, 16), scalar_i32(10)],
        [2, 1, 1],
    );
    assert_eq!(out[1].f32s()[12], 0.0);
}

#[test]
fn strided_and_negative_offsets_gather_elementwise() {
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    let out = run(
        gather_kernel(8, 0, 3, Some(7.0), true),
        &[f32s(&x), Data::zeros(DType::F32, 8), scalar_i32(64)],
        [1, 1, 1],
    );
    assert_eq!(
        out[1].f32s(),
        (0..8).map(|i| (3 * i) as f32 * 0.5).collect::<Vec<_>>()
    );
    // Counting down from 20: offsets 20, 18, ..., 6; mask `offs < 15` drops the first three.
    let out = run(
        gather_kernel(8, 20, -2, Some(-5.0), true),
        &[f32s(&x), Data::zeros(DType::F32, 8), scalar_i32(15)],
        [1, 1, 1],
    );
    assert_eq!(out[1].f32s(), vec![-5.0, -5.0, -5.0, 7.0, 6.0, 5.0, 4.0, 3.0]);
}

#[test]
fn out_of_bounds_load_names_the_parameter_index_and_line() {
    let x = vec![0f32; 10];
    let err = try_run(
        gather_kernel(8, 0, 1, None, false),
        &[f32s(&x), Data::zeros(DType::F32, 16), scalar_i32(10)],
        [2, 1, 1],
    )
    .unwrap_err();
    match &err {
        ExecError::OutOfBounds {
            loc,
            param,
            index,
            len,
        } => {
            assert_eq!(param, "X");
            assert_eq!(*index, 10);
            assert_eq!(*len, 10);
            assert_eq!(loc.line, 13);
        }
        other => panic!("unexpected error {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("test_kernel.py:13"), "{msg}");
    assert!(
        msg.contains("`X`") && msg.contains("10") && msg.contains("[0, 10)"),
        "{msg}"
    );
    // A negative offset is reported as such.
    let err = try_run(
        gather_kernel(4, -3, 1, None, false),
        &[f32s(&x), Data::zeros(DType::F32, 4), scalar_i32(10)],
        [1, 1, 1],
    )
    .unwrap_err();
    assert!(matches!(err, ExecError::OutOfBounds { index: -3, .. }), "{err:?}");
}

#[test]
fn masked_off_lanes_may_point_anywhere() {
    // Offsets run to 2 * 8 - 1 but the mask keeps only in-bounds lanes.
    let x = vec![1f32; 5];
    let out = run(
        gather_kernel(8, 0, 2, Some(9.0), true),
        &[f32s(&x), Data::zeros(DType::F32, 8), scalar_i32(5)],
        [1, 1, 1],
    );
    assert_eq!(out[1].f32s(), vec![1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 9.0, 9.0]);
}

/// Stores `V[arange(n)]` to `Out[arange(n) + shift]` under `arange(n) + shift < limit`.
fn shifted_store(n: usize, shift: i64) -> Function {
    let mut b = Builder::new("shifted_store");
    let v = b.add_param("V", ParamKind::Pointer(DType::I32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let limit = b.add_param("limit", ParamKind::Scalar(DType::I32));
    let ar = b.arange(0, n as i64).unwrap();
    let pv = b.binary(BinaryOp::Add, v.into(), ar.into()).unwrap();
    let vals = b.load(pv.into(), None, None).unwrap();
    let offs = b.binary(BinaryOp::Add, ar.into(), Operand::Int(shift)).unwrap();
    let mask = b.compare(CmpOp::Lt, offs.into(), limit.into()).unwrap();
    let po = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    b.set_loc(loc(40));
    b.store(po.into(), vals.into(), Some(mask.into())).unwrap();
    b.finish().unwrap()
}

#[test]
fn a_failing_store_writes_nothing() {
    let vals: Vec<i32> = (1..=8).collect();
    let out = run1(
        shifted_store(8, 2),
        &[i32s(&vals), Data::zeros(DType::I32, 8), scalar_i32(8)],
    );
    assert_eq!(out[1].i32s(), vec![0, 0, 1, 2, 3, 4, 5, 6]);
    let err = try_run(
        shifted_store(8, 2),
        &[i32s(&vals), Data::zeros(DType::I32, 8), scalar_i32(100)],
        [1, 1, 1],
    )
    .unwrap_err();
    match err {
        ExecError::OutOfBounds {
            param,
            index,
            len,
            loc,
        } => {
            assert_eq!((param.as_str(), index, len, loc.line), ("Out", 8, 8, 40));
        }
        other => panic!("{other:?}"),
    }
    // try_run compared buffers between modes; check one directly that nothing was written.
    let f = Arc::new(shifted_store(8, 2));
    let exe = Executable::new(f).unwrap();
    let mut v = vals.clone();
    let mut o = vec![0i32; 8];
    let args = [
        KernelArg::Buffer {
            ptr: v.as_mut_ptr() as *mut u8,
            len: 8,
            dtype: DType::I32,
        },
        KernelArg::Buffer {
            ptr: o.as_mut_ptr() as *mut u8,
            len: 8,
            dtype: DType::I32,
        },
        KernelArg::Scalar(ScalarValue::I32(100)),
    ];
    assert!(unsafe { exe.launch(&args, [1, 1, 1]) }.is_err());
    assert_eq!(o, vec![0; 8]);
}

/// Copies an `r x c` block at (row, col) of a `stride`-wide matrix `A` into `B` at (0, 0)
/// of a `c`-wide matrix, transposed through registers: B gets A's block as is.
fn tile_copy(r: i64, c: i64) -> Function {
    let mut b = Builder::new("tile_copy");
    let a = b.add_param("A", ParamKind::Pointer(DType::F32));
    let out = b.add_param("B", ParamKind::Pointer(DType::F32));
    let row = b.add_param("row", ParamKind::Scalar(DType::I32));
    let col = b.add_param("col", ParamKind::Scalar(DType::I32));
    let stride = b.add_param("stride", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(50));
    let t = b
        .tile_load(a.into(), row.into(), col.into(), stride.into(), (r, c))
        .unwrap();
    b.set_loc(loc(51));
    b.tile_store(
        out.into(),
        Operand::Int(0),
        Operand::Int(0),
        Operand::Int(c),
        t.into(),
        (r, c),
    )
    .unwrap();
    b.finish().unwrap()
}

#[test]
fn tile_load_and_store_address_row_major_blocks() {
    let a: Vec<f32> = (0..6 * 5).map(|i| i as f32).collect();
    let args = |row, col, stride, out_len| {
        vec![
            f32s(&a),
            Data::zeros(DType::F32, out_len),
            scalar_i32(row),
            scalar_i32(col),
            scalar_i32(stride),
        ]
    };
    let out = run1(tile_copy(2, 3), &args(1, 2, 5, 6));
    assert_eq!(out[1].f32s(), vec![7.0, 8.0, 9.0, 12.0, 13.0, 14.0]);
    // Out of bounds on the last row of the source: names A and line 50.
    let err = try_run(tile_copy(2, 3), &args(5, 3, 5, 6), [1, 1, 1]).unwrap_err();
    match err {
        ExecError::OutOfBounds {
            param,
            index,
            len,
            loc,
        } => assert_eq!((param.as_str(), index, len, loc.line), ("A", 30, 30, 50)),
        other => panic!("{other:?}"),
    }
    // Destination too small: names B and line 51, and writes nothing.
    let err = try_run(tile_copy(2, 3), &args(0, 0, 5, 5), [1, 1, 1]).unwrap_err();
    match err {
        ExecError::OutOfBounds {
            param,
            index,
            len,
            loc,
        } => assert_eq!((param.as_str(), index, len, loc.line), ("B", 5, 5, 51)),
        other => panic!("{other:?}"),
    }
    // A negative column start is out of bounds on the first element.
    let err = try_run(tile_copy(2, 3), &args(0, -1, 5, 6), [1, 1, 1]).unwrap_err();
    assert!(matches!(err, ExecError::OutOfBounds { index: -1, .. }), "{err:?}");
}

#[test]
fn two_dimensional_pointer_tiles_transpose() {
    // out[j * 3 + i] = x[i * 4 + j] for a 3x4 x.
    let mut b = Builder::new("transpose");
    let x = b.add_param("X", ParamKind::Pointer(DType::I64));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I64));
    let i = b.arange(0, 3).unwrap();
    let j = b.arange(0, 4).unwrap();
    let i2 = b.expand_dims(i, 1).unwrap();
    let j2 = b.expand_dims(j, 0).unwrap();
    let i4 = b.binary(BinaryOp::Mul, i2.into(), Operand::Int(4)).unwrap();
    let src = b.binary(BinaryOp::Add, i4.into(), j2.into()).unwrap();
    let j3 = b.binary(BinaryOp::Mul, j2.into(), Operand::Int(3)).unwrap();
    let dst = b.binary(BinaryOp::Add, j3.into(), i2.into()).unwrap();
    let ps = b.binary(BinaryOp::Add, x.into(), src.into()).unwrap();
    let v = b.load(ps.into(), None, None).unwrap();
    let pd = b.binary(BinaryOp::Add, out.into(), dst.into()).unwrap();
    b.store(pd.into(), v.into(), None).unwrap();
    let xs: Vec<i64> = (0..12).map(|v| v * 100).collect();
    let out = run1(b.finish().unwrap(), &[Data::I64(xs), Data::zeros(DType::I64, 12)]);
    assert_eq!(
        out[1].i64s(),
        vec![0, 400, 800, 100, 500, 900, 200, 600, 1000, 300, 700, 1100]
    );
}

#[test]
fn bool_and_half_buffers_round_trip() {
    for d in [DType::Bool, DType::F16, DType::BF16, DType::U32] {
        let mut b = Builder::new("copy");
        let x = b.add_param("X", ParamKind::Pointer(d));
        let out = b.add_param("Out", ParamKind::Pointer(d));
        let ar = b.arange(0, 5).unwrap();
        let p = b.binary(BinaryOp::Add, x.into(), ar.into()).unwrap();
        let v = b.load(p.into(), None, None).unwrap();
        let q = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
        b.store(q.into(), v.into(), None).unwrap();
        let input = Data::from_f64(d, &[1.0, 0.0, 2.5, 1.0, 7.0]);
        let out = run1(b.finish().unwrap(), &[input.clone(), Data::zeros(d, 5)]);
        assert_eq!(out[1].bits(), input.bits(), "{d}");
    }
}

#[test]
fn the_same_buffer_may_be_passed_twice() {
    // In-place: X[i] = X[i] + Y[i] with X and Y the same array.
    let mut b = Builder::new("inplace");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let y = b.add_param("Y", ParamKind::Pointer(DType::F32));
    let ar = b.arange(0, 4).unwrap();
    let px = b.binary(BinaryOp::Add, x.into(), ar.into()).unwrap();
    let py = b.binary(BinaryOp::Add, y.into(), ar.into()).unwrap();
    let a = b.load(px.into(), None, None).unwrap();
    let c = b.load(py.into(), None, None).unwrap();
    let s = b.binary(BinaryOp::Add, a.into(), c.into()).unwrap();
    b.store(px.into(), s.into(), None).unwrap();
    let exe = Executable::new(Arc::new(b.finish().unwrap())).unwrap();
    let mut data = vec![1.0f32, 2.0, 3.0, 4.0];
    let ptr = data.as_mut_ptr() as *mut u8;
    let buf = KernelArg::Buffer {
        ptr,
        len: 4,
        dtype: DType::F32,
    };
    unsafe { exe.launch(&[buf, buf], [1, 1, 1]) }.unwrap();
    assert_eq!(data, vec![2.0, 4.0, 6.0, 8.0]);
}

#[test]
fn bad_arguments_are_reported() {
    let f = Arc::new(gather_kernel(4, 0, 1, None, true));
    let exe = Executable::new(f).unwrap();
    let mut x = vec![0f32; 4];
    let mut o = vec![0f32; 4];
    let bx = KernelArg::Buffer {
        ptr: x.as_mut_ptr() as *mut u8,
        len: 4,
        dtype: DType::F32,
    };
    let bo = KernelArg::Buffer {
        ptr: o.as_mut_ptr() as *mut u8,
        len: 4,
        dtype: DType::F32,
    };
    let n = KernelArg::Scalar(ScalarValue::I32(4));
    let cases: Vec<(Vec<KernelArg>, [u32; 3], &str)> = vec![
        (vec![bx, bo], [1, 1, 1], "takes 3 arguments (X, Out, N), got 2"),
        (
            vec![bx, bo, KernelArg::Scalar(ScalarValue::F32(1.0))],
            [1, 1, 1],
            "`N` must be a i32 scalar, got a f32 scalar",
        ),
        (vec![bx, n, n], [1, 1, 1], "`Out` must be a buffer of f32"),
        (
            vec![bx, bo, bo],
            [1, 1, 1],
            "`N` must be a i32 scalar, got a buffer",
        ),
        (
            vec![
                KernelArg::Buffer {
                    ptr: x.as_mut_ptr() as *mut u8,
                    len: 4,
                    dtype: DType::I32,
                },
                bo,
                n,
            ],
            [1, 1, 1],
            "`X` is a buffer of i32, but the kernel was specialised for f32",
        ),
        (
            vec![
                KernelArg::Buffer {
                    ptr: std::ptr::null_mut(),
                    len: 4,
                    dtype: DType::F32,
                },
                bo,
                n,
            ],
            [1, 1, 1],
            "null pointer",
        ),
        (vec![bx, bo, n], [0, 1, 1], "every extent must be between 1"),
    ];
    for (args, grid, want) in cases {
        let err = unsafe { exe.launch(&args, grid) }.unwrap_err();
        assert!(matches!(err, ExecError::BadArguments(_)), "{err:?}");
        assert!(err.to_string().contains(want), "{err} does not mention {want}");
    }
    // An empty buffer is fine as long as nothing touches it.
    let empty = KernelArg::Buffer {
        ptr: std::ptr::null_mut(),
        len: 0,
        dtype: DType::F32,
    };
    unsafe { exe.launch(&[empty, bo, KernelArg::Scalar(ScalarValue::I32(0))], [1, 1, 1]) }.unwrap();
    assert_eq!(o, vec![0.0; 4]);
}

#[test]
fn a_load_keeps_the_values_it_read_when_the_buffer_is_stored_to_later() {
    // x = X[0..4]; X[0..4] = 0; Out = x + 1: the sum must see the loaded values.
    let mut b = Builder::new("snapshot");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let ar = b.arange(0, 4).unwrap();
    let px = b.binary(BinaryOp::Add, x.into(), ar.into()).unwrap();
    let v = b.load(px.into(), None, None).unwrap();
    let early = b.binary(BinaryOp::Mul, v.into(), Operand::Float(2.0)).unwrap();
    b.store(px.into(), Operand::Float(0.0), None).unwrap();
    let late = b.binary(BinaryOp::Add, v.into(), Operand::Float(1.0)).unwrap();
    let sum = b.binary(BinaryOp::Add, late.into(), early.into()).unwrap();
    let po = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(po.into(), sum.into(), None).unwrap();
    let out = run1(
        b.finish().unwrap(),
        &[f32s(&[1.0, 2.0, 3.0, 4.0]), Data::zeros(DType::F32, 4)],
    );
    assert_eq!(out[0].f32s(), vec![0.0; 4]);
    assert_eq!(out[1].f32s(), vec![4.0, 7.0, 10.0, 13.0]);
}
