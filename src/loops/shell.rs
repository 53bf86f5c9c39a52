//! The shell-command runner behind every command gate: an agent-driven loop's gate (each
//! `slm loop step`, [`super::command`]) and the `cmd:` verifier ([`super::verify`]) both run
//! their command here, the same way: `sh -c` in a process group of its own, bounded by a
//! time limit (the group is killed at the limit and once the command exits), stdin fed when
//! given, output kept as a tail, the outcome digested for no-progress detection.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::record::GateEnv;
use crate::{Error, Result};

/// How much of the gate's output the lap's detail keeps (the tail), in characters.
const DETAIL_TAIL: usize = 240;
/// Output kept in memory while the gate runs (the tail), in bytes.
const OUTPUT_KEEP: usize = 64 * 1024;

/// How one run of the gate command went.
#[derive(Debug, Clone)]
pub struct GateOutcome {
    /// The exit code; None when killed (deadline) or ended by a signal.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Combined stdout and stderr (the last 64 KiB).
    pub output: String,
    pub elapsed: Duration,
    /// Why the command was not started at all (its recorded directory is gone).
    pub not_started: Option<String>,
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    pub(crate) fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(format!("{:?}/{}/{:?}/", self.exit_code, self.timed_out, self.not_started));
        h.update(self.output.as_bytes());
        h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// The output's last words, one line, for a detail.
    fn tail(&self) -> Option<String> {
        let tail: String = self.output.split_whitespace().collect::<Vec<_>>().join(" ");
        if tail.is_empty() {
            return None;
        }
        let n = tail.chars().count();
        let kept: String = tail.chars().skip(n.saturating_sub(DETAIL_TAIL)).collect();
        Some(format!("{}{kept}", if n > DETAIL_TAIL { "…" } else { "" }))
    }

    /// Why a verifying command refused a candidate, to read after "#17 scored 0.77 but ".
    pub fn refusal(&self) -> String {
        if let Some(why) = &self.not_started {
            return format!("the command could not start: {why}");
        }
        let what = match (self.timed_out, self.exit_code) {
            (true, _) => format!("the command was killed at the deadline after {:.1} s", self.elapsed.as_secs_f64()),
            (false, Some(c)) => format!("the command refused it (exit {c})"),
            (false, None) => "the command was killed by a signal".to_string(),
        };
        match self.tail() {
            Some(t) => format!("{what}: {t}"),
            None => what,
        }
    }

    pub(crate) fn detail(&self, note: Option<&str>) -> String {
        let mut d = if let Some(why) = &self.not_started {
            format!("gate command could not start: {why}")
        } else if self.timed_out {
            format!("gate command killed at the wall-clock deadline after {:.1} s", self.elapsed.as_secs_f64())
        } else {
            match self.exit_code {
                Some(0) => "gate command passed (exit 0)".to_string(),
                Some(c) => format!("gate command failed (exit {c})"),
                None => "gate command was killed by a signal".to_string(),
            }
        };
        if let Some(tail) = self.tail() {
            d.push_str(&format!("; output: {tail}"));
        }
        if let Some(note) = note.filter(|n| !n.is_empty()) {
            d.push_str(&format!("; note: {note}"));
        }
        d
    }
}

/// What a gate command gets besides its command line.
#[derive(Debug, Clone, Default)]
pub struct GateInput {
    /// Written to its stdin, then closed (none: stdin is /dev/null).
    pub stdin: Option<Vec<u8>>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Run with exactly this directory and environment (plus `env`) instead of this
    /// process's: a command gate's record from `loop start`.
    pub recorded: Option<GateEnv>,
}

/// Runs `cmd` with `sh -c` in a new process group, for at most `limit`. The group is killed
/// (SIGKILL) when the limit passes, and also once the command exits, so nothing it started
/// outlives the lap. With `input.recorded` it runs `/bin/sh` with exactly that directory and
/// environment; a directory that is gone is an outcome (`not_started`), not an error.
pub fn run_gate(cmd: &str, limit: Duration, input: &GateInput) -> Result<GateOutcome> {
    use std::os::unix::process::CommandExt;
    let started = Instant::now();
    if limit.is_zero() {
        return Ok(GateOutcome { exit_code: None, timed_out: true, output: String::new(), elapsed: Duration::ZERO, not_started: None });
    }
    let mut command = Command::new("sh");
    if let Some(rec) = &input.recorded {
        if !std::path::Path::new(&rec.cwd).is_dir() {
            let why = format!("its working directory {} (recorded at loop start) no longer exists", rec.cwd);
            return Ok(GateOutcome {
                exit_code: None,
                timed_out: false,
                output: String::new(),
                elapsed: started.elapsed(),
                not_started: Some(why),
            });
        }
        // The system's shell by absolute path: the recorded PATH decides what the command
        // finds, and no PATH decides which shell runs it.
        command = Command::new("/bin/sh");
        command.env_clear().envs(&rec.vars).current_dir(&rec.cwd);
    }
    let (mut reader, writer) = std::io::pipe().map_err(|e| Error::io("cannot create a pipe for the gate command", e))?;
    let writer2 = writer.try_clone().map_err(|e| Error::io("cannot create a pipe for the gate command", e))?;
    let mut child = command
        .arg("-c")
        .arg(cmd)
        .envs(input.env.iter().map(|(k, v)| (k, v)))
        .stdin(if input.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("cannot start the gate command with sh", e))?;
    // The command holds our copies of the pipe's write ends: close them, or the output
    // collector never sees the end of the output.
    drop(command);
    let pgid = child.id() as libc::pid_t;
    if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), input.stdin.clone()) {
        // A thread, so a command that never reads cannot block us past the deadline; a
        // command that exits early makes the write fail (EPIPE), which is not our concern.
        std::thread::spawn(move || {
            use std::io::Write;
            // The CLI restores SIGPIPE's default (a closed stdout ends it quietly); a command
            // that exits without reading its stdin must not kill us with it, so this thread
            // blocks the signal and sees EPIPE instead.
            // SAFETY: changes only this thread's signal mask, with a set built here.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPIPE);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            let _ = pipe.write_all(&bytes);
        });
    }
    let collector = std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * OUTPUT_KEEP {
                kept.drain(..kept.len() - OUTPUT_KEEP);
            }
        }
        let start = kept.len().saturating_sub(OUTPUT_KEEP);
        String::from_utf8_lossy(&kept[start..]).into_owned()
    });
    let deadline = started + limit;
    let (status, timed_out) = loop {
        match child.try_wait() {
            Ok(Some(st)) => break (Some(st), false),
            Ok(None) if Instant::now() >= deadline => break (None, true),
            Ok(None) => std::thread::sleep(Duration::from_millis(5).min(deadline - Instant::now())),
            Err(e) => return Err(Error::io("cannot wait for the gate command", e)),
        }
    };
    // SAFETY: kill(2) on the gate's own process group, which we created; no memory is touched.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let status = match status {
        Some(st) => Some(st),
        None => child.wait().ok(),
    };
    let output = collector.join().unwrap_or_default();
    Ok(GateOutcome {
        exit_code: if timed_out { None } else { status.and_then(|s| s.code()) },
        timed_out,
        output,
        elapsed: started.elapsed(),
        not_started: None,
    })
}
