//! The exposition: `prometheus-client`'s OpenMetrics text with each histogram bucket's bound
//! written as Go's client writes it.

use std::fmt;

use prometheus_client::registry::Registry;

/// The content type of the exposition [`encode`] writes: OpenMetrics text 1.0.0, in UTF-8.
///
/// # Examples
///
/// ```
/// // The header an HTTP handler serving the exposition sets.
/// let header = ("content-type", ctrlq_queue_async::prometheus::CONTENT_TYPE);
/// assert!(header.1.starts_with("application/openmetrics-text; version=1.0.0"));
/// ```
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Writes every metric of `registry` in the OpenMetrics text format, ending with `# EOF`, as
/// `prometheus_client::encoding::text::encode` does, except that the bound of every histogram
/// bucket in it (its `le` label) is written as Go's Prometheus client writes it
/// (`strconv.FormatFloat(bound, 'g', -1, 64)`): `1`, `10`, `0.005`, `1e-06`, `+Inf`, where
/// `prometheus-client` writes `1.0`, `10.0`, `0.005`, `0.000001`, `+Inf`. Serve it with
/// [`CONTENT_TYPE`].
///
/// This applies to every histogram of the registry, the application's own included.
///
/// # Errors
///
/// What `prometheus_client::encoding::text::encode` or `writer` returns.
///
/// # Examples
///
/// ```
/// use prometheus_client::metrics::histogram::Histogram;
/// use prometheus_client::registry::Registry;
///
/// let mut registry = Registry::default();
/// registry.register("latency_seconds", "Latency", Histogram::new([0.5, 1.0]));
/// let mut text = String::new();
/// ctrlq_queue_async::prometheus::encode(&mut text, &registry).unwrap();
/// assert!(text.contains("latency_seconds_bucket{le=\"0.5\"} 0\n"));
/// assert!(text.contains("latency_seconds_bucket{le=\"1\"} 0\n"));
/// assert!(text.contains("latency_seconds_bucket{le=\"+Inf\"} 0\n"));
/// assert!(text.ends_with("# EOF\n"));
/// ```
pub fn encode(writer: &mut impl fmt::Write, registry: &Registry) -> fmt::Result {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    write_go_bounds(writer, &text)
}

/// Copies the exposition `text` to `out`, each histogram bucket's `le` value rewritten in Go's
/// form.
fn write_go_bounds(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    // The family whose samples follow, if it is a histogram.
    let mut histogram: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            histogram = match rest.trim_end().split_once(' ') {
                Some((name, "histogram" | "gaugehistogram")) => Some(name),
                _ => None,
            };
        } else if let Some((start, end)) = histogram.and_then(|family| bucket_bound(line, family))
            && let Ok(value) = line[start..end].parse::<f64>()
        {
            out.write_str(&line[..start])?;
            write_go_float(out, value)?;
            out.write_str(&line[end..])?;
            continue;
        }
        out.write_str(line)?;
    }
    Ok(())
}

/// Where the `le` label's value lies in `line` (a byte range), if the line is a bucket sample
/// of histogram `family`.
fn bucket_bound(line: &str, family: &str) -> Option<(usize, usize)> {
    // `name="value"` pairs, comma-separated; a backslash escapes the next byte of a value.
    let mut rest = line.strip_prefix(family)?.strip_prefix("_bucket{")?;
    loop {
        let (name, value) = rest.split_once("=\"")?;
        let bytes = value.as_bytes();
        let mut len = 0;
        while *bytes.get(len)? != b'"' {
            len += if bytes[len] == b'\\' { 2 } else { 1 };
        }
        if name == "le" {
            let start = line.len() - value.len();
            return Some((start, start + len));
        }
        rest = value.get(len + 1..)?.strip_prefix(',')?;
    }
}

/// Writes `value` as Go's Prometheus client writes a float: `strconv.FormatFloat(value, 'g',
/// -1, 64)` (the shortest digits that read back as `value`; an exponent, of at least two
/// digits, below 1e-4 and from 1e+06 on), with `+Inf`, `-Inf`, `NaN` and `0`.
fn write_go_float(out: &mut impl fmt::Write, value: f64) -> fmt::Result {
    if value.is_nan() {
        return out.write_str("NaN");
    }
    if value.is_infinite() {
        return out.write_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    }
    if value == 0.0 {
        return out.write_str("0");
    }
    // Rust's `{:e}` and `{}` write the same shortest digits as Go: `[-]d[.ddd]e[-]x`, and the
    // plain decimal Go writes for exponents from -4 to 5.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` of a finite float has an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    if (-4..6).contains(&exponent) {
        return write!(out, "{value}");
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    write!(out, "{mantissa}e{sign}{:02}", exponent.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(value: f64) -> String {
        let mut out = String::new();
        write_go_float(&mut out, value).unwrap();
        out
    }

    /// The outputs of Go's `strconv.FormatFloat(v, 'g', -1, 64)` (and client_golang's
    /// `writeFloat` for the specials).
    #[test]
    fn floats_are_written_as_go_writes_them() {
        let cases = [
            (1.0, "1"),
            (10.0, "10"),
            (60.0, "60"),
            (1.25, "1.25"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e-8, "1e-08"),
            (1e-6 * 10.0, "9.999999999999999e-06"),
            (123_456.0, "123456"),
            (1e6, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (5e-324, "5e-324"),
            (-2.5, "-2.5"),
            (-0.0, "0"),
            (0.0, "0"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (value, expected) in cases {
            assert_eq!(go(value), expected, "{value:e}");
        }
    }

    /// Only the `le` of a histogram's bucket samples changes: a label value that looks like
    /// one, a gauge's sample ending in `_bucket` and the comment lines stay as they are.
    #[test]
    fn only_histogram_bucket_bounds_are_rewritten() {
        let text = "# HELP h_seconds H.\n\
                    # TYPE h_seconds histogram\n\
                    h_seconds_sum{a=\"x\\\",le=\\\"2.0\"} 1.0\n\
                    h_seconds_bucket{a=\"x\\\",le=\\\"2.0\",le=\"1.0\"} 1\n\
                    h_seconds_bucket{le=\"+Inf\",a=\"1.0\"} 1\n\
                    # HELP g_bucket G.\n\
                    # TYPE g_bucket gauge\n\
                    g_bucket{le=\"1.0\"} 1.0\n\
                    # EOF\n";
        let mut out = String::new();
        write_go_bounds(&mut out, text).unwrap();
        let expected = text.replace(",le=\"1.0\"} 1\n", ",le=\"1\"} 1\n");
        assert_ne!(expected, text);
        assert_eq!(out, expected);
    }
}
