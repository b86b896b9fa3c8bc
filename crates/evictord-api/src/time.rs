//! Decoding the timestamps of the custom resources. kube-apiserver writes every `metav1.Time` as
//! `YYYY-MM-DDTHH:MM:SSZ` (seconds precision, UTC); jiff's general parser, which k8s-openapi's
//! [`Time`] uses, spends about 40 ns on each: 8.5% of decoding an interceptor's heartbeat review
//! (ten timestamps; perf of `benches/review.rs`). [`opt_time`] reads that form (and a fraction of
//! up to nine digits) directly and hands every other string to jiff, so that what is accepted,
//! the value decoded and the error of a malformed timestamp are exactly jiff's.

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::de::{self, Deserializer, Visitor};

/// `s` as a timestamp when it has the form `YYYY-MM-DDTHH:MM:SS[.F{1,9}]Z` with a valid date
/// and time; `None` for anything else (which may still be a timestamp jiff reads: an offset, a
/// lower-case `t`, a leap second, a comma before the fraction).
pub fn parse_utc(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if (1..=9).contains(&fraction.len()) => {
            digits(fraction)? * 10i64.pow(9 - fraction.len() as u32)
        }
        _ => return None,
    };
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Timestamp::new(secs, i32::try_from(nanos).ok()?).ok()
}

/// The value of ASCII decimal digits (at most nine: no overflow).
fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
    })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `#[serde(deserialize_with = "opt_time")]` for an `Option<Time>` field: `null` or a
/// timestamp, decoded as k8s-openapi decodes it (the same values, the same errors), faster and
/// without copying the string.
///
/// # Errors
/// When the value is neither `null` nor a string jiff reads as a timestamp.
pub fn opt_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    d.deserialize_option(OptionalTime)
}

struct OptionalTime;

impl<'de> Visitor<'de> for OptionalTime {
    type Value = Option<Time>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a timestamp string or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(TimeText).map(Some)
    }
}

/// A timestamp string, as jiff's own visitor reads it (same expectation, same errors).
struct TimeText;

impl Visitor<'_> for TimeText {
    type Value = Time;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a timestamp string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Time, E> {
        match parse_utc(v) {
            Some(t) => Ok(Time(t)),
            None => v.parse::<Timestamp>().map(Time).map_err(E::custom),
        }
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Time, E> {
        match std::str::from_utf8(v) {
            Ok(text) => self.visit_str(text),
            // jiff reads bytes; its error for these is the one to give.
            Err(_) => jiff::fmt::temporal::DateTimeParser::new()
                .parse_timestamp(v)
                .map(Time)
                .map_err(E::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rstest::rstest;
    use serde::Deserialize;

    use super::*;

    /// A field decoded the fast way.
    #[derive(Deserialize, Debug)]
    struct Fast {
        #[serde(default, deserialize_with = "opt_time")]
        t: Option<Time>,
    }

    /// The same field as k8s-openapi decodes it.
    #[derive(Deserialize, Debug)]
    struct Reference {
        #[serde(default)]
        t: Option<Time>,
    }

    /// Both decodings of `json`: the same value, or the same error message.
    fn assert_same(json: &str) {
        let fast = serde_json::from_str::<Fast>(json).map(|f| f.t);
        let reference = serde_json::from_str::<Reference>(json).map(|r| r.t);
        match (&fast, &reference) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{json}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{json}"),
            _ => panic!("{json}: fast {fast:?}, k8s-openapi {reference:?}"),
        }
    }

    #[rstest]
    #[case::seconds("2025-12-31T23:50:00Z", Some(1_767_225_000_000_000_000))]
    #[case::epoch("1970-01-01T00:00:00Z", Some(0))]
    #[case::before_epoch("1969-12-31T23:59:59Z", Some(-1_000_000_000))]
    #[case::fraction_of_one_digit("2026-01-01T00:00:00.5Z", Some(1_767_225_600_500_000_000))]
    #[case::fraction_of_nine_digits(
        "2026-01-01T00:00:00.123456789Z",
        Some(1_767_225_600_123_456_789)
    )]
    #[case::leap_day("2024-02-29T12:00:00Z", Some(1_709_208_000_000_000_000))]
    #[case::leap_day_of_a_century_divisible_by_400(
        "2000-02-29T00:00:00Z",
        Some(951_782_400_000_000_000)
    )]
    #[case::no_leap_day_in_2023("2023-02-29T00:00:00Z", None)]
    #[case::no_leap_day_in_1900("1900-02-29T00:00:00Z", None)]
    #[case::april_31("2026-04-31T00:00:00Z", None)]
    #[case::month_13("2026-13-01T00:00:00Z", None)]
    #[case::day_0("2026-01-00T00:00:00Z", None)]
    #[case::hour_24("2026-01-01T24:00:00Z", None)]
    #[case::leap_second("2016-12-31T23:59:60Z", None)]
    #[case::offset("2026-01-01T01:00:00+01:00", None)]
    #[case::lower_case("2026-01-01t00:00:00z", None)]
    #[case::comma_fraction("2026-01-01T00:00:00,5Z", None)]
    #[case::ten_digit_fraction("2026-01-01T00:00:00.1234567890Z", None)]
    #[case::empty_fraction("2026-01-01T00:00:00.Z", None)]
    #[case::sign_in_a_field("2026-01-+1T00:00:00Z", None)]
    #[case::beyond_jiffs_range("9999-12-31T23:59:59Z", None)]
    #[case::short("2026-01-01T00:00Z", None)]
    fn the_fast_path_reads_only_what_it_must_and_agrees_with_jiff(
        #[case] text: &str,
        #[case] nanos: Option<i128>,
    ) {
        let fast = parse_utc(text);
        assert_eq!(fast.map(|t| t.as_nanosecond()), nanos, "{text}");
        // Whatever the fast path leaves, the decoder hands to jiff: same value, same error.
        assert_same(&format!(r#"{{"t": "{text}"}}"#));
    }

    #[rstest]
    #[case::missing("{}")]
    #[case::null(r#"{"t": null}"#)]
    #[case::number(r#"{"t": 5}"#)]
    #[case::object(r#"{"t": {}}"#)]
    #[case::empty(r#"{"t": ""}"#)]
    #[case::escaped(r#"{"t": "2026-01-01T00:00:00\u005A"}"#)]
    fn other_values_decode_as_k8s_openapi_decodes_them(#[case] json: &str) {
        assert_same(json);
    }

    proptest! {
        /// Every timestamp jiff can hold, written as kube-apiserver writes it (with a fraction of
        /// 0 to 9 digits), reads back to itself.
        #[test]
        fn written_timestamps_read_back(
            secs in Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
            nanos in 0u32..1_000_000_000,
            digits in 0usize..=9,
        ) {
            let kept = nanos / 10u32.pow(9 - digits as u32) * 10u32.pow(9 - digits as u32);
            if let Ok(t) = Timestamp::new(secs, kept as i32) {
                let mut text = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
                if digits > 0 {
                    text.push_str(&format!(".{:0width$}", kept / 10u32.pow(9 - digits as u32), width = digits));
                }
                text.push('Z');
                if text.len() >= 20 && !text.starts_with('-') {
                    prop_assert_eq!(parse_utc(&text), Some(t), "{}", text);
                }
                assert_same(&format!(r#"{{"t": "{text}"}}"#));
            }
        }

        /// Strings of nearly the right shape, valid or not: the fast decoder and k8s-openapi's
        /// agree on each (value or error).
        #[test]
        fn near_misses_decode_as_jiff_decodes_them(
            text in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,10})?(Z|z|\\+01:00|)"
        ) {
            assert_same(&format!(r#"{{"t": "{text}"}}"#));
        }
    }
}
