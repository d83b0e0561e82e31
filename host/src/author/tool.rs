//! Running the tools that build a controller (cargo, pip, npm,
//! componentize-py, componentize-js): each run is bounded in time, and what
//! it printed is kept (its last [`MAX_TOOL_OUTPUT_BYTES`]) so a failure
//! shows the tool's own error.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::AuthorError;
use crate::limits::MAX_TOOL_OUTPUT_BYTES;
use crate::timeouts::TOOL_POLL;

/// What a finished run printed.
#[derive(Debug, Default)]
pub struct Ran {
    /// Standard output: its kept lines (see [`Run::stdout_lines`]), or its
    /// tail.
    pub stdout: String,
    /// The tail of standard error (empty when it went to the terminal).
    pub stderr: String,
}

/// How to run one tool.
pub struct Run<'a> {
    /// What the run does, for messages ("build the component with componentize-py").
    pub what: &'a str,
    /// Longest it may run; then it is killed.
    pub deadline: Duration,
    /// Let standard error through to the terminal as it comes (cargo's
    /// progress and diagnostics) instead of keeping it.
    pub live_stderr: bool,
    /// Keep only the lines of standard output this accepts, all of them
    /// (cargo's JSON artifact messages), instead of its tail.
    pub stdout_lines: Option<&'a (dyn Fn(&str) -> bool + Sync)>,
}

enum Waited {
    Exited(ExitStatus),
    Killed,
}

impl Run<'_> {
    /// Run `cmd` to its end. A tool that cannot be started is
    /// [`AuthorError::ToolMissing`] with `install` as the advice; one that
    /// fails or outlives its deadline is [`AuthorError::ToolFailed`] with
    /// what it printed.
    pub fn run(&self, cmd: &mut Command, install: &str) -> Result<Ran, AuthorError> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        let shown = show(cmd);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        cmd.stderr(if self.live_stderr {
            Stdio::inherit()
        } else {
            Stdio::piped()
        });
        let mut child = cmd.spawn().map_err(|e| AuthorError::ToolMissing {
            tool: program,
            error: e,
            install: install.to_string(),
        })?;
        let keep = self.stdout_lines;
        let (stdout, stderr, waited) = std::thread::scope(|scope| {
            // Drained on threads of their own: a tool printing more than a
            // pipe holds would otherwise block before it exits.
            let out = child.stdout.take();
            let err = child.stderr.take();
            let stdout = scope.spawn(move || match (out, keep) {
                (Some(pipe), Some(keep)) => lines(pipe, keep),
                (Some(pipe), None) => tail(pipe),
                (None, _) => String::new(),
            });
            let stderr = scope.spawn(move || err.map(tail).unwrap_or_default());
            let waited = self.wait(&mut child);
            (
                stdout.join().unwrap_or_default(),
                stderr.join().unwrap_or_default(),
                waited,
            )
        });
        let waited = waited.map_err(|e| AuthorError::Io {
            what: format!("wait for {shown}"),
            error: e,
        })?;
        let printed = || {
            if keep.is_some() {
                stderr.clone()
            } else {
                [stdout.as_str(), stderr.as_str()]
                    .into_iter()
                    .filter(|s| !s.trim().is_empty())
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        match waited {
            Waited::Exited(status) if status.success() => Ok(Ran {
                stdout: stdout.clone(),
                stderr: stderr.clone(),
            }),
            Waited::Exited(status) => Err(AuthorError::ToolFailed {
                what: self.what.to_string(),
                command: shown,
                how: format!("it exited with {status}"),
                output: printed(),
            }),
            Waited::Killed => Err(AuthorError::ToolFailed {
                what: self.what.to_string(),
                command: shown,
                how: format!(
                    "it was still running after {}s and was stopped",
                    self.deadline.as_secs()
                ),
                output: printed(),
            }),
        }
    }

    fn wait(&self, child: &mut Child) -> Result<Waited, std::io::Error> {
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Waited::Exited(status));
            }
            if started.elapsed() >= self.deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Waited::Killed);
            }
            std::thread::sleep(TOOL_POLL);
        }
    }
}

/// The command as one line, for messages.
pub fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Everything `pipe` gives, keeping the last [`MAX_TOOL_OUTPUT_BYTES`].
fn tail(mut pipe: impl Read) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut cut = false;
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > 2 * MAX_TOOL_OUTPUT_BYTES {
                    kept.drain(..kept.len() - MAX_TOOL_OUTPUT_BYTES);
                    cut = true;
                }
            }
        }
    }
    if kept.len() > MAX_TOOL_OUTPUT_BYTES {
        kept.drain(..kept.len() - MAX_TOOL_OUTPUT_BYTES);
        cut = true;
    }
    let text = String::from_utf8_lossy(&kept).into_owned();
    if cut {
        format!("[... earlier output left out ...]\n{text}")
    } else {
        text
    }
}

/// The lines of `pipe` that `keep` accepts, at most
/// [`MAX_TOOL_OUTPUT_BYTES`] of them in all (the first ones).
fn lines(pipe: impl Read, keep: &(dyn Fn(&str) -> bool + Sync)) -> String {
    use std::io::BufRead;
    let mut kept = String::new();
    for line in std::io::BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        if keep(&line) && kept.len() + line.len() < MAX_TOOL_OUTPUT_BYTES {
            kept.push_str(&line);
            kept.push('\n');
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(what: &str, deadline: Duration) -> Run<'_> {
        Run {
            what,
            deadline,
            live_stderr: false,
            stdout_lines: None,
        }
    }

    #[test]
    fn a_failing_tool_shows_what_it_printed() {
        let error = run("fail on purpose", Duration::from_secs(30))
            .run(
                Command::new("sh").args(["-c", "echo out; echo 'the reason' >&2; exit 3"]),
                "install sh",
            )
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("fail on purpose"), "{text}");
        assert!(text.contains("the reason"), "{text}");
        assert!(text.contains("exit status: 3"), "{text}");
    }

    #[test]
    fn a_missing_tool_says_what_to_install() {
        let error = run("run nothing", Duration::from_secs(30))
            .run(
                &mut Command::new("leasehold-no-such-tool"),
                "install the missing tool",
            )
            .unwrap_err();
        assert!(
            matches!(&error, AuthorError::ToolMissing { install, .. } if install == "install the missing tool"),
            "{error:?}"
        );
        assert!(error.to_string().contains("install the missing tool"));
    }

    #[test]
    fn a_tool_past_its_deadline_is_stopped() {
        let started = Instant::now();
        let error = run("hang", Duration::from_millis(200))
            .run(Command::new("sleep").arg("30"), "")
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(error.to_string().contains("still running"), "{error}");
    }

    #[test]
    fn output_keeps_its_tail_and_lines_their_matches() {
        let big = "x".repeat(3 * MAX_TOOL_OUTPUT_BYTES);
        let kept = tail(big.as_bytes());
        assert!(kept.len() < MAX_TOOL_OUTPUT_BYTES + 100, "{}", kept.len());
        assert!(kept.starts_with("[... earlier output left out ...]"));
        let matched = lines("a1\nb2\na3\n".as_bytes(), &|l| l.starts_with('a'));
        assert_eq!(matched, "a1\na3\n");
    }
}
