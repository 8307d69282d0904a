//! The output bound, enforced inside the sandbox.
//!
//! Vercel streams a command's whole output and offers no cap of its own, and the transport
//! hands back one bounded body: a command printing without end (`yes`) would stream until the
//! body limit, with nothing left to say which stream overflowed. So the command runs under a
//! small POSIX `sh` wrapper that passes each stream through `head -c <limit+1>`: a stream that
//! reaches `limit + 1` bytes proves the overflow (and names its stream), the command gets
//! `SIGPIPE` on its next write instead of printing on, and the log stream stays bounded.
//!
//! The user's command still runs as `sh -c <command>` (so `$$`, quoting and `exec` behave as
//! with any provider), its exit status is passed through, and its stdin is `/dev/null` whatever
//! Vercel gives the command (the port's contract: no stdin).

/// The wrapper, run as `sh -c WRAPPER reaper-exec <limit+1> <command>`.
///
/// The command reads `/dev/null`; fd 4 keeps the real stdout; fd 3 is the pipe into the stderr `head`; fd 5 carries the
/// command's exit status out of the pipeline into `$( )`. Every process closes the descriptors
/// it has no use for, so the command (and anything it leaves in the background) holds only its
/// own stdout and stderr, exactly as without the wrapper.
const WRAPPER: &str = r#"n=$1 c=$2
exec 4>&1
s=$( { { { sh -c "$c" </dev/null 2>&3 3>&- 4>&- 5>&-; echo $? >&5; } | head -c "$n" >&4 3>&- 4>&- 5>&-; } 3>&1 | head -c "$n" >&2 4>&- 5>&-; } 5>&1 )
exec 4>&-
exit "${s:-1}""#;

/// `$0` of the wrapper, which shows in `ps` inside the sandbox.
const WRAPPER_NAME: &str = "reaper-exec";

/// The program and arguments of Vercel's run-command request for `command` under an output
/// bound of `limit` bytes per stream.
pub fn bounded(command: &str, limit: usize) -> (&'static str, Vec<String>) {
    (
        "sh",
        vec![
            "-c".to_string(),
            WRAPPER.to_string(),
            WRAPPER_NAME.to_string(),
            limit.saturating_add(1).to_string(),
            command.to_string(),
        ],
    )
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Runs the wrapper with the system's `sh`, as the sandbox would.
    fn run(command: &str, limit: usize) -> (Vec<u8>, Vec<u8>, Option<i32>) {
        let (program, args) = bounded(command, limit);
        let out = Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run sh");
        (out.stdout, out.stderr, out.status.code())
    }

    #[test]
    fn the_wrapper_passes_stdout_stderr_and_the_exit_code_through() {
        let (out, err, code) = run("printf 'out\\n'; printf 'err\\n' >&2; exit 7", 64);
        assert_eq!(
            (out.as_slice(), err.as_slice(), code),
            (&b"out\n"[..], &b"err\n"[..], Some(7))
        );
    }

    #[test]
    fn the_wrapper_passes_the_command_to_sh_verbatim() {
        let command = "x='a b'\nprintf '%s|%s\\n' \"$x\" \"it's \\\"q\\\" \\\\ $((1+2))\"";
        let (out, _, code) = run(command, 64);
        assert_eq!(
            (String::from_utf8_lossy(&out).as_ref(), code),
            ("a b|it's \"q\" \\ 3\n", Some(0))
        );
    }

    #[test]
    fn the_wrapper_cuts_each_stream_one_byte_past_the_bound() {
        let (out, err, _) = run("head -c 100 /dev/zero; head -c 100 /dev/zero >&2", 10);
        assert_eq!((out.len(), err.len()), (11, 11));
        let (out, err, code) = run("head -c 10 /dev/zero; head -c 10 /dev/zero >&2", 10);
        assert_eq!((out.len(), err.len(), code), (10, 10, Some(0)));
    }

    #[test]
    fn the_wrapper_gives_the_command_no_stdin_even_when_it_has_one() {
        use std::io::Write;
        let (program, args) = bounded("if read -r l; then echo \"read:$l\"; else echo eof; fi", 64);
        let mut child = Command::new(program)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run sh");
        // An open stdin with a line waiting in it: the command must not see either.
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"secret\n").expect("write stdin");
        let out = child.wait_with_output().expect("wait");
        drop(stdin);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "eof\n");
    }

    #[test]
    fn the_wrapper_ends_an_endless_output_at_the_bound() {
        let (out, _, _) = run("exec yes", 4096);
        assert_eq!(out.len(), 4097);
    }
}
