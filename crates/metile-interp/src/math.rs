//! Branch-free f32 math the compiler can vectorise, used instead of calling libm once
//! per element.

/// `e^x` for f32 with at most 2 ulp of error over the whole range (about 1 ulp in
/// practice): `+inf` and overflow give `+inf`, `-inf` and underflow give `0`
/// (results in the subnormal range are produced, with absolute error below one
/// subnormal ulp), NaN gives NaN.
///
/// Method: `x = n ln2 + r` with `n = round(x / ln2)` and `|r| <= ln2 / 2` (Cody-Waite
/// reduction with a two-part ln2 so `r` is exact), `e^r` from a degree-7 polynomial
/// (the Cephes `expf` minimax coefficients), then `2^n` applied as two power-of-two
/// factors so that `n = 128` (results just below `f32::MAX`) and subnormal results
/// need no special path. Written with selects only, so loops over it vectorise.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Beyond these e^x is infinite / rounds to zero in f32.
    const OVERFLOW: f32 = 88.722_84;
    const UNDERFLOW: f32 = -103.972_08;
    // Adding then subtracting 1.5 * 2^23 rounds to the nearest integer (ties to even).
    const ROUND_MAGIC: f32 = 12_582_912.0;

    // Clamp so the reduction stays in range; NaN passes through every comparison.
    let xc = x.clamp(-105.0, 89.0);
    let shifted = xc * LOG2_E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let r2 = r * r;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let er = p * r2 + r + 1.0;
    // n is in [-152, 129]; split 2^n into two normal factors.
    // The integer n sits in the low mantissa bits of `shifted`; reading it from there
    // avoids a float-to-int conversion (and its NaN/saturation fix-ups) per lane.
    let ni = (shifted.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let half = ni >> 1;
    let scale_a = f32::from_bits((half.wrapping_add(127) as u32) << 23);
    let scale_b = f32::from_bits((ni.wrapping_sub(half).wrapping_add(127) as u32) << 23);
    let result = er * scale_a * scale_b;
    if x > OVERFLOW {
        f32::INFINITY
    } else if x < UNDERFLOW {
        0.0
    } else if x.is_nan() {
        x
    } else {
        result
    }
}

/// Coefficients of `erf(x) / x - 1` as a polynomial in `x^2`, for `|x| < 0.875`
/// (a least-squares fit; the MSL emitter's `metile_erf` uses the same numbers).
const ERF_SMALL: [f32; 8] = [
    0.128_379_17,
    -0.376_126_38,
    0.112_837_896,
    -0.026_865_96,
    0.005_222_882_6,
    -0.000_851_724_5,
    0.000_115_603_9,
    -1.069_423_3e-5,
];

/// Coefficients of `erfc(x) * exp(x^2)` as a polynomial in `1 / x`, for
/// `0.875 <= x < 4`.
const ERF_TAIL: [f32; 10] = [
    0.000_186_865_73,
    0.560_542_94,
    0.030_355_053,
    -0.420_319_05,
    0.355_714_6,
    0.010_065_993,
    -0.267_992_1,
    0.240_301_4,
    -0.097_020_05,
    0.015_747_964,
];

fn horner(coefficients: &[f32], x: f32) -> f32 {
    coefficients.iter().rev().fold(0.0, |acc, &c| acc * x + c)
}

/// `erf(x)` for f32 within about 2 ulp: `x + x * P(x^2)` below 0.875 (the
/// exact `x` carries most of the value), `1 - exp(-x^2) * R(1 / |x|)` up to
/// 4, and `±1` beyond, where erf rounds to 1.
pub fn erf_f32(x: f32) -> f32 {
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a >= 4.0 {
        return 1.0f32.copysign(x);
    }
    if a < 0.875 {
        return x + x * horner(&ERF_SMALL, x * x);
    }
    let tail = exp_f32(-(a * a)) * horner(&ERF_TAIL, 1.0 / a);
    (1.0 - tail).copysign(x)
}

/// `erf(x)` for f64 (Rust has none). Below 3, the series
/// `2/sqrt(pi) * exp(-x^2) * sum(2^n x^(2n+1) / (1*3*..*(2n+1)))`, whose terms
/// are all positive (no cancellation); from 3, `1 - erfc(x)` with erfc's
/// continued fraction `exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`,
/// evaluated from its tail; beyond 6, erf rounds to ±1.
pub fn erf_f64(x: f64) -> f64 {
    const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a >= 6.0 {
        return 1.0f64.copysign(x);
    }
    if a < 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term > sum * 1e-18 {
            n += 1.0;
            term *= 2.0 * a * a / (2.0 * n + 1.0);
            sum += term;
        }
        return (FRAC_2_SQRT_PI * (-a * a).exp() * sum).copysign(x);
    }
    let mut t = a;
    for k in (1..=80).rev() {
        t = a + f64::from(k) / 2.0 / t;
    }
    let erfc = FRAC_2_SQRT_PI / 2.0 * (-a * a).exp() / t;
    (1.0 - erfc).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_f64_matches_known_values() {
        // erf at these points, to 17 significant digits.
        let known = [
            (0.0, 0.0),
            (1e-10, 1.1283791670955126e-10),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (2.9, 0.9999589021219005),
            (3.0, 0.9999779095030014),
            (4.5, 0.9999999998033839),
        ];
        for (x, want) in known {
            for (x, want) in [(x, want), (-x, -want)] {
                let got = erf_f64(x);
                assert!(
                    (got - want).abs() <= 4.0 * f64::EPSILON * want.abs(),
                    "erf({x}) = {got}, want {want}"
                );
            }
        }
        assert_eq!(erf_f64(7.0), 1.0);
        assert!(erf_f64(f64::NAN).is_nan());
    }

    /// The error of `got` against the exact `want`, in units of f32's last place at `want`.
    fn ulp_error(got: f32, want: f64) -> f64 {
        let exponent = if want == 0.0 {
            -149
        } else {
            (want.abs().log2().floor() as i32).max(-126) - 23
        };
        ((f64::from(got) - want).abs()) / 2f64.powi(exponent)
    }

    #[test]
    fn exp_matches_f64_within_two_ulp_over_the_range() {
        let mut worst = 0.0f64;
        // Walk f32 magnitudes up to 110 with a bit-pattern stride that reaches every
        // binade, and check both signs.
        for bits in (0..=110f32.to_bits()).step_by(3001) {
            let magnitude = f32::from_bits(bits);
            for x in [magnitude, -magnitude] {
                let got = exp_f32(x);
                let want = f64::from(x).exp();
                if want > f64::from(f32::MAX) {
                    assert_eq!(got, f32::INFINITY, "exp({x})");
                } else {
                    let err = ulp_error(got, want);
                    worst = worst.max(err);
                    assert!(err <= 2.0, "exp({x}) = {got}, want {want}: {err} ulp");
                }
            }
        }
        eprintln!("exp_f32 worst error: {worst:.3} ulp");
        assert!(worst <= 2.0);
    }

    #[test]
    fn erf_matches_reference_values() {
        // erf at these points to f64 precision (Python's math.erf).
        let reference = [
            (0.1f32, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (0.874, 0.783_549_856_769_843_8),
            (0.875, 0.784_075_061_059_859_7),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
        ];
        for (x, want) in reference {
            for (x, want) in [(x, want), (-x, -want)] {
                let err = ulp_error(erf_f32(x), want);
                assert!(err <= 2.0, "erf({x}) = {}, want {want}: {err} ulp", erf_f32(x));
            }
        }
        assert_eq!(erf_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(erf_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(erf_f32(4.0), 1.0);
        assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
        assert!(erf_f32(f32::NAN).is_nan());
        assert_eq!(erf_f32(1e-30), 1e-30 + 1e-30 * ERF_SMALL[0]);
    }

    #[test]
    fn exp_special_values() {
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-0.0), 1.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert!(exp_f32(88.72).is_finite());
        assert!(exp_f32(-100.0) > 0.0);
        assert_eq!(exp_f32(1.0), std::f32::consts::E);
    }

    #[test]
    fn exp_is_accurate_near_zero_and_at_the_edges() {
        for &x in &[
            1e-7f32, -1e-7, 0.5, -0.5, 0.346, -0.347, 88.7228, -87.3, -88.0, -95.0, -103.9,
        ] {
            let err = ulp_error(exp_f32(x), f64::from(x).exp());
            assert!(err <= 2.0, "exp({x}): {err} ulp");
        }
    }
}
