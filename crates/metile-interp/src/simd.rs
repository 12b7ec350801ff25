//! Element-wise loops, compiled twice on x86-64: for the baseline target (SSE2) and
//! for AVX2, picked at run time when the CPU has it. The element function is the
//! same code either way and Rust never contracts `a * b + c` into an FMA, so both
//! versions give bit-identical results; AVX2 only makes the vectors wider.

#[inline(always)]
fn map1_generic<A: Copy, O>(x: &[A], out: &mut [O], f: impl Fn(A) -> O) {
    for (o, &a) in out.iter_mut().zip(x) {
        *o = f(a);
    }
}

#[inline(always)]
fn map2_generic<A: Copy, B: Copy, O>(x: &[A], y: &[B], out: &mut [O], f: impl Fn(A, B) -> O) {
    for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
        *o = f(a, b);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn map1_avx2<A: Copy, O>(x: &[A], out: &mut [O], f: impl Fn(A) -> O) {
    map1_generic(x, out, f)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn map2_avx2<A: Copy, B: Copy, O>(x: &[A], y: &[B], out: &mut [O], f: impl Fn(A, B) -> O) {
    map2_generic(x, y, out, f)
}

#[inline(always)]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[i] = f(x[i])` over the common length.
#[inline(always)]
pub(crate) fn map1<A: Copy, O>(x: &[A], out: &mut [O], f: impl Fn(A) -> O) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { map1_avx2(x, out, f) };
        return;
    }
    map1_generic(x, out, f)
}

/// `out[i] = f(x[i], y[i])` over the common length.
#[inline(always)]
pub(crate) fn map2<A: Copy, B: Copy, O>(x: &[A], y: &[B], out: &mut [O], f: impl Fn(A, B) -> O) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { map2_avx2(x, y, out, f) };
        return;
    }
    map2_generic(x, y, out, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_paths_agree_bit_for_bit() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 150.0).collect();
        let mut a = vec![0f32; x.len()];
        let mut b = vec![0f32; x.len()];
        map1(&x, &mut a, crate::math::exp_f32);
        map1_generic(&x, &mut b, crate::math::exp_f32);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
