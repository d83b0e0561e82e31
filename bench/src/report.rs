//! What the benchmarks report: one table of rows (a measure, its figure,
//! the goal it is held to, and whether it met it), the machine they ran on,
//! and the arithmetic behind medians, tails, spreads across repeats and the
//! A/A noise control every ratio is printed with.
//!
//! Must never: fail the run because a goal was missed (a missed goal is a
//! row that says so; only a part that could not run at all is an error);
//! report the best of several repeats as the figure (repeated parts print
//! min / median / max).

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
    /// A ratio whose A/A control lay outside the noise its goal states:
    /// the run cannot tell whether the goal was met.
    NotJudged,
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

    /// A ratio held to `goal`, judged only when the A/A control of
    /// `compared` lies within `noise` of 1.00 (the noise the goal states; see
    /// [`Comparison::within_noise`]); otherwise the row says "not judged".
    /// The control's median and the stated noise are added to the figure.
    pub fn compared_goal(
        &mut self,
        part: &'static str,
        measure: impl Into<String>,
        result: String,
        goal: &str,
        met: bool,
        (compared, noise): (&Comparison, f64),
    ) {
        let judged = compared.within_noise(noise);
        let result = format!(
            "{result}; A/A median {} ({} the stated noise ±{noise:.2})",
            ratio(compared.aa.median),
            if judged { "within" } else { "outside" }
        );
        self.push(Row {
            part,
            measure: measure.into(),
            result,
            goal: goal.to_string(),
            verdict: match (judged, met) {
                (false, _) => Verdict::NotJudged,
                (true, true) => Verdict::Met,
                (true, false) => Verdict::Missed,
            },
        });
    }

    /// The machine's load at a part's start and end, and whether it made
    /// the part's figures unreliable (a 1-minute load above the CPUs the
    /// run may use, at either end: runnable threads waited for a core).
    /// A busy part's goal rows say so beside their verdict.
    pub fn load(&mut self, part: &'static str, start: &Load, end: &Load, cpus: usize) {
        let busy = start.busy(cpus) || end.busy(cpus);
        let mut result = format!("{start}; {end}; {cpus} CPUs");
        if busy {
            result.push_str(
                "; **busy**: the 1-minute load exceeded the CPUs, so threads waited for a core \
                 and this part's latencies and ratios are unreliable",
            );
            for row in self.rows.iter_mut().filter(|r| r.part == part) {
                if row.verdict != Verdict::Info && !row.result.ends_with(BUSY_NOTE) {
                    row.result.push_str(BUSY_NOTE);
                }
            }
        }
        self.info(
            part,
            "machine load (1 / 5 / 15 min) at the part's start; at its end; CPUs",
            result,
        );
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
        let mut out = self.table();
        out.push('\n');
        out.push_str(&self.timings_table());
        out
    }

    /// Every goal row: what was held to what, the figure, and the verdict.
    pub fn goals_table(&self) -> String {
        let mut out = String::from("| part | goal | figure | met |\n|---|---|---|---|\n");
        for row in self.rows.iter().filter(|r| r.verdict != Verdict::Info) {
            let _ = writeln!(
                out,
                "| {} | {}: {} | {} | {} |",
                row.part,
                row.measure,
                row.goal,
                row.result,
                verdict_text(row)
            );
        }
        out
    }

    /// The table of every row.
    pub fn table(&self) -> String {
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
        out
    }

    /// How long each part took, or why it did not run.
    pub fn timings_table(&self) -> String {
        let mut out = String::from("| part | time |\n|---|---:|\n");
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

/// What a goal row of a part run on a busy machine adds to its figure.
const BUSY_NOTE: &str = " (machine busy during the part: unreliable)";

fn verdict_text(row: &Row) -> &'static str {
    match row.verdict {
        Verdict::Met => "yes",
        Verdict::Missed => "**no**",
        Verdict::Info => "",
        Verdict::NotJudged => "not judged: A/A outside noise",
    }
}

/// The load averages over 1, 5 and 15 minutes (Linux procfs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
}

impl Load {
    /// The load now; `None` where procfs does not say.
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/loadavg").ok()?)
    }

    /// The first three fields of `/proc/loadavg`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut fields = text.split_whitespace().map(str::parse::<f64>);
        Some(Self {
            one: fields.next()?.ok()?,
            five: fields.next()?.ok()?,
            fifteen: fields.next()?.ok()?,
        })
    }

    /// Whether more threads were runnable, on average over the last
    /// minute, than `cpus` can run.
    pub fn busy(&self, cpus: usize) -> bool {
        self.one > cpus as f64
    }
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} / {:.2} / {:.2}",
            self.one, self.five, self.fifteen
        )
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

    /// Every sample, in no particular order.
    pub fn values(&self) -> &[Duration] {
        &self.values
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

/// Min, median and max of one figure measured in several repeats: what a
/// repeated part prints instead of its best repeat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// How many repeats.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`; `None` when there are none (or one is NaN,
    /// which no measurement should produce).
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Self {
            min,
            median: median(values),
            max,
            n: values.len(),
        })
    }

    /// Whether `x` lies within `min..=max`.
    pub fn contains(&self, x: f64) -> bool {
        self.min <= x && x <= self.max
    }

    /// How far from 1.0 the farthest repeat lies: for an A/A ratio, how
    /// much noise alone moved it.
    pub fn farthest_from_one(&self) -> f64 {
        (self.min - 1.0).abs().max((self.max - 1.0).abs())
    }

    /// `min / median / max` as ratios, with the count.
    pub fn ratios(&self) -> String {
        format!(
            "min {} / median {} / max {} (n={})",
            ratio(self.min),
            ratio(self.median),
            ratio(self.max),
            self.n
        )
    }

    /// `min / median / max` with `unit` formatting each figure.
    pub fn with(&self, unit: impl Fn(f64) -> String) -> String {
        format!(
            "min {} / median {} / max {} (n={})",
            unit(self.min),
            unit(self.median),
            unit(self.max),
            self.n
        )
    }
}

/// `numerators[i] / denominators[i]` for every repeat `i`: each repeat's
/// ratio, so the spread of the ratio (not a ratio of pooled totals) is
/// what gets reported. Repeats with a zero denominator are left out.
pub fn ratios(numerators: &[f64], denominators: &[f64]) -> Vec<f64> {
    numerators
        .iter()
        .zip(denominators)
        .filter(|(_, d)| **d != 0.0)
        .map(|(n, d)| n / d)
        .collect()
}

/// An A/B ratio measured in interleaved repeats next to its A/A control:
/// the same side measured twice, interleaved the same way, whose ratio
/// would be exactly 1.0 without noise. Its spread shows how far from 1.0
/// noise alone moves a ratio in this run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// B over A, one ratio per repeat.
    pub ab: Spread,
    /// A again over A, one ratio per repeat.
    pub aa: Spread,
}

impl Comparison {
    /// From each repeat's A/B and A/A ratios; `None` if either is empty.
    pub fn new(ab: &[f64], aa: &[f64]) -> Option<Self> {
        Some(Self {
            ab: Spread::of(ab)?,
            aa: Spread::of(aa)?,
        })
    }

    /// Whether the A/B median lies outside the range the A/A control
    /// spanned: the difference is larger than the noise this run showed.
    pub fn beyond_noise(&self) -> bool {
        !self.aa.contains(self.ab.median)
    }

    /// Whether the A/A control's median lies within `noise` of 1.00: the
    /// noise a goal states it can be judged under. Outside it, noise alone
    /// moved a ratio by more than the goal's margin, and the A/B figure
    /// cannot say whether the goal was met.
    pub fn within_noise(&self, noise: f64) -> bool {
        (self.aa.median - 1.0).abs() <= noise
    }

    /// The A/A control as one cell: its spread and what it means.
    pub fn control(&self) -> String {
        format!(
            "{}: noise alone moved the ratio up to {:.2} from 1.00; the A/B median is {}",
            self.aa.ratios(),
            self.aa.farthest_from_one(),
            if self.beyond_noise() {
                "outside that range"
            } else {
                "inside that range (not distinguishable from noise)"
            }
        )
    }
}

/// `min / median / max` of durations.
pub fn duration_spread(values: &[Duration]) -> String {
    let secs: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    match Spread::of(&secs) {
        Some(spread) => spread.with(|s| duration(Duration::from_secs_f64(s))),
        None => "no runs".into(),
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

    #[test]
    fn a_spread_reports_min_median_and_max_never_the_best_alone() {
        let spread = Spread::of(&[0.91, 0.83, 0.87, 0.95, 0.85]).unwrap();
        assert_eq!(spread.min, 0.83);
        assert_eq!(spread.median, 0.87);
        assert_eq!(spread.max, 0.95);
        assert_eq!(spread.n, 5);
        assert_eq!(
            spread.ratios(),
            "min 0.83x / median 0.87x / max 0.95x (n=5)"
        );
        // An even count takes the mean of the middle two.
        let even = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((even.min, even.median, even.max), (1.0, 2.5, 4.0));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn each_repeat_gives_its_own_ratio() {
        assert_eq!(
            ratios(&[90.0, 80.0, 50.0], &[100.0, 100.0, 0.0]),
            vec![0.9, 0.8]
        );
    }

    #[test]
    fn the_a_a_control_shows_how_far_noise_moves_a_ratio() {
        // A/B clearly below the A/A band: beyond noise.
        let clear = Comparison::new(&[0.85, 0.86, 0.84], &[0.97, 1.02, 1.04]).unwrap();
        assert!((clear.aa.farthest_from_one() - 0.04).abs() < 1e-9);
        assert!(clear.beyond_noise());
        assert!(clear.control().contains("up to 0.04 from 1.00"));
        assert!(clear.control().contains("outside that range"));
        // A/B median within the A/A band: not distinguishable.
        let noisy = Comparison::new(&[0.95, 0.99, 1.01], &[0.90, 1.00, 1.08]).unwrap();
        assert!(!noisy.beyond_noise());
        assert!(noisy.control().contains("not distinguishable"));
        assert_eq!(Comparison::new(&[], &[1.0]), None);
    }

    #[test]
    fn a_ratio_goal_is_judged_only_within_its_stated_noise() {
        let quiet = Comparison::new(&[1.30, 1.35, 1.40], &[0.98, 1.01, 1.03]).unwrap();
        let loud = Comparison::new(&[1.05, 1.10, 1.12], &[0.80, 0.88, 1.10]).unwrap();
        assert!(quiet.within_noise(0.05));
        assert!(!loud.within_noise(0.05));
        let mut report = Report::default();
        report.compared_goal("p", "quiet", "q".into(), "<= 1.2x", false, (&quiet, 0.05));
        report.compared_goal("p", "loud", "l".into(), "<= 1.2x", true, (&loud, 0.05));
        let goals = report.goals_table();
        assert!(goals.contains("| p | quiet: <= 1.2x | q; A/A median 1.01x (within the stated noise ±0.05) | **no** |"), "{goals}");
        assert!(goals.contains("| p | loud: <= 1.2x | l; A/A median 0.88x (outside the stated noise ±0.05) | not judged: A/A outside noise |"), "{goals}");
    }

    #[test]
    fn a_part_run_on_a_busy_machine_is_flagged() {
        let load = Load::parse("2.50 1.00 0.50 3/400 1234").unwrap();
        assert_eq!(load.to_string(), "2.50 / 1.00 / 0.50");
        assert!(load.busy(2));
        assert!(!load.busy(4));
        let calm = Load::parse("0.10 0.20 0.30 1/1 1").unwrap();
        let mut report = Report::default();
        report.goal("p", "m", "1 ms".into(), "<= 2 ms", true);
        report.info("p", "i", "x".into());
        report.load("p", &calm, &load, 2);
        let table = report.table();
        assert!(
            table.contains("| p | m | 1 ms (machine busy during the part: unreliable) |"),
            "{table}"
        );
        assert!(table.contains("| p | i | x |"), "{table}");
        assert!(
            table.contains("0.10 / 0.20 / 0.30; 2.50 / 1.00 / 0.50; 2 CPUs; **busy**"),
            "{table}"
        );
        let mut quiet = Report::default();
        quiet.goal("q", "m", "1 ms".into(), "<= 2 ms", true);
        quiet.load("q", &calm, &calm, 2);
        assert!(!quiet.table().contains("busy"));
        assert_eq!(Load::parse("nonsense"), None);
    }

    #[test]
    fn duration_spreads_read_well() {
        let values = [
            Duration::from_millis(8_400),
            Duration::from_millis(9_800),
            Duration::from_millis(9_100),
        ];
        assert_eq!(
            duration_spread(&values),
            "min 8.40 s / median 9.10 s / max 9.80 s (n=3)"
        );
        assert_eq!(duration_spread(&[]), "no runs");
    }
}
