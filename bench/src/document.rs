//! The generated `BENCHMARKS.md`: the template kept next to the runner
//! (`bench/BENCHMARKS.template.md`: the prose that explains each goal and
//! part, with no figures) filled in with one run's machine description,
//! goals, table and part timings, so that every figure in the file comes
//! from the same run and nothing is merged by hand.
//!
//! Must never: write a figure that did not come from the run being
//! written; overwrite the file from a run in which a part could not run;
//! print the database URL (it may carry a password).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::report::Report;

/// The prose around the figures.
pub const TEMPLATE: &str = include_str!("../BENCHMARKS.template.md");

/// Where the run's generated sections go in the template.
const MACHINE: &str = "{{machine}}";
const GOALS: &str = "{{goals}}";
const TABLE: &str = "{{table}}";
const TIMINGS: &str = "{{timings}}";
const PLACEHOLDERS: [&str; 4] = [MACHINE, GOALS, TABLE, TIMINGS];

/// The file a run writes by default: `BENCHMARKS.md` at the repository
/// root.
pub fn default_output() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md")
}

/// The machine as the kernel describes it (Linux procfs).
#[derive(Debug, Clone)]
pub struct Machine {
    pub cpu: String,
    /// Logical CPUs the kernel lists.
    pub cpus: usize,
    /// Logical CPUs this process may run on.
    pub available: usize,
    pub memory: String,
    pub kernel: String,
    pub build: &'static str,
}

impl Machine {
    pub fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let cpus = cpuinfo
            .lines()
            .filter(|l| {
                l.split_once(':')
                    .is_some_and(|(k, _)| k.trim() == "processor")
            })
            .count();
        let memory = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or_else(
                || "unknown".into(),
                |kb| format!("{:.1} GiB", kb as f64 / 1048576.0),
            );
        Self {
            cpu,
            cpus,
            available: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            build: if cfg!(debug_assertions) {
                "DEBUG build (figures do not count; use the release build)"
            } else {
                "release build"
            },
        }
    }

    /// One line, for the terminal.
    pub fn line(&self) -> String {
        format!(
            "{}, {} logical CPUs ({} available), {} RAM, Linux {}, {}",
            self.cpu, self.cpus, self.available, self.memory, self.kernel, self.build
        )
    }
}

/// The load averages over 1, 5 and 15 minutes: other work on the machine
/// skews every figure, so a run says how busy the machine was at its start
/// and its end.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" / "))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The commit the runner was built from, and whether the work tree had
/// uncommitted changes to tracked files.
pub fn git_commit() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "HEAD"]) else {
        return "unknown (not a git work tree)".into();
    };
    let changed =
        git(&["status", "--porcelain", "--untracked-files=no"]).map_or(0, |s| s.lines().count());
    if changed == 0 {
        format!("`{commit}`")
    } else {
        format!("`{commit}` with uncommitted changes to {changed} tracked file(s)")
    }
}

/// What one run was: when, where, which parts, how long.
#[derive(Debug, Clone)]
pub struct Run {
    pub machine: Machine,
    pub postgres: Option<String>,
    pub started: DateTime<Utc>,
    pub commit: String,
    pub load_start: String,
    pub load_end: String,
    /// The parts run, in order.
    pub parts: Vec<&'static str>,
    /// Whether every part was run.
    pub every_part: bool,
    pub quick: bool,
    pub elapsed: Duration,
}

impl Run {
    fn machine_section(&self) -> String {
        let mut out = String::new();
        let scope = if self.every_part && !self.quick {
            "One run of every part (`cargo xtask bench`)".to_string()
        } else {
            format!(
                "**Not a full run**: {}{}. Figures of parts not run are not in this file, \
                 and this file is not the one to quote",
                if self.every_part {
                    "every part".to_string()
                } else {
                    format!("only the parts {}", self.parts.join(", "))
                },
                if self.quick {
                    ", at `--quick` scale (few runs per part; the figures mean little)"
                } else {
                    ""
                }
            )
        };
        let _ = write!(
            out,
            "{scope}. Started {} at commit {}; took {:.0} s. Machine: {}, **{} logical CPUs** \
             ({} available to the run), {} RAM, Linux {}; {}; {}. Load average \
             (1 / 5 / 15 min): {} when the run started, {} when it ended.",
            self.started.format("%Y-%m-%d %H:%M UTC"),
            self.commit,
            self.elapsed.as_secs_f64(),
            self.machine.cpu,
            self.machine.cpus,
            self.machine.available,
            self.machine.memory,
            self.machine.kernel,
            match &self.postgres {
                Some(v) => format!("PostgreSQL {v} for the database parts"),
                None => "no PostgreSQL server answered (the database parts could not run)".into(),
            },
            self.machine.build,
            self.load_start,
            self.load_end,
        );
        out
    }
}

/// The template filled in with `run` and `report`; an error names a
/// placeholder the template lacks (every generated section must land).
pub fn render(template: &str, run: &Run, report: &Report) -> Result<String, String> {
    for placeholder in PLACEHOLDERS {
        if !template.contains(placeholder) {
            return Err(format!(
                "the benchmark template lacks the placeholder {placeholder}"
            ));
        }
    }
    Ok(template
        .replace(MACHINE, &run.machine_section())
        .replace(GOALS, report.goals_table().trim_end())
        .replace(TABLE, report.table().trim_end())
        .replace(TIMINGS, report.timings_table().trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(every_part: bool, quick: bool) -> Run {
        Run {
            machine: Machine {
                cpu: "Test CPU".into(),
                cpus: 2,
                available: 2,
                memory: "1.0 GiB".into(),
                kernel: "6.0".into(),
                build: "release build",
            },
            postgres: Some("15.0".into()),
            started: DateTime::from_timestamp(0, 0).unwrap(),
            commit: "`abc`".into(),
            load_start: "0.10 / 0.20 / 0.30".into(),
            load_end: "1.00 / 0.50 / 0.40".into(),
            parts: vec!["abort"],
            every_part,
            quick,
            elapsed: Duration::from_secs(12),
        }
    }

    fn report() -> Report {
        let mut report = Report::default();
        report.goal(
            "abort",
            "revoke -> stopped",
            "p99 2 ms".into(),
            "p99 <= 1 ms",
            false,
        );
        report.info("abort", "worst run", "3 ms".into());
        report.timed("abort", Ok(Duration::from_secs(5)));
        report
    }

    #[test]
    fn the_template_is_filled_with_this_runs_figures_only() {
        let template = "# B\n{{machine}}\n\n{{goals}}\n\n{{table}}\n\n{{timings}}\n";
        let text = render(template, &run(true, false), &report()).unwrap();
        assert!(text.contains("One run of every part"));
        assert!(text.contains("1970-01-01 00:00 UTC at commit `abc`"));
        assert!(text.contains("**2 logical CPUs**"));
        assert!(text.contains("PostgreSQL 15.0"));
        assert!(text.contains("0.10 / 0.20 / 0.30 when the run started"));
        // The goal row appears in the goals table; the info row only in
        // the full table.
        let goals = text.split("| part | goal |").nth(1).unwrap();
        let goals = goals.split("\n\n").next().unwrap();
        assert!(goals.contains("revoke -> stopped: p99 <= 1 ms | p99 2 ms | **no**"));
        assert!(!goals.contains("worst run"));
        assert!(text.contains("| abort | worst run | 3 ms |  |  |"));
        assert!(text.contains("| abort | 5.0 s |"));
        assert!(!text.contains("{{"));
    }

    #[test]
    fn a_partial_or_quick_run_says_so() {
        let text = render(
            "{{machine}}{{goals}}{{table}}{{timings}}",
            &run(false, true),
            &report(),
        )
        .unwrap();
        assert!(text.contains("**Not a full run**: only the parts abort, at `--quick` scale"));
    }

    #[test]
    fn a_template_missing_a_section_is_refused() {
        let error = render(
            "{{machine}}{{goals}}{{table}}",
            &run(true, false),
            &report(),
        )
        .unwrap_err();
        assert!(error.contains("{{timings}}"));
    }

    #[test]
    fn the_kept_template_has_every_section_and_no_figures_of_its_own() {
        for placeholder in PLACEHOLDERS {
            assert_eq!(TEMPLATE.matches(placeholder).count(), 1, "{placeholder}");
        }
        // Figures belong to the generated sections: the prose carries no
        // measured latency, rate or ratio.
        for unit in [" µs", " ms/", "/s ", "x (", " MiB"] {
            assert!(
                !TEMPLATE.contains(unit),
                "the template quotes a figure ({unit:?})"
            );
        }
    }
}
