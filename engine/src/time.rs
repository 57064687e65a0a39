//! Time as a value: the engine never reads a clock.
//!
//! [`Timestamp`] is milliseconds since the Unix epoch (UTC); [`Duration`] is a signed span in
//! milliseconds. Both are plain integers so that state hashes and journal records are
//! identical on every machine.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in time, milliseconds since 1970-01-01T00:00:00Z.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub i64);

/// A span of time in milliseconds (may be negative when subtracting timestamps).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Duration(pub i64);

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_millis(ms: i64) -> Self {
        Duration(ms)
    }
    pub const fn from_secs(s: i64) -> Self {
        Duration(s.saturating_mul(1000))
    }
    pub const fn from_mins(m: i64) -> Self {
        Duration(m.saturating_mul(60_000))
    }
    pub const fn as_millis(self) -> i64 {
        self.0
    }
    /// Whole seconds, truncated toward zero (Go's `Duration.Seconds()` cast to an integer).
    pub const fn as_secs(self) -> i64 {
        self.0 / 1000
    }
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }
    pub const fn as_millis(self) -> i64 {
        self.0
    }
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.0))
    }
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }

    /// Parses an RFC 3339 timestamp (`2024-01-01T00:00:00Z`, fractional seconds and numeric
    /// offsets allowed), as the Kubernetes API prints `metav1.Time`.
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, String> {
        let bad = || format!("{s:?} is not an RFC 3339 timestamp (use 2024-01-01T00:00:00Z)");
        let b = s.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
            return Err(bad());
        }
        if b[13] != b':' || b[16] != b':' {
            return Err(bad());
        }
        let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
            let part = s.get(r).ok_or_else(bad)?;
            if !part.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            part.parse::<i64>().map_err(|_| bad())
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || min > 59
            || sec > 60
        {
            return Err(bad());
        }
        let mut i = 19;
        let mut millis = 0i64;
        if b[i] == b'.' {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return Err(bad());
            }
            let frac = &s[start..i];
            let padded: String = frac.chars().chain("000".chars()).take(3).collect();
            millis = padded.parse::<i64>().map_err(|_| bad())?;
        }
        let offset_min = match b.get(i) {
            Some(b'Z') | Some(b'z') if i + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
                let h = num(i + 1..i + 3)?;
                let m = num(i + 4..i + 6)?;
                let v = h * 60 + m;
                if *sign == b'-' { -v } else { v }
            }
            _ => return Err(bad()),
        };
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_min * 60;
        Ok(Timestamp(secs * 1000 + millis))
    }

    /// The time as the API server stores it (`metav1.Time`: whole seconds). Times the
    /// controllers write into objects use this, so what they expect to read back is what the
    /// server returns.
    pub fn to_api_precision(self) -> Timestamp {
        Timestamp(self.0.div_euclid(1000) * 1000)
    }

    /// Formats as RFC 3339 in UTC with second precision, like `metav1.Time` (`2024-01-01T00:05:00Z`).
    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let (hh, mm, ss) = (rem / 3600, (rem % 3600) / 60, rem % 60);
        if !(0..=9999).contains(&y) {
            return format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z");
        }
        // Every write stamps a time: digits into place, not through the formatting machinery.
        let mut out = *b"0000-00-00T00:00:00Z";
        for (at, width, value) in [
            (0, 4, y),
            (5, 2, m),
            (8, 2, d),
            (11, 2, hh),
            (14, 2, mm),
            (17, 2, ss),
        ] {
            let mut value = value;
            for slot in out[at..at + width].iter_mut().rev() {
                *slot = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        out.iter().map(|&b| char::from(b)).collect()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        self.saturating_add(d)
    }
}

impl std::ops::Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(d.0))
    }
}

impl std::ops::Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl std::ops::Sub for Duration {
    type Output = Duration;
    fn sub(self, d: Duration) -> Duration {
        Duration(self.0.saturating_sub(d.0))
    }
}

impl fmt::Display for Duration {
    /// Go's `time.Duration.String()` for whole milliseconds: `10m0s`, `1h30m0s`, `1.5s`, `250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&go_duration_string(*self))
    }
}

fn go_duration_string(d: Duration) -> String {
    let ms = d.0;
    if ms == 0 {
        return "0s".to_string();
    }
    let neg = ms < 0;
    let abs = ms.unsigned_abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if abs < 1000 {
        out.push_str(&format!("{abs}ms"));
        return out;
    }
    let total_secs = abs / 1000;
    let frac_ms = abs % 1000;
    let hours = total_secs / 3600;
    let mins = (total_secs % 3600) / 60;
    let secs = total_secs % 60;
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || mins > 0 {
        out.push_str(&format!("{mins}m"));
    }
    if frac_ms == 0 {
        out.push_str(&format!("{secs}s"));
    } else {
        let frac = format!("{frac_ms:03}");
        out.push_str(&format!("{secs}.{}s", frac.trim_end_matches('0')));
    }
    out
}

/// Parses a Go / Kubernetes duration (`250ms`, `20s`, `5m`, `1h30m`, `1.5h`, `0`).
///
/// A bare integer other than `0` is rejected, as Go's `time.ParseDuration` does; the error says
/// what to write instead. Units: `ms`, `s`, `m`, `h` (and `us`/`ns`, truncated to milliseconds).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration (use e.g. 30s)".to_string());
    }
    let (neg, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("{s:?} is not a duration (use {rest}s)"));
    }
    let mut total_ns: i128 = 0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{s:?} is not a duration: missing unit"))?;
        if num_end == 0 {
            return Err(format!("{s:?} is not a duration (use e.g. 30s, 5m, 1h30m)"));
        }
        let number = &rest[..num_end];
        let after = &rest[num_end..];
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let unit = &after[..unit_end];
        let unit_ns: i128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("{s:?} is not a duration: unknown unit {unit:?}")),
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(format!("{s:?} is not a duration"));
        }
        let int_v: i128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| format!("{s:?} is not a duration: bad number"))?
        };
        let mut value = int_v
            .checked_mul(unit_ns)
            .ok_or_else(|| format!("{s:?} is out of range"))?;
        let mut scale = unit_ns;
        for digit in frac_part.bytes() {
            if !digit.is_ascii_digit() {
                return Err(format!("{s:?} is not a duration: bad number"));
            }
            scale /= 10;
            value += i128::from(digit - b'0') * scale;
        }
        total_ns = total_ns
            .checked_add(value)
            .ok_or_else(|| format!("{s:?} is out of range"))?;
        rest = &after[unit_end..];
    }
    let ms = total_ns / 1_000_000;
    let ms = i64::try_from(ms).map_err(|_| format!("{s:?} is out of range"))?;
    Ok(Duration(if neg { -ms } else { ms }))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse_go_duration("250ms"), Ok(Duration(250)));
        assert_eq!(parse_go_duration("20s"), Ok(Duration(20_000)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration(5_400_000)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration(1500)));
        assert_eq!(parse_go_duration("0"), Ok(Duration(0)));
        assert_eq!(parse_go_duration("-5s"), Ok(Duration(-5000)));
    }

    #[test]
    fn bare_integers_and_junk_are_rejected_with_a_hint() {
        assert_eq!(
            parse_go_duration("30"),
            Err("\"30\" is not a duration (use 30s)".to_string())
        );
        assert!(parse_go_duration("5x").is_err());
        assert!(parse_go_duration("s").is_err());
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(Duration::from_mins(10).to_string(), "10m0s");
        assert_eq!(Duration::from_secs(5400).to_string(), "1h30m0s");
        assert_eq!(Duration(1500).to_string(), "1.5s");
        assert_eq!(Duration(250).to_string(), "250ms");
        assert_eq!(Duration::from_secs(3600).to_string(), "1h0m0s");
        assert_eq!(Duration::ZERO.to_string(), "0s");
    }

    #[test]
    fn api_precision_is_whole_seconds_rounded_down() {
        assert_eq!(Timestamp(1_999).to_api_precision(), Timestamp(1_000));
        assert_eq!(Timestamp(2_000).to_api_precision(), Timestamp(2_000));
        assert_eq!(Timestamp(-1).to_api_precision(), Timestamp(-1_000));
        let t = Timestamp(1_704_067_200_123);
        assert_eq!(
            Timestamp::parse_rfc3339(&t.to_rfc3339()).ok(),
            Some(t.to_api_precision()),
            "what is written reads back as the API-precision time"
        );
    }

    #[test]
    fn rfc3339_is_written_as_the_formatter_writes_it() {
        let formatted = |t: Timestamp| {
            let secs = t.0.div_euclid(1000);
            let rem = secs.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            let (hh, mm, ss) = (rem / 3600, (rem % 3600) / 60, rem % 60);
            format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
        };
        let mut t: i64 = -62_167_219_200_000 - 86_400_000; // a day before 0000-01-01
        while t < 253_402_300_800_000 + 86_400_000 {
            assert_eq!(Timestamp(t).to_rfc3339(), formatted(Timestamp(t)), "{t}");
            t += 7_919_999_999; // about three months, never on a boundary twice
        }
        for t in [
            0,
            999,
            1_704_067_199_999,
            253_402_300_799_999,
            253_402_300_800_000,
        ] {
            assert_eq!(Timestamp(t).to_rfc3339(), formatted(Timestamp(t)), "{t}");
        }
    }

    #[test]
    fn rfc3339_round_trips() {
        let t = Timestamp::parse_rfc3339("2024-01-01T00:05:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2024-01-01T00:05:00Z");
        assert_eq!(t.as_millis(), 1_704_067_500_000);
        let off = Timestamp::parse_rfc3339("2024-01-01T01:05:00.5+01:00").unwrap();
        assert_eq!(off.as_millis(), 1_704_067_500_500);
        assert!(Timestamp::parse_rfc3339("2024-13-01T00:00:00Z").is_err());
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
    }
}
