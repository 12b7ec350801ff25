//! What the MSL lowering refuses, and how: a `CompileError` naming the Tile IR
//! op, the reason (with the figures for resource limits) and the op's source line.

mod common;

use common::{int, loc, v};
use metile_compiler::{compile_msl, CompileError, CompileOptions};
use metile_ir::{BinaryOp, Builder, DType, Function, Operand, ParamKind};

fn compile_err(f: &Function, num_sgs: Option<u32>) -> CompileError {
    let options = CompileOptions {
        num_sgs,
        keep_gpu_ir: false,
        ..Default::default()
    };
    common::round_trips(f.clone());
    match compile_msl(f, &options) {
        Ok(_) => panic!("`{}` compiled but should have been refused", f.name),
        Err(e) => e,
    }
}

#[test]
fn threadgroup_memory_over_32_kib_is_refused_with_the_figures() {
    let mut b = Builder::new("big_shared");
    b.set_threads_per_group(64);
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    b.set_loc(loc(3));
    let s = b.shared(10_000, DType::F32).unwrap();
    b.set_loc(loc(4));
    let x = b.load(v(s), None, None).unwrap();
    b.store(v(out), v(x), None).unwrap();
    let e = compile_err(&b.finish().unwrap(), None);
    assert_eq!(e.op, "shared");
    assert_eq!(e.loc.line, 3);
    assert!(
        e.reason.contains("40000 bytes") && e.reason.contains("32768"),
        "{}",
        e.reason
    );
}

#[test]
fn more_than_1024_threads_is_refused_with_the_figures() {
    let mut b = Builder::new("wide");
    b.set_threads_per_group(2048);
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let t = b.thread_id().unwrap();
    let p = b.binary(BinaryOp::Add, v(out), v(t)).unwrap();
    b.store(v(p), v(t), None).unwrap();
    let e = compile_err(&b.finish().unwrap(), None);
    assert!(
        e.reason.contains("2048") && e.reason.contains("1024"),
        "{}",
        e.reason
    );

    let e = compile_err(&common::add(256, DType::F32), Some(64));
    assert!(
        e.reason.contains("num_sgs=64") && e.reason.contains("2048"),
        "{}",
        e.reason
    );
}

#[test]
fn num_sgs_must_match_the_threads_a_kernel_was_traced_for() {
    let mut b = Builder::new("traced64");
    b.set_threads_per_group(64);
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let t = b.thread_id().unwrap();
    let p = b.binary(BinaryOp::Add, v(out), v(t)).unwrap();
    b.store(v(p), v(t), None).unwrap();
    let f = b.finish().unwrap();
    let e = compile_err(&f, Some(4));
    assert!(
        e.reason.contains("128 threads") && e.reason.contains("64 threads"),
        "{}",
        e.reason
    );
    let ok = compile_msl(
        &f,
        &CompileOptions {
            num_sgs: Some(2),
            keep_gpu_ir: false,
            ..Default::default()
        },
    );
    assert_eq!(ok.map(|c| c.kernel.threads_per_group).ok(), Some(64));
}

#[test]
fn a_barrier_inside_simdgroup_role_is_refused_at_its_line() {
    let mut b = Builder::new("role_barrier");
    b.set_threads_per_group(128);
    let _out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    b.push_block(&[]);
    b.set_loc(loc(9));
    b.barrier();
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.set_loc(loc(8));
    b.finish_simdgroup_role(0, 2, body).unwrap();
    let e = compile_err(&b.finish().unwrap(), None);
    assert_eq!(e.op, "barrier");
    assert_eq!(e.loc.line, 9);
    assert!(e.reason.contains("simdgroup_role"), "{}", e.reason);
}

#[test]
fn choosing_between_two_buffers_at_run_time_is_refused() {
    // `p = X if flag else Y`: the pointer's buffer is not known at compile time.
    let mut b = Builder::new("two_buffers");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let y = b.add_param("Y", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let flag = b.add_param("Flag", ParamKind::Scalar(DType::Bool));
    let ptr_type = b.ty(x).clone();
    let mut blocks = vec![];
    for p in [x, y] {
        b.push_block(&[]);
        b.yield_values(&[p]);
        blocks.push(b.pop_block().unwrap());
    }
    let else_block = blocks.pop().unwrap();
    let then_block = blocks.pop().unwrap();
    b.set_loc(loc(6));
    let p = b.finish_if(flag, then_block, else_block, vec![ptr_type])[0];
    b.set_loc(loc(7));
    let val = b.load(v(p), None, None).unwrap();
    b.store(v(out), v(val), None).unwrap();
    let e = compile_err(&b.finish().unwrap(), None);
    assert_eq!(e.op, "if");
    assert_eq!(e.loc.line, 6);
    assert!(e.reason.contains("different buffers"), "{}", e.reason);
}

#[test]
fn a_tile_too_big_for_registers_is_refused_with_advice() {
    let mut b = Builder::new("huge");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let ar = b.arange(0, 1 << 20).unwrap();
    let p = b.binary(BinaryOp::Add, v(x), v(ar)).unwrap();
    b.set_loc(loc(5));
    let t = b.load(v(p), None, None).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(ar)).unwrap();
    let t2 = b.binary(BinaryOp::Mul, v(t), int(2)).unwrap();
    b.store(v(po), v(t2), None).unwrap();
    let e = compile_err(&b.finish().unwrap(), Some(1));
    assert_eq!(e.op, "load");
    assert_eq!(e.loc.line, 5);
    assert!(
        e.reason.contains("registers per thread") && e.reason.contains("num_sgs"),
        "{}",
        e.reason
    );
}

#[test]
fn a_role_without_simdgroups_is_refused() {
    // 32 threads: one simdgroup, so role 1 of 2 would never run.
    let mut b = Builder::new("empty_role");
    b.set_threads_per_group(32);
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    b.push_block(&[]);
    b.store(v(out), Operand::Float(1.0), None).unwrap();
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.set_loc(loc(12));
    b.finish_simdgroup_role(1, 2, body).unwrap();
    let e = compile_err(&b.finish().unwrap(), None);
    assert_eq!(e.op, "simdgroup_role");
    assert_eq!(e.loc.line, 12);
    assert!(
        e.reason.contains("no simdgroup") && e.reason.contains("1 simdgroups"),
        "{}",
        e.reason
    );
}
