//! The shell around every exec, and the kill that follows a timed-out or oversized one.
//!
//! envd has no output bound (it streams until the process ends) and, on a timeout, kills only the
//! process it started, not what that process started. So each command runs under a small POSIX
//! `sh` wrapper that bounds each stream in the sandbox, and carries a token in its environment
//! that a second exec uses to kill everything it left behind.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that carries an exec's kill token. Children inherit it whatever
/// process group or session they move to.
pub(crate) const TOKEN_ENV: &str = "REAPER_EXEC";

/// `$0` of the wrapper (shown in `ps`).
pub(crate) const WRAPPER_NAME: &str = "reaper-exec";

/// Runs `sh -c "$2"` with its stdout and its stderr each cut after `$1` bytes by `head -c`, and
/// exits with the command's status. A command that keeps writing past the cut dies of SIGPIPE,
/// so an endless output ends as soon as the bound is crossed. The command gets the wrapper's
/// stdin (`/dev/null`) and none of the wrapper's extra descriptors: fd 3 and 4 are the real
/// stdout and stderr, fd 5 carries the exit status out of the pipelines.
pub(crate) const WRAPPER: &str = "b=$1; exec 3>&1 4>&2; \
rc=$({ { { sh -c \"$2\" 3>&- 4>&- 5>&-; echo \"$?\" >&5; } | head -c \"$b\" >&3; } 2>&1 \
| head -c \"$b\" >&4; } 5>&1); \
exit \"${rc:-1}\"";

/// Kills every process of the sandbox whose environment holds `REAPER_EXEC=$1`: the wrapper,
/// the command and anything it started. Repeated while it finds some (one may fork during the
/// scan), at most three passes. Needs `/proc`, `tr`, `grep` and `kill`.
pub(crate) const KILL_SCRIPT: &str = "want=\"REAPER_EXEC=$1\"; pass=0; \
while [ \"$pass\" -lt 3 ]; do hit=; \
for p in /proc/[0-9]*; do \
if tr '\\0' '\\n' < \"$p/environ\" 2>/dev/null | grep -qxF \"$want\"; then \
kill -9 \"${p#/proc/}\" 2>/dev/null && hit=1; fi; \
done; \
[ -n \"$hit\" ] || break; pass=$((pass+1)); \
done";

/// A fresh kill token: 32 hex digits from the standard library's randomly seeded hasher, a
/// process-wide counter and the exec's own inputs. Unique, not secret: guessing one only lets a
/// process get itself killed. (On wasm32 the hasher's seed is fixed; the counter, the sandbox
/// and the command still tell concurrent execs apart.)
pub(crate) fn kill_token(sandbox: &str, command: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut token = String::with_capacity(32);
    for half in 0u8..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(half);
        hasher.write_u64(n);
        hasher.write(sandbox.as_bytes());
        hasher.write(command.as_bytes());
        token.push_str(&format!("{:016x}", hasher.finish()));
    }
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_tokens_are_distinct_hex_of_fixed_length() {
        let a = kill_token("sbx", "true");
        let b = kill_token("sbx", "true");
        assert_ne!(a, b);
        for t in [&a, &b] {
            assert_eq!(t.len(), 32);
            assert!(t.bytes().all(|c| c.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn the_kill_script_matches_the_variable_the_exec_sets() {
        assert!(KILL_SCRIPT.contains(&format!("{TOKEN_ENV}=$1")));
    }
}
