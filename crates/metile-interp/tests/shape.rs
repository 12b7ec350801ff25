//! Shape ops: `permute`, `reshape`, `take` (split) and `join` on lazy and dense
//! tiles of any rank, against index arithmetic written out here; and the
//! verifier's refusals of malformed ones.

mod common;

use common::*;
use metile_ir::{BinaryOp, Builder, DType, Operand, ParamKind, ValueId};

/// `Out[i] = x[i]` for a tile `x` of any shape (stored in row-major order).
fn store_flat(b: &mut Builder, out: ValueId, x: ValueId) {
    let n = b.ty(x).numel() as i64;
    let flat = b.reshape(x.into(), &[n]).unwrap();
    let offs = b.arange(0, n).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    b.store(p.into(), flat.into(), None).unwrap();
}

/// The row-major index of `coords` in `shape`.
fn index(shape: &[usize], coords: &[usize]) -> usize {
    coords.iter().zip(shape).fold(0, |acc, (&c, &d)| acc * d + c)
}

fn coords(shape: &[usize], mut e: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        c[a] = e % shape[a];
        e /= shape[a];
    }
    c
}

#[test]
fn permutes_of_3d_tiles_lazy_and_loaded() {
    let shape = [2usize, 3, 4];
    for dims in [[0usize, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
        for loaded in [false, true] {
            let mut b = Builder::new("permute");
            let x_buf = b.add_param("X", ParamKind::Pointer(DType::I32));
            let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
            // An arange (a lazy affine tile) times 3, or the same values loaded.
            let r = b.arange(0, 24).unwrap();
            let x = if loaded {
                let p = b.binary(BinaryOp::Add, x_buf.into(), r.into()).unwrap();
                b.load(p.into(), None, None).unwrap()
            } else {
                b.binary(BinaryOp::Mul, r.into(), Operand::Int(3)).unwrap()
            };
            let x = b.reshape(x.into(), &[2, 3, 4]).unwrap();
            let dims_i: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            let y = b.permute(x.into(), &dims_i).unwrap();
            store_flat(&mut b, out, y);
            let input: Vec<i32> = (0..24).map(|i| i * 3).collect();
            let got = run1(b.finish().unwrap(), &[i32s(&input), Data::zeros(DType::I32, 24)]);
            let permuted: Vec<usize> = dims.iter().map(|&d| shape[d]).collect();
            let want: Vec<i32> = (0..24)
                .map(|e| {
                    let c = coords(&permuted, e);
                    let mut src = [0usize; 3];
                    for (i, &d) in dims.iter().enumerate() {
                        src[d] = c[i];
                    }
                    input[index(&shape, &src)]
                })
                .collect();
            assert_eq!(got[1].i32s(), want, "dims {dims:?}, loaded {loaded}");
        }
    }
}

#[test]
fn split_takes_the_halves_of_the_last_axis_and_join_puts_them_back() {
    let mut b = Builder::new("split");
    let x_buf = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let r = b.arange(0, 12).unwrap();
    let p = b.binary(BinaryOp::Add, x_buf.into(), r.into()).unwrap();
    let x = b.load(p.into(), None, None).unwrap();
    let x = b.reshape(x.into(), &[2, 3, 2]).unwrap();
    let (even, odd) = b.split(x.into()).unwrap();
    assert_eq!(b.ty(even).shape, vec![2, 3]);
    // [odd, even] joined: the pairs swapped.
    let swapped = b.join(odd.into(), even.into()).unwrap();
    store_flat(&mut b, out, swapped);
    let input: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
    let got = run1(b.finish().unwrap(), &[f32s(&input), Data::zeros(DType::F32, 12)]);
    let want: Vec<f32> = (0..12).map(|i| input[i ^ 1]).collect();
    assert_eq!(got[1].f32s(), want);
}

#[test]
fn a_split_of_two_elements_gives_scalars() {
    let mut b = Builder::new("split2");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let r = b.arange(5, 7).unwrap();
    let (lo, hi) = b.split(r.into()).unwrap();
    assert!(b.ty(lo).is_scalar() && b.ty(hi).is_scalar());
    let v = b.binary(BinaryOp::Mul, lo.into(), Operand::Int(10)).unwrap();
    let v = b.binary(BinaryOp::Add, v.into(), hi.into()).unwrap();
    b.store(out.into(), v.into(), None).unwrap();
    let got = run1(b.finish().unwrap(), &[Data::zeros(DType::I32, 1)]);
    assert_eq!(got[0].i32s(), vec![56]);
}

#[test]
fn malformed_shape_ops_are_refused_by_the_verifier() {
    let build = |edit: &dyn Fn(&mut metile_ir::Op)| {
        let mut b = Builder::new("bad");
        let r = b.arange(0, 8).unwrap();
        let x = b.reshape(r.into(), &[2, 4]).unwrap();
        let y = b.permute(x.into(), &[1, 0]).unwrap();
        let pairs = b.reshape(y.into(), &[4, 2]).unwrap();
        b.split(pairs.into()).unwrap();
        let mut f = b.finish().unwrap();
        metile_ir::verify(&f).unwrap();
        for op in &mut f.body.ops {
            edit(op);
        }
        metile_ir::verify(&f).map_err(|e| e.0)
    };
    let bad_dims = build(&|op| {
        if let metile_ir::OpKind::Permute { dims } = &mut op.kind {
            *dims = vec![1, 1];
        }
    });
    assert!(bad_dims.unwrap_err().contains("dims must be a permutation"));
    let bad_index = build(&|op| {
        if let metile_ir::OpKind::Take { index, .. } = &mut op.kind {
            *index = 2;
        }
    });
    assert!(bad_index.unwrap_err().contains("axis or index out of range"));
}
