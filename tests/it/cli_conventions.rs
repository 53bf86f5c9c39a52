//! CLI conventions: a closed stdout ends the process quietly, shell completions and a man page,
//! `--json` on the commands that print generated text, exit codes in `--help`.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Output, Stdio};

use crate::common::{slm_bin, Root};

/// A pipe whose read end is already closed: the first write to it fails with EPIPE (or SIGPIPE).
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fresh descriptors; we own both and close the read end at once.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        Stdio::from(OwnedFd::from_raw_fd(fds[1]))
    }
}

/// `slm ARGS | head -0`: success or death by SIGPIPE, and nothing on stderr.
fn assert_quiet_on_closed_pipe(root: &Root, args: &[&str]) {
    let out: Output = root.cmd(args).stdout(closed_pipe()).stderr(Stdio::piped()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0) || out.status.signal() == Some(libc::SIGPIPE),
        "slm {args:?} into a closed pipe: {:?}, stderr: {err}",
        out.status
    );
    assert!(err.is_empty(), "slm {args:?} into a closed pipe printed on stderr: {err}");
}

#[test]
fn a_closed_pipe_ends_every_printing_command_quietly() {
    let root = Root::new();
    let id = root.remember("review complete: PR #42 is approved", &["pr-42"]).to_string();
    root.remember("the weather is nice", &[]);
    let demo = root.json(&["loop", "demo"]);
    let run = demo["run_id"].as_str().unwrap().to_string();
    for json in [false, true] {
        let mut cases: Vec<Vec<&str>> = vec![
            vec!["list"],
            vec!["recall", "PR 42"],
            vec!["status"],
            vec!["remember", "another memory"],
            vec!["loop", "history"],
            vec!["loop", "show", &run],
            vec!["loop", "demo", "--iterations", "2"],
            vec!["loop", "cancel", &run],
            vec!["gate", "check", "--query", "PR 42 approved", "--id", &id],
            vec!["completions", "bash"],
            vec!["man"],
            vec!["plugin", "path"],
        ];
        if json {
            cases.iter_mut().for_each(|c| c.push("--json"));
        }
        cases.push(vec!["--help"]);
        cases.push(vec!["loop", "run", "--help"]);
        for args in &cases {
            assert_quiet_on_closed_pipe(&root, args);
        }
    }
    assert_quiet_on_closed_pipe(&root, &["forget", &id]);
    assert_eq!(root.count(), 2, "the remember above ran even though nobody read its output");
}

#[test]
fn completions_and_man_page() {
    let root = Root::new();
    for (shell, marker) in
        [("bash", "complete -F"), ("zsh", "#compdef slm"), ("fish", "complete -c slm"), ("elvish", "slm"), ("powershell", "slm")]
    {
        let out = root.run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker) && text.contains("recall"), "{shell}: {}", &text[..text.len().min(300)]);
    }
    let v = root.json(&["completions", "fish"]);
    assert!(v["script"].as_str().unwrap().contains("complete -c slm"));
    let out = root.run(&["man"]);
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.starts_with(".ie") || page.contains(".TH slm 1"), "{}", &page[..page.len().min(200)]);
    assert!(page.contains("completions") && page.contains("Exit codes"));
    assert!(root.json(&["man"])["man"].as_str().unwrap().contains(".TH slm 1"));
    let bad = root.run(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn exit_codes_are_in_the_help_of_the_commands_that_use_them() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(slm_bin()).args(args).arg("--help").output().unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let top = help(&[]);
    assert!(top.contains("Exit codes: 0 ok; 1 operational failure or not found; 2 invalid input"), "{top}");
    for cmd in [&["loop", "run"][..], &["loop", "demo"]] {
        let h = help(cmd);
        assert!(h.contains("0 converged") && h.contains("3 a bound") && h.contains("130 cancelled"), "{cmd:?}: {h}");
    }
    let step = help(&["loop", "step"]);
    assert!(step.contains("3 a bound") && step.contains("130") && step.contains("1 refused"), "{step}");
    assert!(help(&["gate", "check"]).contains("3: it would not"));
    assert!(help(&["import"]).contains("2 some lines were skipped"));
}
