//! The script an exec sends to Daytona's `process/execute`.
//!
//! The toolbox daemon pipes the `command` text into the sandbox's login shell (zsh, bash or sh,
//! whichever `/etc/shells` offers) and returns stdout and stderr folded into one `result`, with
//! no bound on its size. The port wants `sh -c command`, no stdin, and an output bound that
//! stops an endless output early. So the text sent is one line that
//!
//! - `exec`s `sh -c WRAPPER`, with stdin from `/dev/null` (the daemon's stdin is the script
//!   itself: a `read` in the command would otherwise consume it); the outer shell's dialect
//!   never matters, since it only parses that line;
//! - the wrapper runs `sh -c "$1"` (the command, passed as an argument, quoted once) with
//!   stderr on stdout, through `head -c limit+1`, so at most one byte past the bound ever leaves
//!   the sandbox; a command that goes on printing dies of SIGPIPE once `head` has exited;
//! - the command's exit status travels back on a separate descriptor (fd 4, into `$( )`) and
//!   becomes the wrapper's, so `exitCode` is the command's own. The command gets neither fd 3
//!   nor fd 4, so a background process it starts cannot hold the exec open through them.

use reaper_core::journal::shell_quote;

/// `$0` of the wrapper: what `ps` in the sandbox shows for it.
const WRAPPER_NAME: &str = "reaper-exec";

/// The script text for running `command` with at most `limit` bytes of output returned
/// (`limit + 1` bytes come back when it printed more, which is how the bound is detected).
pub fn wrap(command: &str, limit: usize) -> String {
    let cut = limit.saturating_add(1);
    let wrapper = format!(
        "exec 3>&1\n\
         s=$( {{ {{ sh -c \"$1\" 2>&1 3>&- 4>&-; echo $? >&4; }} | head -c {cut} >&3 3>&- 4>&-; }} 4>&1 )\n\
         exit \"$s\""
    );
    format!(
        "exec sh -c {} {WRAPPER_NAME} {} </dev/null",
        shell_quote(&wrapper),
        shell_quote(command)
    )
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::wrap;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// Runs the script the way the toolbox daemon does: piped into a shell's stdin, stdout and
    /// stderr into one buffer.
    fn as_the_daemon_does(shell: &str, script: &str) -> (Vec<u8>, Option<i32>) {
        let mut child = Command::new(shell)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the shell");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (out.stdout, out.status.code())
    }

    fn shells() -> Vec<&'static str> {
        ["sh", "bash", "zsh"]
            .into_iter()
            .filter(|s| {
                Command::new(s)
                    .arg("-c")
                    .arg("true")
                    .status()
                    .is_ok_and(|st| st.success())
            })
            .collect()
    }

    #[test]
    fn the_wrapped_command_folds_stderr_and_keeps_its_exit_code_under_every_login_shell() {
        for shell in shells() {
            let (out, code) = as_the_daemon_does(
                shell,
                &wrap("printf 'out\\n'; printf 'err\\n' >&2; exit 7", 100),
            );
            assert_eq!(
                (out.as_slice(), code),
                (&b"out\nerr\n"[..], Some(7)),
                "{shell}"
            );
        }
    }

    #[test]
    fn the_wrapped_command_reaches_sh_verbatim_with_no_stdin() {
        let command = "x='a b'\nprintf '%s|%s\\n' \"$x\" \"it's \\\"q\\\" \\\\ $((1+2))\"\n\
                       if read -r l; then echo \"read:$l\"; else echo eof; fi";
        for shell in shells() {
            let (out, code) = as_the_daemon_does(shell, &wrap(command, 100));
            assert_eq!(
                String::from_utf8_lossy(&out),
                "a b|it's \"q\" \\ 3\neof\n",
                "{shell}"
            );
            assert_eq!(code, Some(0), "{shell}");
        }
    }

    #[test]
    fn an_endless_output_is_cut_one_byte_past_the_bound() {
        for shell in shells() {
            let (out, _) = as_the_daemon_does(shell, &wrap("exec yes", 10));
            assert_eq!(out.len(), 11, "{shell}");
        }
    }

    #[test]
    fn output_at_the_bound_is_whole() {
        let (out, code) = as_the_daemon_does("sh", &wrap("head -c 10 /dev/zero", 10));
        assert_eq!((out.len(), code), (10, Some(0)));
    }
}
