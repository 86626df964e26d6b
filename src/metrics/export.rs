//! Prometheus text for `/metrics`: at each scrape, reads a plain snapshot that the
//! wiring provides and has it write itself, family by family, through a [`Writer`]
//! (`prometheus-client`'s OpenMetrics encoder underneath).
//!
//! The families themselves (name, help, labels) are declared by the components that
//! count them, beside their metric structs; this module knows none of them. Metric
//! names are documented in the README ("Metrics"); keep the two in step.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::HistogramSnapshot;

/// The content type of [`Exporter::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A metric family as the component that counts it describes it. Counters are named
/// without `_total` and histograms without `_seconds`: the encoder adds them.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
}

/// A plain snapshot of some metrics that can write itself as metric families.
pub trait Report {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result;
}

/// No labels, for a family with a single series.
pub const NO_LABELS: [(&str, &str); 0] = [];

/// Writes metric families, one call per family, each with all its series.
pub struct Writer<'a> {
    enc: DescriptorEncoder<'a>,
}

impl Writer<'_> {
    pub fn counter<L: EncodeLabelSet>(
        &mut self,
        family: &Family,
        series: impl IntoIterator<Item = (L, u64)>,
    ) -> std::fmt::Result {
        let mut metric =
            self.enc.encode_descriptor(family.name, family.help, None, MetricType::Counter)?;
        for (labels, value) in series {
            metric.encode_family(&labels)?.encode_counter::<NoLabelSet, u64, u64>(&value, None)?;
        }
        Ok(())
    }

    pub fn gauge<L: EncodeLabelSet>(
        &mut self,
        family: &Family,
        series: impl IntoIterator<Item = (L, u64)>,
    ) -> std::fmt::Result {
        let mut metric =
            self.enc.encode_descriptor(family.name, family.help, None, MetricType::Gauge)?;
        for (labels, value) in series {
            metric.encode_family(&labels)?.encode_gauge(&value)?;
        }
        Ok(())
    }

    /// A histogram of durations, in seconds.
    pub fn histogram<'h, L: EncodeLabelSet>(
        &mut self,
        family: &Family,
        series: impl IntoIterator<Item = (L, &'h HistogramSnapshot)>,
    ) -> std::fmt::Result {
        let mut metric = self.enc.encode_descriptor(
            family.name,
            family.help,
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (labels, h) in series {
            metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                h.sum_seconds,
                h.count,
                &h.buckets,
                None,
            )?;
        }
        Ok(())
    }

    /// An info metric: one series whose labels are the information.
    pub fn info<L: EncodeLabelSet>(&mut self, family: &Family, labels: L) -> std::fmt::Result {
        let mut info =
            self.enc.encode_descriptor(family.name, family.help, None, MetricType::Info)?;
        info.encode_info(&labels)
    }
}

/// Reads a snapshot and writes it, at each scrape.
type Scrape = Box<dyn Fn(&mut Writer<'_>) -> std::fmt::Result + Send + Sync>;

/// Everything `/metrics` shows.
pub struct Exporter {
    registry: Registry,
}

impl Exporter {
    /// An exporter that calls `read` at each scrape and writes what it returns.
    pub fn new<S: Report>(read: impl Fn() -> S + Send + Sync + 'static) -> Self {
        let mut registry = Registry::default();
        let scrape: Scrape = Box::new(move |out| read().report(out));
        registry.register_collector(Box::new(Source { scrape }));
        Exporter { registry }
    }

    /// The current value of every metric, in OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The one collector in the registry: the snapshot reader.
struct Source {
    scrape: Scrape,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source").finish_non_exhaustive()
    }
}

impl Collector for Source {
    fn encode(&self, enc: DescriptorEncoder<'_>) -> std::fmt::Result {
        (self.scrape)(&mut Writer { enc })
    }
}
