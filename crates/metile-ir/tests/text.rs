//! The IR text parsers: functions that use the rarely printed attributes read
//! back to equal functions, and every malformed text is an error at its line
//! and column.

use metile_ir::gpu_ir::*;
use metile_ir::text::{check_gpu_round_trip, check_tile_round_trip};
use metile_ir::{
    parse_function, parse_gpu_function, print_function, print_gpu_function, AtomicOp, BinaryOp, Builder,
    CmpOp, DType, Literal, Loc, MemScope, MemSem, OpKind, Operand, ParamKind, ReduceOp, UnaryOp,
};
use std::sync::Arc;

const I32: GpuType = GpuType::Scalar(DType::I32);
const F32: GpuType = GpuType::Scalar(DType::F32);
const BOOL: GpuType = GpuType::Scalar(DType::Bool);

fn loc(line: u32) -> Loc {
    Loc {
        file: Arc::from("rare.py"),
        line,
    }
}

fn spec(buffer: usize) -> TensorMapSpec {
    TensorMapSpec {
        buffer,
        dtype: DType::F16,
        rows: LaunchValue::Arg(3),
        cols: LaunchValue::Const(-7),
        stride: LaunchValue::Arg(4),
        box_rows: 64,
        box_cols: 32,
        swizzle_bytes: 64,
        stacked: buffer % 2 == 1,
    }
}

fn operand(mn_major: bool) -> WgmmaOperand {
    WgmmaOperand {
        swizzle_bytes: 128,
        lbo: 16,
        sbo: 1024,
        mn_major,
    }
}

/// A GPU function with every attribute the printer writes (not a kernel
/// that verifies: the parser reads what the verifier would refuse too).
fn rare_gpu_function() -> GpuFunction {
    let mut b = GpuBuilder::new("rare kernel", 128);
    let x = b.add_param("X", GpuParamKind::Buffer(DType::F16), 0);
    let n = b.add_param("N", GpuParamKind::Scalar(DType::I32), 2);
    let map = b.add_param("X_tma0", GpuParamKind::TensorMap(spec(0)), 0);
    let ready = b.add_param("X_tma0_ready", GpuParamKind::TensorMapReady(spec(0)), 5);
    let minus = b.add_param("metile_minus_one", GpuParamKind::MinusOne, 0);
    let tg = b.add_threadgroup(DType::F16, 4096, TgPurpose::Scratch);
    let user = b.add_threadgroup(DType::F32, 64, TgPurpose::User);
    let bars = b.add_threadgroup(DType::I64, 2, TgPurpose::Alias(user));
    let acc = b.add_reg(DType::F32, 32);
    let held = b.add_reg(DType::F32, 8);
    b.set_loc(loc(1));
    let mut ints = vec![];
    for builtin in [
        Builtin::ThreadIndex,
        Builtin::SimdLane,
        Builtin::SimdgroupIndex,
        Builtin::ThreadgroupPosition(2),
        Builtin::ThreadgroupsPerGrid(1),
    ] {
        ints.push(b.emit1_at(0, GpuOpKind::Builtin(builtin), [], I32));
    }
    let tid = ints[0];
    let consts: Vec<GpuValue> = [
        Literal::Float(f64::NAN),
        Literal::Float(-f64::NAN),
        Literal::Float(f64::NEG_INFINITY),
        Literal::Float(-0.0),
        Literal::Float(1e38),
        Literal::Float(0.1),
    ]
    .into_iter()
    .map(|l| b.emit1_at(0, GpuOpKind::Const(l), [], F32))
    .collect();
    let yes = b.emit1_at(0, GpuOpKind::Const(Literal::Bool(true)), [], BOOL);
    let big = b.emit1_at(
        0,
        GpuOpKind::Const(Literal::Int(i64::MIN)),
        [],
        GpuType::Scalar(DType::I64),
    );
    b.set_loc(loc(2));
    let v = b.emit1_at(
        0,
        GpuOpKind::MakeVector,
        vec![consts[0], consts[1]],
        GpuType::Vector(DType::F32, 2),
    );
    let lane = b.emit1_at(0, GpuOpKind::Extract { lane: 1 }, [v], F32);
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Xor] {
        b.emit1_at(0, GpuOpKind::SimdReduce(op), [lane], F32);
    }
    b.emit1_at(0, GpuOpKind::Unary(UnaryOp::Rsqrt), [lane], F32);
    b.emit1_at(0, GpuOpKind::Binary(BinaryOp::MulHi), [tid, n], I32);
    b.emit1_at(0, GpuOpKind::Compare(CmpOp::Ne), [tid, n], BOOL);
    b.emit1_at(0, GpuOpKind::Fma, [lane, lane, consts[2]], F32);
    b.emit1_at(0, GpuOpKind::AssumeUniform, [n], I32);
    b.set_loc(loc(3));
    b.emit(
        GpuOpKind::Load {
            width: 4,
            has_mask: true,
            has_other: true,
        },
        vec![x, tid, yes, consts[3]],
        vec![GpuType::Vector(DType::F16, 4)],
    );
    b.emit(
        GpuOpKind::Store {
            width: 2,
            has_mask: true,
        },
        vec![x, tid, v, yes],
        vec![],
    );
    b.emit(
        GpuOpKind::AsyncCopy {
            bytes: 16,
            has_mask: true,
            zero_fill: true,
        },
        vec![tg, tid, x, tid, yes, yes],
        vec![],
    );
    b.emit(GpuOpKind::AsyncCommit, [], vec![]);
    b.emit(GpuOpKind::AsyncWait { pending: 2 }, [], vec![]);
    b.emit(
        GpuOpKind::LdMatrix {
            count: 4,
            trans: true,
        },
        [tg, tid],
        vec![GpuType::Vector(DType::F16, 2); 4],
    );
    b.emit(
        GpuOpKind::Mma(AtomKind::NvidiaMmaM16N8K8Tf32),
        vec![lane; 10],
        vec![F32; 4],
    );
    b.emit(
        GpuOpKind::Mma(AtomKind::NvidiaWgmmaM64K16 { n: 64 }),
        [lane],
        vec![F32],
    );
    b.set_loc(loc(4));
    b.emit(GpuOpKind::MbarrierInit { count: 128 }, [bars, tid], vec![]);
    b.emit(
        GpuOpKind::MbarrierArrive { expect_tx: true },
        [bars, tid, n],
        vec![],
    );
    b.emit(
        GpuOpKind::MbarrierArrive { expect_tx: false },
        [bars, tid],
        vec![],
    );
    b.emit(
        GpuOpKind::TmaLoad,
        vec![tg, tid, map, tid, tid, bars, tid],
        vec![],
    );
    b.emit(
        GpuOpKind::TmaLoad,
        vec![tg, tid, map, tid, tid, bars, tid, tid],
        vec![],
    );
    b.emit(GpuOpKind::MbarrierWait, [bars, tid, ready], vec![]);
    b.emit(GpuOpKind::ProxyFence, [], vec![]);
    b.emit(GpuOpKind::WgmmaFence, [], vec![]);
    b.emit(
        GpuOpKind::Wgmma {
            n: 64,
            a: operand(false),
            b: operand(true),
            acc,
            first: 0,
            accumulate: false,
        },
        [tg, tid, tg, tid],
        vec![],
    );
    b.emit(
        GpuOpKind::WgmmaRegA {
            n: 32,
            b: operand(false),
            acc,
            first: 16,
            a: held,
            a_first: 4,
        },
        [tg, tid],
        vec![],
    );
    b.emit(GpuOpKind::WgmmaCommit, [], vec![]);
    b.emit(
        GpuOpKind::WgmmaWait {
            pending: 1,
            acc,
            count: 32,
            held: Some((held, 4, 4)),
        },
        [],
        vec![],
    );
    b.emit(
        GpuOpKind::WgmmaWait {
            pending: 0,
            acc,
            count: 16,
            held: None,
        },
        [],
        vec![],
    );
    b.set_loc(loc(5));
    b.emit(GpuOpKind::AtomicAdd, [user, tid, tid], vec![I32]);
    b.emit(
        GpuOpKind::Atomic {
            op: AtomicOp::Add,
            sem: MemSem::AcqRel,
            scope: MemScope::Sys,
            has_mask: true,
        },
        [x, tid, lane, yes],
        vec![F32],
    );
    b.emit(
        GpuOpKind::Atomic {
            op: AtomicOp::Cas,
            sem: MemSem::Relaxed,
            scope: MemScope::Cta,
            has_mask: false,
        },
        [x, tid, tid, tid],
        vec![I32],
    );
    b.emit(GpuOpKind::RegWrite { reg: acc, index: 3 }, [lane], vec![]);
    b.emit(GpuOpKind::RegRead { reg: held, index: 7 }, [], vec![F32]);
    b.emit(
        GpuOpKind::Print {
            pieces: vec!["pid (".into(), "\"quoted\" \\ ".into(), "\n".into()],
            hex_from: Some(1),
        },
        [tid, big],
        vec![],
    );
    b.emit(
        GpuOpKind::Assert {
            message: "x < \"N\"".into(),
        },
        [yes],
        vec![],
    );
    b.emit(GpuOpKind::Barrier, [], vec![]);
    b.emit(GpuOpKind::DeviceBarrier, [], vec![]);
    b.emit(GpuOpKind::Cast, [minus], vec![F32]);
    b.set_loc(loc(6));
    let iv = b.push_block(&[I32])[0];
    b.emit(GpuOpKind::Select, [yes, iv, tid], vec![I32]);
    let body = b.pop_block();
    b.emit_region_op(GpuOpKind::For, [ints[1], n, ints[2]], vec![body]);
    b.set_loc(loc(7));
    b.push_block(&[]);
    b.emit(GpuOpKind::Condition, [yes], vec![]);
    let cond = b.pop_block();
    b.push_block(&[]);
    b.emit(GpuOpKind::Barrier, [], vec![]);
    let body = b.pop_block();
    b.emit_region_op(GpuOpKind::While, [], vec![cond, body]);
    b.set_loc(loc(8));
    for with_else in [false, true] {
        b.push_block(&[]);
        b.emit(GpuOpKind::Barrier, [], vec![]);
        let then_b = b.pop_block();
        b.push_block(&[]);
        if with_else {
            b.emit(GpuOpKind::DeviceBarrier, [], vec![]);
        }
        let else_b = b.pop_block();
        b.emit_region_op(GpuOpKind::If, [yes], vec![then_b, else_b]);
    }
    b.finish()
}

#[test]
fn a_gpu_function_with_every_attribute_reads_back_equal() {
    let f = rare_gpu_function();
    check_gpu_round_trip(&f).unwrap_or_else(|e| panic!("{e}"));
    let text = print_gpu_function(&f);
    let parsed = parse_gpu_function(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // Debug text, not `==`: a NaN literal is not equal to itself.
    assert_eq!(format!("{parsed:?}"), format!("{f:?}"), "{text}");
    for expected in [
        "%2: ptr<f16, tensor_map> /*X_tma0*/ {tensor_map buffer=0 dtype=f16 rows=arg3 cols=-7 stride=arg4 box=64x32 swizzle=64}",
        "/*X_tma0_ready*/ {tensor_map_ready buffer=0 dtype=f16 rows=arg3 cols=-7 stride=arg4 box=64x32 swizzle=64} {arg 5}",
        "/*N*/ {arg 2}",
        "/*metile_minus_one*/ {minus_one}",
        "async_copy.b16 masked zero_fill",
        "wgmma.m64n64k16 acc=r0[0] a={swizzle=128 lbo=16 sbo=1024 k_major} b={swizzle=128 lbo=16 sbo=1024 mn_major}",
        "wgmma.m64n32k8.tf32.rs acc=r0[16] a=r1[4] b={swizzle=128 lbo=16 sbo=1024 k_major}",
        "wgmma_wait.1 acc=r0 count=32 held=r1[4..8]",
        "mma.wgmma.m64k16 n=64",
        "const NaN(0xfff8000000000000) : f32",
        "}  // rare.py:6",
    ] {
        assert!(text.contains(expected), "no `{expected}` in\n{text}");
    }
}

/// A Tile IR function with strings, odd constexprs, every atomic, and
/// literals that need care.
fn rare_tile_function() -> metile_ir::Function {
    let mut b = Builder::new("rare");
    b.add_constexpr("PAIR", "(1, 2)");
    b.add_constexpr("EMPTY", "");
    b.add_constexpr("QUOTED", "'a \"b\"'");
    b.add_constexpr("DTYPE", "metile.float16");
    b.add_constexpr("PADDED", " 3 ");
    let x = b.add_param("X", ParamKind::Pointer(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_param_divisibility(n, 16);
    b.set_loc(loc(1));
    let ar = b.arange(-4, 12).unwrap();
    let p = b
        .binary(BinaryOp::Add, Operand::Value(x), Operand::Value(ar))
        .unwrap();
    for op in [
        AtomicOp::Add,
        AtomicOp::Max,
        AtomicOp::Min,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Xchg,
    ] {
        let flags = metile_ir::AtomicFlags {
            sem: MemSem::Release,
            scope: MemScope::Sys,
        };
        b.atomic(op, Operand::Value(p), None, Operand::Int(1), None, flags)
            .unwrap();
    }
    b.device_print("no: \"q\" \\", &[Operand::Value(ar)], false)
        .unwrap();
    let positive = b.compare(CmpOp::Gt, Operand::Value(n), Operand::Int(0)).unwrap();
    b.assume_true(Operand::Value(positive)).unwrap();
    let mut f = b.finish().unwrap();
    // Strings the builder refuses still print and read back.
    f.walk(&mut |_| {});
    if let Some(op) = f
        .body
        .ops
        .iter_mut()
        .find(|o| matches!(o.kind, OpKind::Print { .. }))
    {
        op.kind = OpKind::Print {
            prefix: "tab\t \u{1F600} \u{7f}".into(),
            hex: true,
        };
    }
    f
}

#[test]
fn a_tile_function_with_odd_text_reads_back_equal() {
    let f = rare_tile_function();
    check_tile_round_trip(&f).unwrap_or_else(|e| panic!("{e}"));
    let text = print_function(&f);
    assert!(
        text.contains(" = cmp_gt ") && text.contains("  assume_true %"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"constexprs {PAIR="(1, 2)", EMPTY="", QUOTED="'a \"b\"'", DTYPE=metile.float16, PADDED=" 3 "}"#
        ),
        "{text}"
    );
    let parsed = parse_function(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(format!("{parsed:?}"), format!("{f:?}"), "{text}");
}

#[test]
fn literals_keep_their_kind_and_bits() {
    for (literal, ty) in [
        ("-0.0", "f32"),
        ("NaN", "f32"),
        ("-inf", "f64"),
        ("NaN(0xfff8000000000000)", "f32"),
        ("NaN(0x7ff0000000000001)", "f64"),
        ("1e-7", "f32"),
        ("9223372036854775807", "i64"),
        ("-9223372036854775808", "i64"),
        ("true", "bool"),
        ("3", "f32"),
    ] {
        let text = format!("tile.func @k() {{\n  %0 = constant {literal} : {ty}  // k.py:1\n}}\n");
        let f = parse_function(&text).unwrap_or_else(|e| panic!("{literal}: {e}"));
        assert_eq!(print_function(&f), text);
    }
}

/// Every (error, expected message) pair that differs, all reported at once.
fn expect_all<'a>(results: impl Iterator<Item = (String, &'a str)>) {
    let wrong: Vec<String> = results
        .filter(|(got, expected)| got != expected)
        .map(|(got, expected)| format!("expected {expected:?}\n     got {got:?}"))
        .collect();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

fn tile_error(body: &str) -> String {
    let text = format!("tile.func @k(%0: ptr<f32> /*X*/, %1: i32 /*N*/) {{\n{body}\n}}\n");
    parse_function(&text).map_or_else(|e| e.to_string(), |_| "parsed".into())
}

#[test]
fn malformed_tile_ir_is_an_error_at_its_line_and_column() {
    let cases = [
        (
            "  %2 = frobnicate %1 : i32  // k.py:1",
            "2:8: unknown Tile IR op `frobnicate`",
        ),
        (
            "  %2 = neg %7 : i32  // k.py:1",
            "2:12: value %7 is used before it is defined",
        ),
        ("  %1 = neg %1 : i32  // k.py:1", "2:3: value %1 is defined twice"),
        (
            "  %2 = neg %1 : i33  // k.py:1",
            "2:17: unknown element type `i33`",
        ),
        ("  %2 = neg %1 : i32", "3:1: expected `//`, found `}`"),
        (
            "  %2 = neg %1 : i32  // k.py",
            "2:24: expected a location `file:line`, found `k.py`",
        ),
        ("  %2 = neg %1  // k.py:1", "2:16: expected `:`, found `/`"),
        (
            "  %2 = neg %1 : i32[65536,65536]  // k.py:1",
            "2:20: a tile of more than 2147483648 elements",
        ),
        (
            "  %99999999 = neg %1 : i32  // k.py:1",
            "2:4: value %99999999 is numbered beyond 1048576",
        ),
        (
            "  %2 = constant 1x : i32  // k.py:1",
            "2:17: expected a literal, found `1x`",
        ),
        ("  print \"open  // k.py:1", "2:9: unterminated string"),
        ("  print \"\\q\" %1  // k.py:1", "2:10: unknown escape `\\q`"),
        (
            "  print \"\\u{110000}\" %1  // k.py:1",
            "2:10: bad `\\u{..}` escape",
        ),
        (
            "  %2 = reduce_sum axis=x %1 : i32  // k.py:1",
            "2:24: expected axis (an unsigned number in range), found `x`",
        ),
        (
            "  %2 = atomic_add eventually gpu %0, %1 : i32  // k.py:1",
            "2:19: unknown memory order `eventually`",
        ),
        (
            "  %2 = atomic_add relaxed planet %0, %1 : i32  // k.py:1",
            "2:27: unknown memory scope `planet`",
        ),
        (
            "  %2 = tile_swizzle spiral block=4 %1, %1 : i32, i32  // k.py:1",
            "2:21: unknown swizzle pattern `spiral`",
        ),
        (
            "  %2 = assume sometimes=4 %1 : i32  // k.py:1",
            "2:15: unknown fact `sometimes`",
        ),
        (
            "  %2 = tile_load [4] %0, %1, %1, %1 : f32[4]  // k.py:1",
            "2:18: expected `[rows,cols]`",
        ),
        (
            "  %2 = if %1 : i32 {\n    yield %1  // k.py:2\n  } do {\n  }  // k.py:3",
            "4:5: expected `//`, found `do`",
        ),
        (
            "  %2 = program_id 300 : i32  // k.py:1",
            "2:19: expected an axis (an unsigned number in range), found `300`",
        ),
    ];
    expect_all(cases.iter().map(|(body, expected)| (tile_error(body), *expected)));
    let header_cases = [
        ("", "1:1: expected `tile.func`, found the end of the text"),
        ("tile.func @(", "1:12: expected the function's name after `@`"),
        (
            "tile.func @k(%0: f32[4] /*X*/) {\n}\n",
            "1:18: a parameter cannot have type f32[4]",
        ),
        ("tile.func @k(%0: i32 X) {\n}\n", "1:22: expected `/*`, found `X`"),
        (
            "tile.func @k(%0: i32 /*X) {\n}\n",
            "1:24: unterminated `/*` comment",
        ),
        (
            "tile.func @k() constexprs {=1} {\n}\n",
            "1:28: expected a constexpr name",
        ),
        ("tile.func @k() {\n", "2:1: expected `}` closing a block"),
        (
            "tile.func @k() {\n}\n}\n",
            "3:1: text after the end of the function",
        ),
    ];
    expect_all(header_cases.iter().map(|(text, expected)| {
        let got = parse_function(text).map_or_else(|e| e.to_string(), |_| "parsed".into());
        (got, *expected)
    }));
}

fn gpu_error(body: &str) -> String {
    let text = format!("gpu.func @k(%0: ptr<f32, device> /*X*/, %1: i32 /*N*/) threads 64 {{\n  reg r0: f32[4]\n{body}\n}}\n");
    parse_gpu_function(&text).map_or_else(|e| e.to_string(), |_| "parsed".into())
}

#[test]
fn malformed_gpu_ir_is_an_error_at_its_line_and_column() {
    let cases = [
        (
            "  %2 = builtin warp_id : i32  // k.py:1",
            "3:16: unknown builtin `warp_id`",
        ),
        (
            "  %2 = reg_read r1[0] : f32  // k.py:1",
            "3:17: register array r1 is not declared",
        ),
        (
            "  %2 = reg_read x1[0] : f32  // k.py:1",
            "3:17: expected a register array `rN`, found `x1`",
        ),
        (
            "  %2 = load %0, %1 : f32x  // k.py:1",
            "3:22: unknown type `f32x`",
        ),
        (
            "  %2 = load %0, %1 : f32x999  // k.py:1",
            "3:22: bad vector width in `f32x999`",
        ),
        (
            "  %2 = load %0, %1 : ptr<f32, far>  // k.py:1",
            "3:31: unknown memory space `far`",
        ),
        (
            "  %2 = warp_vote %1 : i32  // k.py:1",
            "3:8: unknown GPU IR op `warp_vote`",
        ),
        (
            "  %2 = mma.m8n8k4 %1 : f32  // k.py:1",
            "3:8: unknown GPU IR op `mma.m8n8k4`",
        ),
        (
            "  wgmma.m64n64k16 acc=r0[0] a={swizzle=128 lbo=16 sbo=1024 diagonal} b={} %0  // k.py:1",
            "3:60: expected `k_major`, found `diagonal`",
        ),
        (
            "  wgmma_wait.0 acc=r0 count=4 held=r0[3..1]  // k.py:1",
            "3:42: the held range ends before it starts",
        ),
        (
            "  for %2 = %1 to %1 step %1 {\n    %2 = neg %1 : i32  // k.py:1\n  }  // k.py:1",
            "4:5: value %2 is defined twice",
        ),
        (
            "  while {\n  } else {\n  }  // k.py:1",
            "4:5: expected `do`, found `else`",
        ),
        (
            "  print [\"a\", 1] %1  // k.py:1",
            "3:15: expected `\"`, found `1`",
        ),
    ];
    expect_all(cases.iter().map(|(body, expected)| (gpu_error(body), *expected)));
    let header_cases = [
        ("gpu.func @k() {\n}\n", "1:15: expected `threads`, found `{`"),
        ("gpu.func @k(%0: f32x4 /*X*/) threads 4 {\n}\n", "1:17: a parameter cannot have type f32x4"),
        ("gpu.func @k(%0: i32 /*X*/ {warp}) threads 4 {\n}\n", "1:28: unknown parameter kind `warp`"),
        (
            "gpu.func @k(%0: i32 /*X*/ {tensor_map_ready buffer=0 dtype=f16 rows=arg1 cols=x stride=1 box=8x8 swizzle=32}) threads 4 {\n}\n",
            "1:79: expected a constant (an integer), found `x`",
        ),
        (
            "gpu.func @k(%0: i32 /*X*/ {tensor_map_ready buffer=0 dtype=f16 rows=arg1 cols=1 stride=1 box=8by8 swizzle=32}) threads 4 {\n}\n",
            "1:94: expected a box `ROWSxCOLS`, found `8by8`",
        ),
        ("gpu.func @k() threads 4 {\n  threadgroup tg0 %0 = f32[4] /*spare, 16 bytes*/\n}\n", "2:31: unknown threadgroup purpose `spare`"),
        ("gpu.func @k() threads 4 {\n  reg r1: f32[4]\n}\n", "2:7: expected register array r0"),
    ];
    expect_all(header_cases.iter().map(|(text, expected)| {
        let got = parse_gpu_function(text).map_or_else(|e| e.to_string(), |_| "parsed".into());
        (got, *expected)
    }));
}
