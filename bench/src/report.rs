//! What the benchmarks report: one table of rows (a measure, its figure,
//! the goal it is held to, and whether it met it), the machine they ran on,
//! and the arithmetic behind medians and tails.
//!
//! Must never: fail the run because a goal was missed. A missed goal is a
//! row that says so; only a part that could not run at all is an error.

use std::fmt::Write as _;
use std::time::Duration;

/// Whether a figure met its goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The goal was met.
    Met,
    /// The goal was missed.
    Missed,
    /// Reported for information; no goal.
    Info,
}

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub part: &'static str,
    pub measure: String,
    pub result: String,
    pub goal: String,
    pub verdict: Verdict,
}

/// Everything measured in one run, in order.
#[derive(Debug, Default)]
pub struct Report {
    rows: Vec<Row>,
    timings: Vec<(&'static str, Result<Duration, String>)>,
}

impl Report {
    /// A figure without a goal.
    pub fn info(&mut self, part: &'static str, measure: impl Into<String>, result: String) {
        self.push(Row {
            part,
            measure: measure.into(),
            result,
            goal: String::new(),
            verdict: Verdict::Info,
        });
    }

    /// A figure held to `goal`.
    pub fn goal(
        &mut self,
        part: &'static str,
        measure: impl Into<String>,
        result: String,
        goal: &str,
        met: bool,
    ) {
        self.push(Row {
            part,
            measure: measure.into(),
            result,
            goal: goal.to_string(),
            verdict: if met { Verdict::Met } else { Verdict::Missed },
        });
    }

    fn push(&mut self, row: Row) {
        // Print as we go: the full table comes at the end, but a long run
        // should show progress.
        println!(
            "  {:<22} {:<58} {:>26}  {}",
            row.part,
            row.measure,
            row.result,
            verdict_text(&row)
        );
        self.rows.push(row);
    }

    /// How long a part took, or why it could not run.
    pub fn timed(&mut self, part: &'static str, outcome: Result<Duration, String>) {
        self.timings.push((part, outcome));
    }

    /// Whether every part ran (missed goals do not count against it).
    pub fn all_ran(&self) -> bool {
        self.timings.iter().all(|(_, t)| t.is_ok())
    }

    /// The table in Markdown, then how long each part took.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str("| part | measure | result | goal | met |\n");
        out.push_str("|---|---|---:|---|---|\n");
        for row in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                row.part,
                row.measure,
                row.result,
                row.goal,
                verdict_text(row)
            );
        }
        out.push('\n');
        out.push_str("| part | time |\n|---|---:|\n");
        for (part, outcome) in &self.timings {
            let text = match outcome {
                Ok(d) => format!("{:.1} s", d.as_secs_f64()),
                Err(e) => format!("did not run: {e}"),
            };
            let _ = writeln!(out, "| {part} | {text} |");
        }
        out
    }
}

fn verdict_text(row: &Row) -> &'static str {
    match row.verdict {
        Verdict::Met => "yes",
        Verdict::Missed => "**no**",
        Verdict::Info => "",
    }
}

/// Latency samples and their order statistics.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<Duration>,
    sorted: bool,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            values: Vec::with_capacity(n),
            sorted: true,
        }
    }

    pub fn push(&mut self, value: Duration) {
        self.values.push(value);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The nearest-rank percentile (`p` in 0..=100); zero when empty.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.values.is_empty() {
            return Duration::ZERO;
        }
        if !self.sorted {
            self.values.sort_unstable();
            self.sorted = true;
        }
        let rank = ((p / 100.0) * self.values.len() as f64).ceil() as usize;
        self.values[rank.clamp(1, self.values.len()) - 1]
    }

    pub fn p50(&mut self) -> Duration {
        self.percentile(50.0)
    }

    pub fn p99(&mut self) -> Duration {
        self.percentile(99.0)
    }

    pub fn max(&mut self) -> Duration {
        self.percentile(100.0)
    }

    /// "p50 X / p99 Y (n runs)".
    pub fn summary(&mut self) -> String {
        format!(
            "p50 {} / p99 {} (n={})",
            duration(self.p50()),
            duration(self.p99()),
            self.len()
        )
    }
}

/// The median of plain numbers (zero when empty).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// A duration with a unit that keeps three significant digits.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// A rate with thousands separators, e.g. `21,345/s`.
pub fn rate(per_second: f64) -> String {
    format!("{}/s", thousands(per_second.round() as u64))
}

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A ratio as `1.23x`.
pub fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The machine a run happened on, read from the kernel (Linux).
pub fn machine() -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or_else(
            || "unknown".into(),
            |kb| format!("{:.1} GiB", kb as f64 / 1048576.0),
        );
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let build = if cfg!(debug_assertions) {
        "DEBUG build (figures do not count; use the release build)"
    } else {
        "release build"
    };
    format!(
        "{cpu}, {cores} logical CPUs available, {memory} RAM, Linux {kernel}, {build}, load average {}",
        load_average()
    )
}

/// The 1-minute load average: other work on the machine skews every
/// figure, so each run says how busy the machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut s = Samples::default();
        for ms in 1..=100 {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.p50(), Duration::from_millis(50));
        assert_eq!(s.p99(), Duration::from_millis(99));
        assert_eq!(s.max(), Duration::from_millis(100));
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(duration(Duration::from_micros(42)), "42.0 µs");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
