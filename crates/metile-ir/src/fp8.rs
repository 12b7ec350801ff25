//! The two 8-bit float formats, exactly: decoding is exact (every fp8 value is
//! an f32), encoding rounds to nearest, ties to even, and saturates, as NVIDIA's
//! `cvt.rn.satfinite` that Triton uses for `.to(tl.float8e4nv)` and
//! `.to(tl.float8e5)`:
//!
//! * a finite value beyond the largest finite fp8 value, and an infinity,
//!   becomes the largest finite value of its sign (448 for e4m3, 57344 for e5m2);
//! * NaN becomes the canonical NaN `0x7f`;
//! * values below the smallest subnormal round to (signed) zero.
//!
//! e4m3 is OCP's `e4m3fn`: bias 7, no infinities, NaN is `S.1111.111`; e5m2 is
//! IEEE-like (the top byte of an f16): bias 15, infinities `S.11111.00`.
//! The emitters spell the same algorithm in MSL and CUDA (`metile_*_from_float`).

/// One of the fp8 formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8 {
    E4M3,
    E5M2,
}

/// The canonical NaN both encoders produce.
pub const NAN_BITS: u8 = 0x7f;

impl Fp8 {
    fn mantissa_bits(self) -> i32 {
        match self {
            Fp8::E4M3 => 3,
            Fp8::E5M2 => 2,
        }
    }

    fn bias(self) -> i32 {
        match self {
            Fp8::E4M3 => 7,
            Fp8::E5M2 => 15,
        }
    }

    /// The bits of the largest finite value (positive).
    pub fn max_bits(self) -> u8 {
        match self {
            Fp8::E4M3 => 0x7e,
            Fp8::E5M2 => 0x7b,
        }
    }

    /// The largest finite value: 448 or 57344.
    pub fn max_value(self) -> f64 {
        f64::from(self.decode(self.max_bits()))
    }

    /// The exact value of `bits`.
    pub fn decode(self, bits: u8) -> f32 {
        let negative = bits & 0x80 != 0;
        let m = self.mantissa_bits();
        let exp_field = i32::from((bits & 0x7f) >> m);
        let mantissa = i32::from(bits) & ((1 << m) - 1);
        let exp_max = 0x7f >> m;
        let magnitude = match self {
            Fp8::E4M3 if exp_field == exp_max && mantissa == (1 << m) - 1 => f32::NAN,
            Fp8::E5M2 if exp_field == exp_max && mantissa != 0 => f32::NAN,
            Fp8::E5M2 if exp_field == exp_max => f32::INFINITY,
            _ if exp_field == 0 => mantissa as f32 * 2f32.powi(1 - self.bias() - m),
            _ => (((1 << m) + mantissa) as f32) * 2f32.powi(exp_field - self.bias() - m),
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// `x` rounded to nearest even, saturated to the finite range; NaN to `0x7f`.
    /// Every f32 and integer is exact in f64, so this is the one rounding of any
    /// conversion to fp8.
    pub fn encode(self, x: f64) -> u8 {
        if x.is_nan() {
            return NAN_BITS;
        }
        let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
        let a = x.abs();
        if a >= self.max_value() {
            return sign | self.max_bits();
        }
        let m = self.mantissa_bits();
        let min_normal_exp = 1 - self.bias();
        // The exponent of `a`'s binade, never below the subnormal binade's.
        let exp = if a == 0.0 {
            min_normal_exp
        } else {
            ((a.to_bits() >> 52) as i32 - 1023).max(min_normal_exp)
        };
        // `a / quantum` is exact (a power-of-two scaling in range), and
        // `round_ties_even` is the one rounding.
        let quantum = 2f64.powi(exp - m);
        let steps = (a / quantum).round_ties_even() as i32;
        // `steps` counts quanta of `exp`'s binade: below 2^m is subnormal (or the
        // binade's start), and a carry to 2^(m+1) lands on the next binade's
        // first value, which the same formula spells.
        let bits = if exp == min_normal_exp && steps < (1 << m) {
            steps
        } else {
            let (exp, steps) = if steps == 2 << m {
                (exp + 1, 1 << m)
            } else {
                (exp, steps)
            };
            ((exp + self.bias()) << m) | (steps - (1 << m))
        };
        sign | bits as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_round_trips() {
        for fmt in [Fp8::E4M3, Fp8::E5M2] {
            for bits in 0..=255u8 {
                let v = fmt.decode(bits);
                if v.is_nan() {
                    assert_eq!(fmt.encode(f64::from(v)), NAN_BITS);
                } else if v.is_infinite() {
                    assert_eq!(fmt.encode(f64::from(v)), (bits & 0x80) | fmt.max_bits());
                } else {
                    assert_eq!(fmt.encode(f64::from(v)), bits, "{fmt:?} {bits:#x} = {v}");
                }
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(Fp8::E4M3.max_value(), 448.0);
        assert_eq!(Fp8::E5M2.max_value(), 57344.0);
        assert_eq!(Fp8::E4M3.decode(0x01), 2f32.powi(-9));
        assert_eq!(Fp8::E5M2.decode(0x01), 2f32.powi(-16));
        assert_eq!(Fp8::E4M3.decode(0x38), 1.0);
        assert_eq!(Fp8::E5M2.decode(0x3c), 1.0);
        assert!(Fp8::E4M3.decode(0xff).is_nan());
        assert_eq!(Fp8::E4M3.decode(0x7e), 448.0);
        assert_eq!(Fp8::E5M2.decode(0xfc), f32::NEG_INFINITY);
    }

    #[test]
    fn rounding_is_to_nearest_even_and_saturating() {
        // 1 + 1/16 is halfway between 1 and 1.125 in e4m3: ties to the even 1.0.
        assert_eq!(Fp8::E4M3.encode(1.0625), 0x38);
        // 1.125 + 1/16 is halfway between 1.125 and 1.25: ties to 1.25 (even).
        assert_eq!(Fp8::E4M3.encode(1.1875), 0x3a);
        assert_eq!(Fp8::E4M3.encode(1.07), 0x39);
        // Just below the top binade's carry: 15.5 ties to 16 (a carry into the next exponent).
        assert_eq!(Fp8::E4M3.decode(Fp8::E4M3.encode(15.5)), 16.0);
        assert_eq!(Fp8::E4M3.encode(1e9), 0x7e);
        assert_eq!(Fp8::E4M3.encode(-f64::INFINITY), 0xfe);
        assert_eq!(Fp8::E5M2.encode(f64::INFINITY), 0x7b);
        assert_eq!(Fp8::E5M2.encode(60000.0), 0x7b);
        assert_eq!(Fp8::E4M3.encode(f64::NAN), 0x7f);
        // Half the smallest subnormal ties to zero; just above rounds up.
        assert_eq!(Fp8::E4M3.encode(2f64.powi(-10)), 0x00);
        assert_eq!(Fp8::E4M3.encode(2f64.powi(-10) * 1.01), 0x01);
        assert_eq!(Fp8::E4M3.encode(-1e-30), 0x80);
        // The largest subnormal rounds up into the smallest normal.
        assert_eq!(Fp8::E4M3.encode(7.6 * 2f64.powi(-9)), 0x08);
    }
}
