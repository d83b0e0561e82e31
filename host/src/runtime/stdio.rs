//! Guest stdout and stderr, captured line by line into tracing and bounded
//! per tenure. Writes never fail (a guest's `println!` would panic on an
//! error); bytes past the budget are dropped and counted. Each line is
//! escaped ([`crate::text::escape`]) so a `\r`, an
//! escape sequence or a Unicode line separator in it cannot forge a host
//! log line.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use crate::fence::Epoch;

/// One of a guest's output streams.
#[derive(Clone)]
pub struct CapturedOutput {
    inner: Arc<Shared>,
}

struct Shared {
    controller: String,
    epoch: Epoch,
    stream: &'static str,
    max_line: usize,
    budget: AtomicUsize,
}

impl CapturedOutput {
    /// Capture `stream` ("stdout" or "stderr") of `controller` at `epoch`,
    /// at most `budget` bytes for the tenure.
    pub fn new(
        controller: String,
        epoch: Epoch,
        stream: &'static str,
        budget: usize,
        max_line: usize,
    ) -> Self {
        Self {
            inner: Arc::new(Shared {
                controller,
                epoch,
                stream,
                max_line,
                budget: AtomicUsize::new(budget),
            }),
        }
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            shared: self.inner.clone(),
            line: Vec::new(),
        })
    }
}

struct LineWriter {
    shared: Arc<Shared>,
    line: Vec<u8>,
}

impl LineWriter {
    fn emit(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.line);
        let text = crate::text::escape(text.trim_end());
        tracing::info!(
            target: "guest",
            controller = self.shared.controller.as_str(),
            epoch = self.shared.epoch.0,
            stream = self.shared.stream,
            "{text}"
        );
        self.line.clear();
    }

    fn accept(&mut self, bytes: &[u8]) {
        // Take what the budget allows; the rest is dropped silently after a
        // single warning when the budget runs out.
        let budget = &self.shared.budget;
        let mut allowed = 0;
        let _ = budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            allowed = left.min(bytes.len());
            Some(left - allowed)
        });
        for &b in &bytes[..allowed] {
            if b == b'\n' {
                self.emit();
            } else if self.line.len() < self.shared.max_line {
                self.line.push(b);
            }
        }
        if allowed < bytes.len() && allowed > 0 {
            self.emit();
            tracing::warn!(
                controller = self.shared.controller.as_str(),
                epoch = self.shared.epoch.0,
                stream = self.shared.stream,
                "guest output budget exhausted for this tenure; further output is dropped"
            );
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.emit();
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.emit();
    }
}
