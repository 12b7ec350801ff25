//! The passes a filetest can name, by the name of the pipeline stage that
//! runs them, each taking the input text and returning the output text.

use metile_compiler::layout_assign::{self, Assignment, Class};
use metile_compiler::{
    absent_lanes, cuda, dot_tiling, gpu_passes, l2_order, lower, msl, prefetch, relax_precision, sink,
    split_k, tile_passes, Passes, Switches, Target,
};
use metile_ir::gpu_ir::GpuFunction;
use metile_ir::{
    parse_function, parse_gpu_function, print_function, print_gpu_function, verify, verify_gpu, Function,
};
use std::collections::BTreeMap;

/// What a filetest's header says beyond the pass: `; target: sm_90`,
/// `; threads: 128`, `; splits: 2`, `; passes: wgmma=false, tf32=true`.
pub struct Context {
    pub target: Target,
    pub threads: Option<u32>,
    pub splits: u32,
    pub passes: Passes,
}

impl Context {
    pub fn from_header(header: &BTreeMap<String, String>) -> Result<Context, String> {
        let target_name = header.get("target").map_or("apple", String::as_str);
        let target = Target::parse(target_name).ok_or_else(|| format!("unknown target `{target_name}`"))?;
        let number = |key: &str| -> Result<Option<u32>, String> {
            header
                .get(key)
                .map(|v| {
                    v.parse::<u32>()
                        .map_err(|_| format!("`{key}` takes a number, got `{v}`"))
                })
                .transpose()
        };
        let mut passes = Passes::default();
        for switch in header.get("passes").map_or("", String::as_str).split(',') {
            let switch = switch.trim();
            if switch.is_empty() {
                continue;
            }
            let (name, on) = switch
                .split_once('=')
                .and_then(|(n, v)| Some((n.trim(), v.trim().parse::<bool>().ok()?)))
                .ok_or_else(|| format!("`passes` takes `name=true|false`, got `{switch}`"))?;
            if !passes.set(name, on) {
                return Err(format!("unknown pass switch `{name}`"));
            }
        }
        Ok(Context {
            target,
            threads: number("threads")?,
            splits: number("splits")?.unwrap_or(2),
            passes,
        })
    }

    /// The switches in force: the header's, the policy table's for the rest.
    fn switches(&self) -> Switches {
        self.passes.resolve(&self.target)
    }

    fn threads_for(&self, f: &Function) -> Result<u32, String> {
        match self.threads {
            Some(t) => Ok(t),
            None => layout_assign::choose_threads(f, None, &self.target).map_err(|e| e.to_string()),
        }
    }
}

type Run = fn(&str, &Context) -> Result<String, String>;

/// Every pass, by stage name.
pub const PASSES: [(&str, Run); 17] = [
    ("clean_up", |t, _| {
        tile_pass(t, |f| {
            tile_passes::clean_up(f).map(|_| ()).map_err(|e| e.to_string())
        })
    }),
    ("fold_constants", |t, _| {
        tile_pass(t, |f| ran(tile_passes::fold_constants(f)))
    }),
    ("cse", |t, _| tile_pass(t, |f| ran(tile_passes::cse(f)))),
    ("dce", |t, _| tile_pass(t, |f| ran(tile_passes::dce(f)))),
    ("resolve_absent_lanes", |t, _| {
        tile_pass(t, |f| ran(absent_lanes::resolve_absent_lanes(f)))
    }),
    ("l2_order", |t, _| {
        tile_pass(t, |f| ran(l2_order::order_programs(f)))
    }),
    ("prefetch_dot_operands", |t, cx| {
        let keep_transposes = cx.switches().k_major_b;
        tile_pass(t, |f| {
            ran(prefetch::prefetch_dot_operands(
                f,
                &prefetch::Carry::Registers { keep_transposes },
            ))
        })
    }),
    ("prefetch_dot_operands_async", prefetch_async),
    ("relax_precision", |t, _| {
        tile_pass(t, |f| ran(relax_precision::relax_precision(f)))
    }),
    ("split_k", run_split_k),
    ("layout_assign", run_layout_assign),
    ("lower", run_lower),
    ("eliminate_common_subexpressions", |t, cx| {
        gpu_pass(t, cx, |f| ran(gpu_passes::eliminate_common_subexpressions(f)))
    }),
    ("eliminate_dead_code", |t, cx| {
        gpu_pass(t, cx, |f| ran(gpu_passes::eliminate_dead_code(f)))
    }),
    ("sink_to_first_use", |t, cx| {
        gpu_pass(t, cx, |f| ran(sink::sink_to_first_use(f)))
    }),
    ("emit", run_emit),
    ("verify_gpu", run_verify_gpu),
];

/// A pass that reports whether it changed anything ran; the output shows what it did.
fn ran(_changed: bool) -> Result<(), String> {
    Ok(())
}

fn parse_tile(text: &str) -> Result<Function, String> {
    let f = parse_function(text).map_err(|e| format!("input: {e}"))?;
    verify(&f).map_err(|e| format!("the input does not verify: {e}"))?;
    Ok(f)
}

fn parse_gpu(text: &str, cx: &Context) -> Result<GpuFunction, String> {
    let f = parse_gpu_function(text).map_err(|e| format!("input: {e}"))?;
    verify_gpu(&f, cx.target.vendor()).map_err(|e| format!("the input does not verify: {e}"))?;
    Ok(f)
}

/// A Tile IR → Tile IR pass, its output verified.
fn tile_pass(text: &str, pass: impl FnOnce(&mut Function) -> Result<(), String>) -> Result<String, String> {
    let mut f = parse_tile(text)?;
    pass(&mut f)?;
    verify(&f).map_err(|e| format!("the output does not verify: {e}"))?;
    Ok(print_function(&f))
}

/// A GPU IR → GPU IR pass, its output verified.
fn gpu_pass(
    text: &str,
    cx: &Context,
    pass: impl FnOnce(&mut GpuFunction) -> Result<(), String>,
) -> Result<String, String> {
    let mut f = parse_gpu(text, cx)?;
    pass(&mut f)?;
    verify_gpu(&f, cx.target.vendor()).map_err(|e| format!("the output does not verify: {e}"))?;
    Ok(print_gpu_function(&f))
}

/// The asynchronous carry, sized as the compiler sizes it: ring stages of the
/// target's matrix-atom plan, within its threadgroup memory, at most four.
fn prefetch_async(text: &str, cx: &Context) -> Result<String, String> {
    let (target, switches) = (&cx.target, cx.switches());
    let threads = cx.threads_for(&parse_tile(text)?)?;
    tile_pass(text, |f| {
        let stage_bytes = |shape, dtype, held| {
            dot_tiling::ring_stage_bytes((target, &switches, threads as usize), shape, dtype, held)
        };
        let carry = prefetch::Carry::Async {
            stage_bytes: &stage_bytes,
            budget: target.max_threadgroup_bytes,
            max_stages: 4,
        };
        prefetch::prefetch_dot_operands(f, &carry);
        Ok(())
    })
}

/// Both kernels, the partial one first.
fn run_split_k(text: &str, cx: &Context) -> Result<String, String> {
    let f = parse_tile(text)?;
    let split = split_k::split_k(&f, cx.splits).map_err(|e| e.to_string())?;
    Ok(format!(
        "{}\n{}",
        print_function(&split.partial),
        print_function(&split.finish)
    ))
}

/// The function, then each value's layout class in definition order.
fn run_layout_assign(text: &str, cx: &Context) -> Result<String, String> {
    let f = parse_tile(text)?;
    let threads = cx.threads_for(&f)?;
    let a = layout_assign::assign(&f, threads, &cx.target, &cx.switches()).map_err(|e| e.to_string())?;
    let mut out = print_function(&f);
    out.push_str(&format!("layouts threads={threads} {{\n"));
    for p in &f.params {
        out.push_str(&layout_line(&a, p.value));
    }
    f.walk(&mut |op| {
        for r in &op.regions {
            for &arg in &r.args {
                out.push_str(&layout_line(&a, arg));
            }
        }
        for &r in &op.results {
            out.push_str(&layout_line(&a, r));
        }
    });
    out.push_str("}\n");
    Ok(out)
}

fn layout_line(a: &Assignment, v: metile_ir::ValueId) -> String {
    match a.class(v) {
        Class::Uniform => format!("  {v}: uniform\n"),
        Class::Flexible => format!("  {v}: flexible\n"),
        Class::Fixed(id) => format!("  {v}: {}\n", a.layout(id)),
    }
}

fn run_lower(text: &str, cx: &Context) -> Result<String, String> {
    let f = parse_tile(text)?;
    let threads = cx.threads_for(&f)?;
    let gpu = lower::lower(&f, threads, &cx.target, &cx.switches()).map_err(|e| e.to_string())?;
    verify_gpu(&gpu, cx.target.vendor()).map_err(|e| format!("the output does not verify: {e}"))?;
    Ok(print_gpu_function(&gpu))
}

/// MSL for an Apple target, CUDA C++ for an NVIDIA one.
fn run_emit(text: &str, cx: &Context) -> Result<String, String> {
    let gpu = parse_gpu(text, cx)?;
    let target = &cx.target;
    if target.arch_name().starts_with("sm_") {
        Ok(cuda::emit_cuda(&gpu, target, &cx.switches())
            .map_err(|e| e.to_string())?
            .source)
    } else {
        Ok(msl::emit_msl(&gpu).map_err(|e| e.to_string())?.source)
    }
}

/// The GPU IR verifier (which runs after every GPU IR stage) for the target's
/// vendor: `ok`, or its error.
fn run_verify_gpu(text: &str, cx: &Context) -> Result<String, String> {
    let f = parse_gpu_function(text).map_err(|e| format!("input: {e}"))?;
    Ok(match verify_gpu(&f, cx.target.vendor()) {
        Ok(()) => "ok\n".to_string(),
        Err(e) => format!("{e}\n"),
    })
}
