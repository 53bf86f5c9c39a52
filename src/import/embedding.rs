//! The `"embedding"` of an import line: 384 JSON numbers turned into a unit `f32` vector.
//!
//! A line with an embedding is about 4 KB of numbers, and parsing them through serde_json
//! (a generic visitor per element and its own float conversion) was a quarter of an import's
//! CPU. serde_json still checks the whole line's syntax (it hands this module the array's raw
//! text), and this module converts the numbers itself: the digits of a short decimal (the
//! usual `%.6g`-style output of other tools) are exact in an `f64`, so one multiplication or
//! division by an exact power of ten rounds correctly (Clinger's fast path); anything longer
//! goes through the standard library's parser. Errors name the field and the rule.

use crate::embed::DIM;

/// Checks a raw JSON array (already valid JSON) of `DIM` finite numbers, not all zero, and
/// returns it normalised to unit length.
pub fn unit_vector(raw: &str) -> Result<Vec<f32>, String> {
    let b = raw.as_bytes();
    let (v, _) = array(b, skip_ws(b, 0))?;
    normalise(&v)
}

/// The fast path for a whole line: when `line` is an object whose top-level `"embedding"` is
/// a valid array of `DIM` numbers (strict JSON, finite, not all zero), returns the array's
/// byte range and its unit vector. `None` otherwise, including for every line with an
/// error: the caller then parses the line the ordinary way, which names the error.
pub fn split_line(line: &str) -> Option<(std::ops::Range<usize>, Vec<f32>)> {
    let b = line.as_bytes();
    let at = find_embedding(b)?;
    let (v, end) = array(b, at).ok()?;
    Some((at..end, normalise(&v).ok()?))
}

/// Where the value of the top-level key `"embedding"` starts, if it is an array.
fn find_embedding(b: &[u8]) -> Option<usize> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut depth = 1usize;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                let from = i + 1;
                i = from;
                // To the closing quote, stepping over escapes.
                loop {
                    match b.get(i)? {
                        b'"' => break,
                        b'\\' => i += 2,
                        _ => i += 1,
                    }
                }
                let key = &b[from..i];
                i += 1;
                if depth == 1 && key == b"embedding" {
                    let colon = skip_ws(b, i);
                    if b.get(colon) == Some(&b':') {
                        let value = skip_ws(b, colon + 1);
                        return (b.get(value) == Some(&b'[')).then_some(value);
                    }
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The array of numbers starting at `b[i]` (`[`): its first `DIM` numbers and the index past
/// its `]`, or why it is not `DIM` numbers.
fn array(b: &[u8], mut i: usize) -> Result<(Vec<f64>, usize), String> {
    let mut v: Vec<f64> = Vec::with_capacity(DIM);
    if b.get(i) != Some(&b'[') {
        return Err(format!("invalid embedding: must be an array of {DIM} numbers"));
    }
    i = skip_ws(b, i + 1);
    let mut n = 0usize;
    if b.get(i) == Some(&b']') {
        i += 1;
    } else {
        loop {
            n += 1;
            let (x, next) = number(b, i).ok_or_else(|| format!("invalid embedding: element {n} is not a number"))?;
            // Past DIM the length is already wrong: keep counting (for the message), not storing.
            if v.len() < DIM {
                v.push(x);
            }
            i = skip_ws(b, next);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b']') => {
                    i += 1;
                    break;
                }
                _ => return Err(format!("invalid embedding: must be an array of {DIM} numbers")),
            }
        }
    }
    if n != DIM {
        return Err(format!("invalid embedding: must have {DIM} numbers, got {n}"));
    }
    Ok((v, i))
}

/// Checks `v` (DIM numbers) and scales it to unit length.
fn normalise(v: &[f64]) -> Result<Vec<f32>, String> {
    if let Some(i) = v.iter().position(|x| !x.is_finite() || x.abs() > f64::from(f32::MAX)) {
        return Err(format!("invalid embedding: number {} is not a finite 32-bit float", i + 1));
    }
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        return Err("invalid embedding: must not be all zeros".into());
    }
    // A vector that is already a unit vector to f32 precision (every vector `slm export`
    // writes) is kept bit for bit, so an export imported elsewhere scores exactly the same.
    if (norm - 1.0).abs() < 1e-6 {
        return Ok(v.iter().map(|&x| x as f32).collect());
    }
    Ok(v.iter().map(|x| (x / norm) as f32).collect())
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Powers of ten that an `f64` holds exactly.
const POW10: [f64; 23] =
    [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22];

/// Up to 8 ASCII digits at `b[i..]`: their value and how many there are. Eight bytes at a
/// time when the line has them (the digits of a float are most of an import's bytes).
#[inline]
fn digit_run(b: &[u8], i: usize) -> (u64, usize) {
    let Some(bytes) = b.get(i..i + 8) else {
        let mut v = 0u64;
        let mut n = 0;
        while let Some(d) = b.get(i + n).filter(|c| c.is_ascii_digit()) {
            v = v * 10 + u64::from(d - b'0');
            n += 1;
            if n == 8 {
                break;
            }
        }
        return (v, n);
    };
    let mut chunk = [0u8; 8];
    chunk.copy_from_slice(bytes);
    // Each byte minus '0': a digit is a byte below 10, i.e. with a clear high nibble before
    // and after adding 6. A carry out of a non-digit byte can only disturb the bytes after
    // it, which the leading count ignores.
    let a = u64::from_le_bytes(chunk) ^ 0x3030_3030_3030_3030;
    let flags = (a | a.wrapping_add(0x0606_0606_0606_0606)) & 0xF0F0_F0F0_F0F0_F0F0;
    let n = if flags == 0 { 8 } else { flags.trailing_zeros() as usize / 8 };
    if n == 0 {
        return (0, 0);
    }
    // The digits move to the high bytes (the zero bytes below them are leading zeros).
    (eight_digits(a << (8 * (8 - n))), n)
}

/// All the digits at `b[i..]`, accumulated into `mantissa` while it can hold them: returns
/// the index past them and how many there were.
#[inline]
fn digits(b: &[u8], mut i: usize, mantissa: &mut u64, count: &mut usize) -> (usize, usize) {
    let start = i;
    loop {
        let (v, n) = digit_run(b, i);
        if n == 0 {
            break;
        }
        *count += n;
        if *count <= 19 {
            *mantissa = *mantissa * POW10_INT[n] + v;
        }
        i += n;
        if n < 8 {
            break;
        }
    }
    (i, i - start)
}

/// Up to 16 ASCII digits at `b[i..]`, when 16 bytes follow `i`: their value and how many
/// there are (16 when there may be more). No branch depends on the count, which varies from
/// number to number in a way no predictor learns: [`digit_run`] on 16 bytes at once.
#[inline]
fn digit_run16(b: &[u8], i: usize) -> Option<(u64, usize)> {
    let bytes: [u8; 16] = b.get(i..i + 16)?.try_into().ok()?;
    const ZEROS: u128 = u128::from_le_bytes([b'0'; 16]);
    const SIXES: u128 = u128::from_le_bytes([6; 16]);
    const HIGH: u128 = u128::from_le_bytes([0xF0; 16]);
    let a = u128::from_le_bytes(bytes) ^ ZEROS;
    let flags = (a | a.wrapping_add(SIXES)) & HIGH;
    let n = (flags.trailing_zeros() / 8) as usize; // 16 when all are digits
    if n == 0 {
        return Some((0, 0));
    }
    // The digits to the high bytes, leading zeros below; then each half.
    let v = a << (8 * (16 - n));
    Some((eight_digits(v as u64) * 100_000_000 + eight_digits((v >> 64) as u64), n))
}

/// The value of 8 digit bytes (0-9 each), the text's first digit in the lowest byte: pairs,
/// quads and octets combined by one multiplication each.
#[inline]
fn eight_digits(v: u64) -> u64 {
    let v = (v & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561) >> 8;
    let v = (v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601) >> 16;
    (v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001) >> 32
}

/// The JSON number starting at `b[start]` (JSON's grammar, strictly: no leading zeros, digits
/// on both sides of a point) and the index just past it; `None` when none starts there (a
/// string, `null`, an array...).
///
/// The usual number of an embedding (a sign, one integer digit, a point, at most 15
/// fractional digits, 16 bytes of line after each run of digits) takes [`number_short`];
/// anything else [`number_any`]. Both give the same answer where both apply.
#[inline]
fn number(b: &[u8], start: usize) -> Option<(f64, usize)> {
    number_short(b, start).unwrap_or_else(|| number_any(b, start))
}

/// [`number`] for a number whose digit runs are each under 16 digits and followed by 16
/// bytes of line: `Some(answer)`, or `None` to leave it to [`number_any`].
#[inline]
fn number_short(b: &[u8], start: usize) -> Option<Option<(f64, usize)>> {
    let negative = b.get(start) == Some(&b'-');
    let mut i = start + usize::from(negative);
    // Most often one digit and a point: no need to count.
    let (int, int_digits) = match (b.get(i), b.get(i + 1)) {
        (Some(&d), Some(b'.')) if d.is_ascii_digit() => (u64::from(d - b'0'), 1),
        _ => digit_run16(b, i)?,
    };
    if int_digits == 0 || (int_digits > 1 && b[i] == b'0') {
        return Some(None);
    }
    if int_digits == 16 {
        return None;
    }
    i += int_digits;
    let mut mantissa = int;
    let mut count = int_digits;
    let mut exp10 = 0i64;
    if b.get(i) == Some(&b'.') {
        let (frac, frac_digits) = digit_run16(b, i + 1)?;
        if frac_digits == 0 {
            return Some(None);
        }
        count += frac_digits;
        if frac_digits == 16 || count > 19 {
            return None;
        }
        mantissa = mantissa * POW10_INT[frac_digits] + frac;
        exp10 = -(frac_digits as i64);
        i += 1 + frac_digits;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        let neg_exp = b.get(i) == Some(&b'-');
        i += usize::from(neg_exp || b.get(i) == Some(&b'+'));
        let (e, exp_digits) = digit_run16(b, i)?;
        if exp_digits == 0 {
            return Some(None);
        }
        if exp_digits > 3 {
            return None;
        }
        exp10 += if neg_exp { -(e as i64) } else { e as i64 };
        i += exp_digits;
    }
    if mantissa >= 1 << 53 || exp10.unsigned_abs() > 22 {
        return None;
    }
    // Clinger's fast path, as in `number_any`.
    let m = mantissa as f64;
    let x = if exp10 >= 0 { m * POW10[exp10 as usize] } else { m / POW10[(-exp10) as usize] };
    Some(Some((with_sign(x, negative), i)))
}

/// Powers of ten below 10^16, as integers.
const POW10_INT: [u64; 16] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
];

/// [`number`] for any JSON number.
fn number_any(b: &[u8], start: usize) -> Option<(f64, usize)> {
    let mut i = start;
    let negative = b.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let mut mantissa = 0u64;
    let mut count = 0usize;
    let (next, int_digits) = digits(b, i, &mut mantissa, &mut count);
    if int_digits == 0 || (int_digits > 1 && b[i] == b'0') {
        return None;
    }
    i = next;
    let mut exp10 = 0i64;
    if b.get(i) == Some(&b'.') {
        let (next, frac_digits) = digits(b, i + 1, &mut mantissa, &mut count);
        if frac_digits == 0 {
            return None;
        }
        exp10 -= frac_digits as i64;
        i = next;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        let neg_exp = match b.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let from = i;
        let mut e = 0i64;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            e = (e * 10 + i64::from(d - b'0')).min(1 << 40);
            i += 1;
        }
        if i == from {
            return None;
        }
        exp10 += if neg_exp { -e } else { e };
    }
    // Clinger's fast path: a mantissa an f64 holds exactly, times or over an exact power of
    // ten, is one correctly rounded operation.
    let x = if mantissa == 0 && count <= 19 {
        0.0
    } else if count <= 19 && mantissa < (1 << 53) && exp10.unsigned_abs() <= 22 {
        let m = mantissa as f64;
        if exp10 >= 0 {
            m * POW10[exp10 as usize]
        } else {
            m / POW10[(-exp10) as usize]
        }
    } else {
        // Checked above to be a JSON number, hence ASCII and parseable.
        std::str::from_utf8(&b[start..i]).ok()?.parse::<f64>().ok()?.abs()
    };
    Some((with_sign(x, negative), i))
}

/// `x` (not negative), negated when `negative`: without a branch, since half the numbers of
/// an embedding are negative in no order a predictor could learn (the branch cost 10 % of the
/// parse: criterion `import_parse`).
#[inline]
fn with_sign(x: f64, negative: bool) -> f64 {
    f64::from_bits(x.to_bits() | (u64::from(negative) << 63))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` followed by more of a line: 16 bytes after each of its digit runs, so that
    /// [`number_short`] can take it.
    fn in_line(s: &str) -> String {
        format!("{s},0.1234567890123456789")
    }

    /// `s` parsed alone (too short for [`number_short`]) and inside a longer line (where
    /// it is used when it can be): both must agree.
    fn parse(s: &str) -> f64 {
        let (x, end) = number(s.as_bytes(), 0).unwrap();
        assert_eq!(end, s.len(), "{s}");
        let line = in_line(s);
        let (y, end) = number(line.as_bytes(), 0).unwrap();
        assert_eq!(end, s.len(), "{line}");
        assert_eq!(x.to_bits(), y.to_bits(), "{s}: alone {x}, in a line {y}");
        x
    }

    /// Which numbers the short path takes (the others must give the same through the other).
    #[test]
    fn the_short_path_takes_the_usual_numbers() {
        for s in ["0.0518311", "-0.00944522", "4.05275e-05", "-1.5E+3", "0", "-7", "0.000123456789012"] {
            assert!(matches!(number_short(in_line(s).as_bytes(), 0), Some(Some(_))), "{s}");
        }
        for s in ["1234567890123456", "0.1234567890123456", "1e400", "123456789.12345678901", "1e1234"] {
            assert!(number_short(in_line(s).as_bytes(), 0).is_none(), "{s}");
        }
    }

    /// Every number form parses to exactly what the standard library's correctly rounded
    /// parser gives, on the fast path and off it.
    #[test]
    fn numbers_match_the_standard_parser() {
        let cases = [
            "0",
            "-0",
            "1",
            "-1",
            "0.5",
            "0.0123456",
            "-0.0123456",
            "1.23456e-05",
            "-9.87654E+03",
            "123456789012345",
            "1234567890123456789012",
            "0.1",
            "0.30000000000000004",
            "1e22",
            "1e23",
            "1e-22",
            "1e-23",
            "2.2250738585072014e-308",
            "4.9e-324",
            "1.7976931348623157e308",
            "1e400",
            "0.000000000000000000000000001",
            "0.5e0",
            "1E0",
            "3.4028235e38",
            "0.1234567890123456789",
            "12345678901234567890123456789e-20",
            "0.00000000001234567",
            "9007199254740993",
            "123456789",
            "12345678",
            "1234567.1234567e3",
        ];
        for c in cases {
            let want: f64 = c.parse().unwrap();
            let got = parse(c);
            assert_eq!(got.to_bits(), want.to_bits(), "{c}: {got} vs {want}");
        }
        // Many %.6g-style numbers, as tools write them.
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s as f64 / u64::MAX as f64 - 0.5) * 10f64.powi((s % 9) as i32 - 6);
            for text in [format!("{x:.6}"), format!("{x:e}"), format!("{x}"), format!("{:.6e}", x)] {
                let want: f64 = text.parse().unwrap();
                assert_eq!(parse(&text).to_bits(), want.to_bits(), "{text}");
            }
        }
    }

    #[test]
    fn not_a_number_is_none() {
        for s in ["\"1\"", "null", "[1]", "true", "-", ".5", "01", "1.", "1e", "1e+", "-.5", "00.5"] {
            assert!(number(s.as_bytes(), 0).is_none(), "{s}");
            let line = in_line(s);
            assert!(number(line.as_bytes(), 0).is_none(), "{line}");
        }
    }

    fn array(xs: &[f64]) -> String {
        serde_json::to_string(xs).unwrap()
    }

    #[test]
    fn vectors_are_checked_and_normalised() {
        let mut v = vec![0.0; DIM];
        v[0] = 3.0;
        v[1] = 4.0;
        let u = unit_vector(&array(&v)).unwrap();
        assert_eq!((u[0], u[1], u[2]), (0.6, 0.8, 0.0));
        // Whitespace anywhere JSON allows it.
        let spaced = format!("[ {} ]", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ,\n"));
        assert_eq!(unit_vector(&spaced).unwrap(), u);

        let short = unit_vector("[1, 2, 3]").unwrap_err();
        assert!(short.contains("embedding") && short.contains("384") && short.contains("got 3"), "{short}");
        let long = unit_vector(&array(&vec![1.0; DIM + 5])).unwrap_err();
        assert!(long.contains("got 389"), "{long}");
        assert!(unit_vector("[]").unwrap_err().contains("got 0"));
        assert!(unit_vector(&array(&vec![0.0; DIM])).unwrap_err().contains("zeros"));
        let mut s: Vec<String> = vec!["1".into(); DIM];
        s[7] = "\"a\"".into();
        let e = unit_vector(&format!("[{}]", s.join(","))).unwrap_err();
        assert!(e.contains("element 8 is not a number"), "{e}");
        s[7] = "1e39".into();
        let e = unit_vector(&format!("[{}]", s.join(","))).unwrap_err();
        assert!(e.contains("number 8 is not a finite 32-bit float"), "{e}");
        assert!(unit_vector("{\"a\": 1}").unwrap_err().contains("must be an array"));
        assert!(unit_vector("[[1]]").unwrap_err().contains("element 1 is not a number"));
    }

    /// The fast path finds the top-level key only, gives the array's exact range, and
    /// declines every line it cannot take whole (the ordinary parse then names the error).
    #[test]
    fn split_line_takes_only_valid_top_level_embeddings() {
        let mut v = vec![0.5; DIM];
        v[3] = -2.25e-3;
        let arr = array_text(&v);
        let want = unit_vector(&arr).unwrap();
        for line in [
            format!(r#"{{"content": "x", "embedding": {arr}}}"#),
            format!(r#"{{"embedding":{arr},"content":"x"}}"#),
            format!(r#" {{ "content": "a \" \\", "tags": ["embedding"], "embedding" : {arr} }} "#),
            format!(r#"{{"content": "{{\"embedding\": [1]}}", "embedding": {arr}}}"#),
        ] {
            let (range, got) = split_line(&line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(&line[range], arr, "{line}");
            assert_eq!(got, want);
        }
        let mut bad: Vec<String> = vec!["1".into(); DIM];
        bad[5] = "01".into();
        for line in [
            format!(r#"{{"content": "x", "nested": {{"embedding": {arr}}}}}"#),
            format!(r#"{{"content": "x", "embedding": [{}]}}"#, bad.join(",")),
            r#"{"content": "x", "embedding": [1, 2]}"#.to_string(),
            r#"{"content": "x", "embedding": null}"#.to_string(),
            format!(r#"{{"content": "x", "embedding": {}}}"#, array_text(&vec![0.0; DIM])),
            format!(r#"{{"content": "x", "embedding": {}}}"#, arr.replace(']', ",]")),
            r#"{"content": "x"}"#.to_string(),
            r#"["embedding", 1]"#.to_string(),
            r#"{"content": "unterminated"#.to_string(),
        ] {
            assert!(split_line(&line).is_none(), "{line}");
        }
    }

    fn array_text(xs: &[f64]) -> String {
        serde_json::to_string(xs).unwrap()
    }
}
