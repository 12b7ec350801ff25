//! The text of `device_print` lines, the same on every backend: the CPU
//! interpreter writes it itself, GPU kernels with `printf` (or Metal's
//! `os_log`) from the pieces below.
//!
//! One line per element of the printed tiles (one per program when every value
//! is a scalar): `pid (X, Y, Z) idx (I, J) PREFIX V1, V2`, where `idx` lists the
//! element's coordinates and each value is that element of a tile operand (a
//! scalar operand repeats on every line). Integers print in decimal (or as
//! `0x...` hexadecimal with `hex=True`), bools as 1 or 0, floats as C's `%g`.

/// The text around the slots of one line: the program id's three numbers, the
/// `rank` coordinates (none for scalars), then `values` values; one more piece
/// than slots.
pub fn print_pieces(prefix: &str, rank: usize, values: usize) -> Vec<String> {
    let mut pieces = vec!["pid (".to_string(), ", ".into(), ", ".into()];
    let sep = if prefix.is_empty() || prefix.ends_with(' ') {
        ""
    } else {
        " "
    };
    let head = format!(") {prefix}{sep}");
    if rank > 0 {
        pieces.push(") idx (".into());
        pieces.extend((1..rank).map(|_| ", ".to_string()));
    }
    pieces.push(head);
    pieces.extend((1..values).map(|_| ", ".to_string()));
    pieces.push(String::new());
    pieces
}

/// Whether `text` may be a `device_print` prefix or a `device_assert` message:
/// printable ASCII (the GPU backends put it in a C string and a format).
pub fn is_printable(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A float as C's `printf("%g")` writes it: 6 significant digits, fixed or
/// exponent notation, trailing zeros dropped.
pub fn format_g(x: f64) -> String {
    const PRECISION: i32 = 6;
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // The exponent after rounding to the precision decides the notation.
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, x);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent).max(0) as usize;
        strip_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_c_does() {
        let cases = [
            (0.0, "0"),
            (1.0, "1"),
            (0.1, "0.1"),
            (1.5e-5, "1.5e-05"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (-2.5, "-2.5"),
            (0.0001, "0.0001"),
            (999999.5, "1e+06"),
            (f64::INFINITY, "inf"),
            (1e100, "1e+100"),
            (1.23456789, "1.23457"),
        ];
        for (x, want) in cases {
            assert_eq!(format_g(x), want, "{x}");
        }
    }

    #[test]
    fn pieces_surround_every_slot() {
        assert_eq!(print_pieces("x:", 2, 2).concat(), "pid (, , ) idx (, ) x: , ");
        assert_eq!(print_pieces("", 0, 1), vec!["pid (", ", ", ", ", ") ", ""]);
        assert_eq!(print_pieces("v ", 1, 1).len(), 3 + 1 + 1 + 1);
    }
}
