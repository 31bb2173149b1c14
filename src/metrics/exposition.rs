//! The exposition: what a scrape returns, built once from the registry and
//! written in either of the two formats scrapers ask for.
//!
//! | format | content type | counter family named | ends with |
//! | --- | --- | --- | --- |
//! | [`Format::Text`] (Prometheus text 0.0.4) | `text/plain; version=0.0.4` | `x_total` | last sample |
//! | [`Format::OpenMetrics`] (1.0.0) | `application/openmetrics-text; version=1.0.0` | `x` | `# EOF` |
//!
//! In both the samples are the same lines: a counter sample is always
//! `x_total`, histogram samples are `x_bucket` (with `le` first among the
//! labels), `x_sum` and `x_count`. OpenMetrics is written by
//! `prometheus-client` (through a collector over the same families);
//! the text format by `write_text`, which lays numbers out as that crate
//! does so that a bucket's `le` is the same string in both.

use std::fmt::{self, Write};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Content type of [`Format::Text`].
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of [`Format::OpenMetrics`].
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The two exposition formats served at `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4: what `promtool check
    /// metrics` reads and what a scraper gets unless it asks for
    /// OpenMetrics.
    Text,
    /// OpenMetrics 1.0.0 text, for scrapers that ask for it (Prometheus
    /// does, by default).
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub const fn content_type(self) -> &'static str {
        match self {
            Self::Text => TEXT_CONTENT_TYPE,
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }

    /// The format a request's `Accept` header asks for: OpenMetrics when it
    /// names `application/openmetrics-text` with a quality above zero and
    /// no lower than the one it gives `text/plain`, the text format
    /// otherwise (no header, wildcards, anything else).
    ///
    /// ```ignore
    /// use crate::metrics::Format;
    ///
    /// // What Prometheus 2.x sends.
    /// let prometheus = "application/openmetrics-text;version=1.0.0,\
    ///     application/openmetrics-text;version=0.0.1;q=0.75,\
    ///     text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
    /// assert_eq!(Format::from_accept(Some("*/*")), Format::Text);
    /// assert_eq!(Format::from_accept(None), Format::Text);
    /// ```
    pub fn from_accept(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Text;
        };
        let mut openmetrics = 0.0f32;
        let mut text = 0.0f32;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            let quality = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
                .filter(|q| q.is_finite())
                .unwrap_or(0.0);
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics = openmetrics.max(quality);
            } else if media.eq_ignore_ascii_case("text/plain") {
                text = text.max(quality);
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }
}

/// What a family of series is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One value of a family, with its labels.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// Label names and values, values already escaped for the text formats.
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

/// A sample's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Int(u64),
    Float(f64),
    /// Bucket upper bounds (the last one `f64::MAX`, written `+Inf`) with
    /// the count of each bucket alone; the writers accumulate.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// A metric family: a name, its help text, its kind and its samples.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Family {
    /// The sample name: counters end in `_total`; histograms give the base
    /// name of their `_bucket`, `_sum` and `_count` samples.
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

impl Family {
    pub(crate) const fn new(name: &'static str, help: &'static str, kind: Kind) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, labels: Vec<(&'static str, String)>, value: Value) {
        self.samples.push(Sample { labels, value });
    }

    /// The name OpenMetrics gives the family: without `_total` for counters.
    fn openmetrics_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            Kind::Gauge | Kind::Histogram => self.name,
        }
    }
}

/// Writes `families` in the Prometheus text format 0.0.4.
pub(crate) fn write_text(out: &mut String, families: &[Family]) -> fmt::Result {
    for family in families {
        out.push_str("# HELP ");
        out.push_str(family.name);
        out.push(' ');
        escape_help(out, family.help);
        out.push_str("\n# TYPE ");
        out.push_str(family.name);
        out.push_str(match family.kind {
            Kind::Counter => " counter\n",
            Kind::Gauge => " gauge\n",
            Kind::Histogram => " histogram\n",
        });
        for sample in &family.samples {
            match &sample.value {
                Value::Int(v) => {
                    write_line(out, family.name, "", None, &sample.labels)?;
                    writeln!(out, "{v}")?;
                }
                Value::Float(v) => {
                    write_line(out, family.name, "", None, &sample.labels)?;
                    write_float(out, *v)?;
                    out.push('\n');
                }
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                } => {
                    write_line(out, family.name, "_sum", None, &sample.labels)?;
                    write_float(out, *sum)?;
                    out.push('\n');
                    write_line(out, family.name, "_count", None, &sample.labels)?;
                    writeln!(out, "{count}")?;
                    let mut cumulative = 0u64;
                    let mut le = String::new();
                    for (bound, n) in buckets {
                        cumulative = cumulative.saturating_add(*n);
                        le.clear();
                        if *bound == f64::MAX {
                            le.push_str("+Inf");
                        } else {
                            write_float(&mut le, *bound)?;
                        }
                        write_line(out, family.name, "_bucket", Some(&le), &sample.labels)?;
                        writeln!(out, "{cumulative}")?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// `name{le="..",labels} ` up to the value. `le` comes first, as
/// `prometheus-client` writes it, so both formats have the same lines.
fn write_line(
    out: &mut String,
    name: &str,
    suffix: &str,
    le: Option<&str>,
    labels: &[(&'static str, String)],
) -> fmt::Result {
    out.push_str(name);
    out.push_str(suffix);
    let mut first = true;
    let mut label = |out: &mut String, key: &str, value: &str| {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(key);
        out.push_str("=\"");
        out.push_str(value);
        out.push('"');
    };
    if let Some(le) = le {
        label(out, "le", le);
    }
    for (key, value) in labels {
        label(out, key, value);
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    Ok(())
}

/// Help text with `\` and line feeds escaped, as the text format requires.
fn escape_help(out: &mut String, help: &str) {
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A float laid out as `prometheus-client` lays it out (the rules of Milo
/// Yip's `dtoa` prettifier): integral values up to 21 digits get `.0`,
/// values from 1e-6 up to 1e21 are written plainly, others as `d.ddde-7`.
/// The digits are the shortest that round-trip; the crate's are now and
/// then one longer, never for the bucket bounds exported here (a test
/// checks every one), so a bucket's `le` reads the same in both formats.
fn write_float(out: &mut String, value: f64) -> fmt::Result {
    if value.is_nan() {
        out.push_str("NaN");
        return Ok(());
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        return Ok(());
    }
    if value == 0.0 {
        out.push_str(if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        });
        return Ok(());
    }
    // Shortest round-trip digits and the decimal exponent of the first.
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let length = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    // 10^(kk-1) <= value < 10^kk; k is the exponent of the last digit.
    let kk = exponent + 1;
    let k = kk - length;
    if value < 0.0 {
        out.push('-');
    }
    if (0..=21).contains(&kk) && k >= 0 {
        out.push_str(&digits);
        for _ in 0..k {
            out.push('0');
        }
        out.push_str(".0");
    } else if 0 < kk && kk <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(kk).unwrap_or(0));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < kk && kk <= 0 {
        out.push_str("0.");
        for _ in 0..-kk {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        write!(out, "e{}", kk - 1)?;
    }
    Ok(())
}

/// A one-off collector that hands already built families to a
/// `prometheus-client` encoder.
#[derive(Debug)]
pub(crate) struct Families(pub Vec<Family>);

impl Collector for Families {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        encode_families(encoder, &self.0)
    }
}

/// Writes `families` through a `prometheus-client` encoder (OpenMetrics).
pub(crate) fn encode_families(mut encoder: DescriptorEncoder, families: &[Family]) -> fmt::Result {
    for family in families {
        let kind = match family.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        };
        let mut metric =
            encoder.encode_descriptor(family.openmetrics_name(), family.help, None, kind)?;
        for sample in &family.samples {
            if sample.labels.is_empty() {
                // A family encoder would write an empty `{}`.
                encode_value(&mut metric, family.kind, &sample.value)?;
                continue;
            }
            let labels: Vec<(&str, &str)> = sample
                .labels
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            encode_value(
                &mut metric.encode_family(&labels)?,
                family.kind,
                &sample.value,
            )?;
        }
    }
    Ok(())
}

fn encode_value(encoder: &mut MetricEncoder, kind: Kind, value: &Value) -> fmt::Result {
    match (value, kind) {
        (Value::Int(v), Kind::Counter) => encoder.encode_counter::<NoLabelSet, _, u64>(v, None),
        (Value::Float(v), Kind::Counter) => encoder.encode_counter::<NoLabelSet, _, f64>(v, None),
        (Value::Int(v), _) => encoder.encode_gauge(v),
        (Value::Float(v), _) => encoder.encode_gauge(v),
        (
            Value::Histogram {
                buckets,
                sum,
                count,
            },
            _,
        ) => encoder.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None),
    }
}

/// Writes `families` as OpenMetrics text, ending in `# EOF`.
pub(crate) fn write_openmetrics(out: &mut String, families: Vec<Family>) -> fmt::Result {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Families(families)));
    prometheus_client::encoding::text::encode(out, &registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(value: f64) -> String {
        let mut out = String::new();
        write_float(&mut out, value).unwrap_or_default();
        out
    }

    /// What `prometheus-client` writes for a gauge of `value`.
    fn reference(value: f64) -> String {
        let mut family = Family::new("x", "x.", Kind::Gauge);
        family.push(Vec::new(), Value::Float(value));
        let mut out = String::new();
        write_openmetrics(&mut out, vec![family]).unwrap_or_default();
        out.lines()
            .find_map(|l| l.strip_prefix("x "))
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn floats_are_laid_out_as_the_openmetrics_encoder_does() {
        // Every bucket bound exported: the same string in both formats.
        let (lo, hi) = (
            crate::metrics::LATENCY_POWS.0,
            crate::metrics::SNAPSHOT_POWS.1,
        );
        for k in lo..=hi {
            let bound = (1u64 << k) as f64 / 1e9;
            assert_eq!(float(bound), reference(bound), "2^{k} ns");
        }
        // Elsewhere the same layout and value; the encoder's digits are
        // sometimes one longer than the shortest.
        for value in [
            1.0,
            0.5,
            123.456,
            1_700_000_000.123_456_7,
            (1u64 << 54) as f64 / 1e9,
            1e21,
            1e22,
            1.5e-6,
            1e-6,
            9.99e-7,
            -2.5,
            3.0e15,
            0.1 + 0.2,
        ] {
            let (ours, theirs) = (float(value), reference(value));
            assert_eq!(ours.parse::<f64>().ok(), Some(value), "{ours}");
            assert_eq!(theirs.parse::<f64>().ok(), Some(value), "{theirs}");
            assert_eq!(ours.contains('e'), theirs.contains('e'), "{ours} {theirs}");
            assert_eq!(ours.find('.'), theirs.find('.'), "{ours} {theirs}");
        }
        assert_eq!(float(1e21), "1e21");
        assert_eq!(float(1.5e-7), "1.5e-7");
        assert_eq!(float(1_700_000_000.0), "1700000000.0");
        assert_eq!(float(0.000_001_024), "0.000001024");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(0.0), "0.0");
    }

    #[test]
    fn accept_header_picks_the_format() {
        let om = Some("application/openmetrics-text; version=1.0.0");
        assert_eq!(Format::from_accept(om), Format::OpenMetrics);
        let cases = [
            ("text/plain", Format::Text),
            ("TEXT/PLAIN;version=0.0.4", Format::Text),
            (
                "text/plain;q=0.9, application/openmetrics-text;q=0.5",
                Format::Text,
            ),
            (
                "text/plain;q=0.5, application/openmetrics-text",
                Format::OpenMetrics,
            ),
            ("application/openmetrics-text;q=0", Format::Text),
            ("application/openmetrics-text;q=nonsense", Format::Text),
            ("application/json", Format::Text),
            ("", Format::Text),
        ];
        for (accept, format) in cases {
            assert_eq!(Format::from_accept(Some(accept)), format, "{accept}");
        }
    }

    #[test]
    fn both_formats_carry_the_same_sample_lines() {
        let mut counter = Family::new("a_things_total", "Things.", Kind::Counter);
        counter.push(vec![("k", "v".into())], Value::Int(3));
        let mut gauge = Family::new("a_level", "Level.", Kind::Gauge);
        gauge.push(Vec::new(), Value::Float(0.25));
        let mut histogram = Family::new("a_seconds", "Time.", Kind::Histogram);
        histogram.push(
            vec![("k", "v".into())],
            Value::Histogram {
                buckets: vec![(1.28e-7, 2), (2.56e-7, 0), (f64::MAX, 1)],
                sum: 1.5,
                count: 3,
            },
        );
        let families = vec![counter, gauge, histogram];
        let mut text = String::new();
        write_text(&mut text, &families).unwrap_or_default();
        let mut om = String::new();
        write_openmetrics(&mut om, families).unwrap_or_default();
        let samples = |s: &str| {
            let mut lines: Vec<String> = s
                .lines()
                .filter(|l| !l.starts_with('#'))
                .map(String::from)
                .collect();
            lines.sort();
            lines
        };
        assert_eq!(samples(&text), samples(&om), "{text}\n{om}");
        assert!(text.contains("# TYPE a_things_total counter\n"));
        assert!(text.contains("a_seconds_bucket{le=\"+Inf\",k=\"v\"} 3\n"));
        assert!(text.contains("a_seconds_bucket{le=\"2.56e-7\",k=\"v\"} 2\n"));
        assert!(!text.contains("# EOF"));
        assert!(om.contains("# TYPE a_things counter\n") && om.ends_with("# EOF\n"));

        let mut escaped = String::new();
        let odd = Family::new("a_odd", "back\\slash\nbreak", Kind::Gauge);
        write_text(&mut escaped, &[odd]).unwrap_or_default();
        assert!(
            escaped.starts_with("# HELP a_odd back\\\\slash\\nbreak\n"),
            "{escaped}"
        );
    }
}
