//! Go's `time.Duration` as `metav1.Duration` carries it on the wire.
//!
//! This module owns the text form only: `time.ParseDuration` for input and
//! `Duration.String()` for output, bit for bit, so a value written by
//! upstream reads back the same and errors name the same inputs. Range
//! checks (negative, zero) belong to validation, not here.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// What an error message offers as the allowed form of a duration.
pub(crate) const DURATION_ALLOWED: &str =
    "a Go duration such as \"30s\", \"1m30s\" or \"250ms\", in units of ns, us, ms, s, m, h";

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// 2^63: the magnitude of `i64::MIN`, the largest a negative duration can reach.
const LIMIT: u64 = 1 << 63;

/// A signed duration in nanoseconds with Go's text form (`1h30m`, `250ms`).
///
/// Negative values parse, as in Go; validation decides where they are
/// allowed. The zero value is what an absent field decodes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(i64);

impl GoDuration {
    /// The zero duration, `0s`.
    pub const ZERO: GoDuration = GoDuration(0);

    /// A duration of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration(nanos)
    }

    /// A duration of `secs` seconds; saturates at about 292 years.
    pub const fn from_secs(secs: i64) -> Self {
        GoDuration(secs.saturating_mul(SECOND as i64))
    }

    /// The length in nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// Whether the duration is below zero.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The same length as a `std::time::Duration`, or `None` if negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0).ok().map(std::time::Duration::from_nanos)
    }
}

/// Why a text is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseDurationError {
    /// The rejected text, as given.
    pub input: String,
    /// The first problem found, e.g. `unknown unit "d"`.
    pub problem: String,
}

impl fmt::Display for ParseDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid duration {:?}: {} (allowed: {DURATION_ALLOWED})", self.input, self.problem)
    }
}

impl std::error::Error for ParseDurationError {}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        // Go accepts the ASCII spelling and both Unicode micro signs.
        "us" | "\u{00b5}s" | "\u{03bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

/// Consumes leading ASCII digits; `None` once the value passes 2^63 (Go's `errLeadingInt`).
fn leading_int(s: &[u8]) -> Option<(u64, usize)> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, i))
}

/// Consumes fraction digits; digits past what fits are read and dropped, as in Go.
fn leading_fraction(s: &[u8]) -> (u64, f64, usize) {
    let mut x: u64 = 0;
    let mut scale = 1.0;
    let mut overflow = false;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > (LIMIT - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > LIMIT {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, i)
}

/// `time.ParseDuration`: `[-+]?(<digits>[.<digits>]<unit>)+`, or `0`.
pub fn parse(input: &str) -> Result<GoDuration, ParseDurationError> {
    let err = |problem: &str| ParseDurationError { input: input.to_owned(), problem: problem.to_owned() };
    let mut s = input.as_bytes();
    let mut neg = false;
    if let Some((&sign @ (b'-' | b'+'), rest)) = s.split_first() {
        neg = sign == b'-';
        s = rest;
    }
    if s == b"0" {
        return Ok(GoDuration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty"));
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(err("expected a number"));
        }
        let (mut v, int_len) = leading_int(s).ok_or_else(|| err("out of range (about ±292 years)"))?;
        s = &s[int_len..];
        let (mut frac, mut scale, mut frac_len) = (0, 1.0, 0);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            (frac, scale, frac_len) = leading_fraction(s);
            s = &s[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return Err(err("expected digits around \".\""));
        }
        // The unit runs up to the next number; that boundary is ASCII, so
        // slicing the UTF-8 text there is safe.
        let unit_len = s.iter().position(|c| *c == b'.' || c.is_ascii_digit()).unwrap_or(s.len());
        if unit_len == 0 {
            return Err(err("missing unit"));
        }
        let unit_text = String::from_utf8_lossy(&s[..unit_len]);
        let unit = unit_nanos(&unit_text).ok_or_else(|| err(&format!("unknown unit {unit_text:?}")))?;
        s = &s[unit_len..];
        let overflow = || err("out of range (about ±292 years)");
        if v > LIMIT / unit {
            return Err(overflow());
        }
        v *= unit;
        if frac > 0 {
            // Go computes the fractional part in float64, truncating.
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(overflow());
            }
        }
        total = total.checked_add(v).filter(|t| *t <= LIMIT).ok_or_else(overflow)?;
    }
    if neg {
        // total <= 2^63, so the negation fits: 2^63 itself is i64::MIN.
        return Ok(GoDuration((total as i64).wrapping_neg()));
    }
    i64::try_from(total).map(GoDuration).map_err(|_| err("out of range (about ±292 years)"))
}

impl FromStr for GoDuration {
    type Err = ParseDurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// Writes `v / 10^prec` as a fraction without trailing zeros (".25"),
/// nothing if it is zero; returns `v / 10^prec`.
fn push_fraction(out: &mut Vec<u8>, v: u64, prec: u32) -> u64 {
    let pow = 10u64.pow(prec);
    let mut frac = v % pow;
    if frac != 0 {
        let mut digits = prec;
        while frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        let text = format!(".{frac:0width$}", width = digits as usize);
        // Built right to left like Go, so the text is pushed reversed.
        out.extend(text.bytes().rev());
    }
    v / pow
}

fn push_int(out: &mut Vec<u8>, v: u64) {
    out.extend(v.to_string().bytes().rev());
}

/// Go's `Duration.String()`: "0s", "250ms", "1.5s", "1m0s", "1h0m0s".
impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut u = self.0.unsigned_abs();
        // Bytes in reverse order, mirroring Go's right-to-left buffer.
        let mut out: Vec<u8> = vec![b's'];
        if u < SECOND {
            let prec = match u {
                0 => return f.write_str("0s"),
                u if u < MICROSECOND => {
                    out.push(b'n');
                    0
                }
                u if u < MILLISECOND => {
                    // U+00B5 MICRO SIGN, reversed.
                    out.extend([0xb5, 0xc2]);
                    3
                }
                _ => {
                    out.push(b'm');
                    6
                }
            };
            u = push_fraction(&mut out, u, prec);
            push_int(&mut out, u);
        } else {
            u = push_fraction(&mut out, u, 9);
            push_int(&mut out, u % 60);
            u /= 60;
            if u > 0 {
                out.push(b'm');
                push_int(&mut out, u % 60);
                u /= 60;
                if u > 0 {
                    out.push(b'h');
                    push_int(&mut out, u);
                }
            }
        }
        if self.0 < 0 {
            out.push(b'-');
        }
        out.reverse();
        f.write_str(&String::from_utf8_lossy(&out))
    }
}

/// Written as Go writes `metav1.Duration`: its `String()` ("1m0s").
impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `metav1.Duration`: only a JSON string is accepted, so `syncPeriod: 30` fails.
impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = GoDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(DURATION_ALLOWED)
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
                parse(v).map_err(E::custom)
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> i64 {
        parse(s).expect("valid duration").as_nanos()
    }

    #[test]
    fn parses_go_examples() {
        assert_eq!(d("0"), 0);
        assert_eq!(d("-0"), 0);
        assert_eq!(d("30s"), 30 * SECOND as i64);
        assert_eq!(d("1h30m"), 90 * MINUTE as i64);
        assert_eq!(d("1.5h"), 90 * MINUTE as i64);
        assert_eq!(d("2h22m"), 142 * MINUTE as i64);
        assert_eq!(d(".5s"), 500 * MILLISECOND as i64);
        assert_eq!(d("1.s"), SECOND as i64);
        assert_eq!(d("+5s"), 5 * SECOND as i64);
        assert_eq!(d("-1m"), -(MINUTE as i64));
        assert_eq!(d("1us"), 1_000);
        assert_eq!(d("1µs"), 1_000);
        assert_eq!(d("1μs"), 1_000);
        assert_eq!(d("250ms"), 250 * MILLISECOND as i64);
        assert_eq!(d("7ns"), 7);
        assert_eq!(d("1h1m1s1ms1us1ns"), 3_661_001_001_001);
        assert_eq!(d("-9223372036854775808ns"), i64::MIN);
        assert_eq!(d("9223372036854775807ns"), i64::MAX);
    }

    #[test]
    fn rejects_what_go_rejects() {
        let problem = |s: &str| parse(s).expect_err("invalid duration").problem;
        assert_eq!(problem(""), "empty");
        assert_eq!(problem("-"), "empty");
        assert_eq!(problem("30"), "missing unit");
        assert_eq!(problem("1d"), "unknown unit \"d\"");
        assert_eq!(problem("1 s"), "unknown unit \" s\"");
        assert_eq!(problem(".s"), "expected digits around \".\"");
        assert_eq!(problem("s"), "expected a number");
        assert_eq!(problem("9223372036854775808ns"), "out of range (about ±292 years)");
        assert_eq!(problem("3000000h"), "out of range (about ±292 years)");
    }

    #[test]
    fn error_names_input_and_allowed_form() {
        assert_eq!(
            parse("5x").expect_err("invalid").to_string(),
            format!("invalid duration \"5x\": unknown unit \"x\" (allowed: {DURATION_ALLOWED})")
        );
    }

    #[test]
    fn formats_like_go() {
        let f = |n: i64| GoDuration::from_nanos(n).to_string();
        assert_eq!(f(0), "0s");
        assert_eq!(f(1), "1ns");
        assert_eq!(f(1_100), "1.1µs");
        assert_eq!(f(2_200_000), "2.2ms");
        assert_eq!(f(250_000_000), "250ms");
        assert_eq!(f(1_500_000_000), "1.5s");
        assert_eq!(f(30 * SECOND as i64), "30s");
        assert_eq!(f(MINUTE as i64), "1m0s");
        assert_eq!(f(15 * MINUTE as i64), "15m0s");
        assert_eq!(f(HOUR as i64), "1h0m0s");
        assert_eq!(f(24 * HOUR as i64), "24h0m0s");
        assert_eq!(f(142 * MINUTE as i64), "2h22m0s");
        assert_eq!(f(-(MINUTE as i64)), "-1m0s");
        assert_eq!(f(3_661_001_001_001), "1h1m1.001001001s");
        assert_eq!(f(i64::MIN), "-2562047h47m16.854775808s");
        assert_eq!(f(i64::MAX), "2562047h47m16.854775807s");
    }

    #[test]
    fn to_std_refuses_negative() {
        assert_eq!(GoDuration::from_secs(2).to_std(), Some(std::time::Duration::from_secs(2)));
        assert_eq!(GoDuration::from_secs(-2).to_std(), None);
    }

    proptest::proptest! {
        #[test]
        fn display_parses_back_to_the_same_value(n in proptest::num::i64::ANY) {
            let text = GoDuration::from_nanos(n).to_string();
            proptest::prop_assert_eq!(parse(&text).map(GoDuration::as_nanos), Ok(n));
        }

        #[test]
        fn compound_text_adds_its_parts(h in 0i64..1000, m in 0i64..60, s in 0i64..60, ms in 0i64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let want = ((h * 60 + m) * 60 + s) * SECOND as i64 + ms * MILLISECOND as i64;
            proptest::prop_assert_eq!(d(&text), want);
        }
    }
}
