//! The controller under test as a separate process: start, log lines,
//! CPU and memory from `/proc`, and its cycles as its log reports them.

use super::*;
use canada_kaktus::sync::lock;
use serde_json::Value;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------
// The controller process.

/// Counters read the moment a log line arrived.
#[derive(Debug, Clone, Copy)]
pub(super) struct Snapshot {
    pub(super) at: Instant,
    /// utime + stime of the controller, in clock ticks.
    pub(super) ticks: u64,
    /// On-CPU time of its live threads (schedstat), in nanoseconds.
    pub(super) ns: u64,
    /// The fake Hetzner's request count.
    pub(super) requests: usize,
}

#[derive(Debug, Clone)]
pub(super) struct Cycle {
    pub(super) snap: Snapshot,
    pub(super) kind: String,
    pub(super) servers_matched: Option<u64>,
    pub(super) hetzner_requests: Option<u64>,
    pub(super) addresses: u64,
    pub(super) outcome: String,
    pub(super) duration_ms: u64,
}

pub(super) struct Controller {
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) started: Instant,
    pub(super) lines: mpsc::UnboundedReceiver<(Snapshot, Value)>,
    pub(super) tail: Arc<Mutex<VecDeque<String>>>,
    pub(super) requests: Arc<RequestCounter>,
}

impl Controller {
    pub(super) fn spawn(
        binary: &Path,
        env: &[(String, String)],
        dir: &Path,
        requests: RequestCounter,
    ) -> Self {
        let mut cmd = Command::new(binary);
        // A clean environment (no stray CANADA_KAKTUS_* of the caller) and a
        // working directory without a config.json.
        cmd.env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let parent = std::process::id();
        // SAFETY: runs in the forked child before exec and only makes
        // async-signal-safe calls (prctl, getppid, _exit). The fork happens
        // on the main thread, which lives as long as the benchmark.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let mut child = cmd.spawn().expect("starting the controller");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::unbounded_channel();
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail_writer = Arc::clone(&tail);
        let verbose = std::env::var_os(VERBOSE_ENV).is_some_and(|v| v == "1");
        let pid = child.id();
        let requests = Arc::new(requests);
        let counter = Arc::clone(&requests);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                // Read before anything else: the next cycle is a second away.
                let snap = snapshot(pid, &counter);
                if verbose {
                    eprintln!("controller: {line}");
                }
                {
                    let mut tail = lock(&tail_writer);
                    if tail.len() == 40 {
                        tail.pop_front();
                    }
                    tail.push_back(line.clone());
                }
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    if tx.send((snap, value)).is_err() {
                        break;
                    }
                }
            }
        });
        Self {
            pid,
            child,
            started,
            lines,
            tail,
            requests,
        }
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        snapshot(self.pid, &self.requests)
    }

    /// The next `reconcile finished` line; panics on a failed cycle, an
    /// exit or a timeout.
    pub(super) async fn next_cycle(&mut self) -> Cycle {
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv()).await;
            let (snap, value) = match line {
                Ok(Some(line)) => line,
                Ok(None) => panic!("the controller exited\n{}", self.tail()),
                Err(_) => panic!("no cycle within {STEP_TIMEOUT:?}\n{}", self.tail()),
            };
            match value["message"].as_str() {
                Some("reconcile finished") => {
                    let text = |key: &str| value[key].as_str().unwrap_or_default().to_owned();
                    return Cycle {
                        snap,
                        kind: text("kind"),
                        servers_matched: value["servers_matched"].as_u64(),
                        hetzner_requests: value["hetzner_requests"].as_u64(),
                        addresses: value["addresses"].as_u64().unwrap_or_default(),
                        outcome: text("outcome"),
                        duration_ms: value["duration_ms"].as_u64().unwrap_or_default(),
                    };
                }
                Some(message) if message.starts_with("reconcile failed") => {
                    panic!("a cycle failed: {value}\n{}", self.tail())
                }
                _ => {}
            }
        }
    }

    /// The next line whose message is `message` (other lines are
    /// skipped); panics on an exit or a timeout.
    pub(super) async fn wait_message(&mut self, message: &str) -> (Snapshot, Value) {
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some((snap, value))) if value["message"] == message => return (snap, value),
                Ok(Some(_)) => {}
                Ok(None) => panic!("the controller exited\n{}", self.tail()),
                Err(_) => panic!("no {message:?} within {STEP_TIMEOUT:?}\n{}", self.tail()),
            }
        }
    }

    /// Whether a line whose message is `message` came among the lines
    /// not read yet (they are read now).
    pub(super) fn said(&mut self, message: &str) -> bool {
        let mut said = false;
        while let Ok((_, value)) = self.lines.try_recv() {
            said |= value["message"] == message;
        }
        said
    }

    pub(super) fn tail(&self) -> String {
        let tail = lock(&self.tail);
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        format!("--- controller log (tail) ---\n{}", lines.join("\n"))
    }

    /// A `kB` line of `/proc/<pid>/status`, e.g. `VmHWM`.
    pub(super) fn status_kib(&self, key: &str) -> u64 {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        status
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {path}"))
    }

    pub(super) fn threads(&self) -> u64 {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("Threads:"))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or(0)
    }

    /// SIGTERM, then the process must exit cleanly within a few seconds.
    pub(super) fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let status: ExitStatus = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the controller") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the controller did not stop on SIGTERM\n{}", self.tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "the controller exited with {status} on SIGTERM\n{}",
            self.tail()
        );
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(super) fn snapshot(pid: u32, requests: &RequestCounter) -> Snapshot {
    Snapshot {
        at: Instant::now(),
        ticks: cpu_ticks(pid),
        ns: cpu_ns(pid),
        requests: requests(),
    }
}

/// utime + stime of the whole process (all threads), in clock ticks.
pub(super) fn cpu_ticks(pid: u32) -> u64 {
    // A process already reaped reads as 0; only lines of a running one are used.
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after "(comm)": state is field 3, utime 14, stime 15.
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15)
}

/// Time on CPU of the threads alive now, in nanoseconds (the first field
/// of each `/proc/<pid>/task/<tid>/schedstat`): a cross-check of the
/// tick-based figure with a finer resolution. Threads that have exited
/// are missing, so it can only read lower than `cpu_ticks`.
pub(super) fn cpu_ns(pid: u32) -> u64 {
    let dir = format!("/proc/{}/task", pid);
    let Ok(tasks) = std::fs::read_dir(&dir) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
