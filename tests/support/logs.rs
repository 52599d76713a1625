//! One log capture per test binary: the controller's own subscriber
//! (`telemetry::init_with_writer`, JSON lines at `debug`), installed once
//! for the whole process as a running controller installs it. A process
//! has one global subscriber, so every test that reads logs reads them
//! here. Each line keeps the name of the thread that wrote it: a
//! `#[tokio::test]` runs its tasks on its own thread, which libtest names
//! after the test, so a test can pick its own lines while others run.
//! Lines from `spawn_blocking` or from a multi-thread runtime's workers
//! carry the worker's name instead: `mine()` is for current-thread tests,
//! and sees only what ran on the test's own thread.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use canada_kaktus::config::{LogFormat, LogLevel};
use serde_json::Value;
use tokio::sync::Notify;

/// Every line written, with its thread, and a signal for each write.
pub struct Logs {
    lines: Mutex<Vec<(String, String)>>,
    wrote: Notify,
}

/// The capture, installed on the first call.
pub fn capture() -> &'static Logs {
    static LOGS: OnceLock<&'static Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static Logs = Box::leak(Box::new(Logs {
            lines: Mutex::new(Vec::new()),
            wrote: Notify::new(),
        }));
        canada_kaktus::serve::telemetry::init_with_writer(
            LogLevel::Debug,
            LogFormat::Json,
            Writer(logs),
        );
        logs
    })
}

impl Logs {
    /// What every test of this binary logged so far, a JSON line each.
    pub fn all(&self) -> String {
        let lines = self.lines.lock().unwrap();
        lines.iter().map(|(_, line)| format!("{line}\n")).collect()
    }

    /// The lines this test's thread wrote, parsed.
    pub fn mine(&self) -> Vec<Value> {
        let thread = thread_name();
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|(by, _)| *by == thread)
            .filter_map(|(_, line)| serde_json::from_str(line).ok())
            .collect()
    }

    /// The first line of this test's with `message` that `check` accepts,
    /// waiting for it up to `limit` (woken by each write).
    pub async fn wait_for(
        &self,
        message: &str,
        check: impl Fn(&Value) -> bool,
        limit: Duration,
    ) -> Value {
        let found = async {
            loop {
                let wrote = self.wrote.notified();
                let mine = self.mine();
                if let Some(line) = mine
                    .into_iter()
                    .find(|line| line["message"] == message && check(line))
                {
                    return line;
                }
                wrote.await;
            }
        };
        tokio::time::timeout(limit, found)
            .await
            .unwrap_or_else(|_| panic!("no {message:?} line of this test within {limit:?}"))
    }
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or_default().to_owned()
}

#[derive(Clone, Copy)]
struct Writer(&'static Logs);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let thread = thread_name();
        let text = String::from_utf8_lossy(buf);
        // The fakes' own logs (wiremock's, through `log`) quote the
        // requests they got, headers included: not the controller's output.
        let lines = text
            .lines()
            .filter(|line| !line.contains(r#""target":"wiremock"#))
            .map(|line| (thread.clone(), line.to_owned()));
        self.0.lines.lock().unwrap().extend(lines);
        self.0.wrote.notify_waiters();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Writer {
    type Writer = Writer;
    fn make_writer(&'a self) -> Writer {
        *self
    }
}
