//! The text around the clap definition: the settings as a Markdown table (`reaper settings`,
//! copied into the README) and as a list wrapped to the terminal (`--help`, which must fit a
//! terminal: a Markdown table there had 385-column lines), the exit codes, the colour choice,
//! completions and the man page.

use std::ffi::OsStr;
use std::io::Write;

use clap::ValueEnum;

use crate::config::{Row, SETTINGS};

/// The widest help a terminal gets, however wide it is: longer lines are hard to read.
pub const MAX_WIDTH: usize = 100;
/// The narrowest width text is wrapped to (a narrower terminal wraps lines itself).
const MIN_WIDTH: usize = 40;

/// The exit codes, as `--help` and the man page state them.
pub const EXIT_CODES: &str = "Exit codes: 0 done (a sweep skipped because another holds the \
    lease is done too), 1 bad usage or setting, 2 something to look at (a run failed, a sandbox \
    leaked now or earlier and is still in the reclaim ledger, malformed run rows, an unreadable \
    ledger, a failed prune), 3 could not run (database missing, foreign or damaged, sandbox root \
    unusable, lease store or run listing failing).";

/// Every setting as the README's Markdown table.
pub fn settings_markdown() -> String {
    let mut out = String::from(
        "| Setting | Flag | Environment | Default | Accepted | Commands |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in SETTINGS {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.setting, r.flag, r.env, r.default, r.accepted, r.commands
        ));
    }
    out
}

/// The width help is wrapped to: `COLUMNS`, else the terminal's, else [`MAX_WIDTH`]; never
/// more than [`MAX_WIDTH`].
pub fn help_width() -> usize {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    let terminal = || terminal_size::terminal_size().map(|(w, _)| usize::from(w.0));
    columns
        .or_else(terminal)
        .unwrap_or(MAX_WIDTH)
        .clamp(MIN_WIDTH, MAX_WIDTH)
}

/// The settings and exit codes for the end of `--help`, wrapped to `width` with hanging
/// indents. Markdown backticks are dropped: a terminal shows them literally.
pub fn settings_help(width: usize) -> String {
    let plain = |s: &str| s.replace('`', "");
    let mut out = wrap(
        "Settings (a flag wins over its environment variable; durations: 250ms, 30s, 5m, 2h, \
         7d):",
        width,
        0,
    );
    out.push('\n');
    let out_wrap = |out: &mut String, text: &str, indent: usize| {
        out.push_str(&wrap(text, width, indent));
    };
    for Row {
        setting,
        flag,
        env,
        default,
        accepted,
        commands,
    } in SETTINGS
    {
        out_wrap(
            &mut out,
            &plain(&format!("{flag}, {env} (default {default}; {commands})")),
            2,
        );
        out_wrap(&mut out, &plain(&format!("{setting}: {accepted}")), 6);
    }
    out.push('\n');
    out_wrap(&mut out, EXIT_CODES, 0);
    out
}

/// Greedy word wrap of one paragraph: every line indented by `indent` spaces and no longer
/// than `width` (a single word longer than that gets a line of its own).
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            out.push_str(&" ".repeat(indent));
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&" ".repeat(indent));
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// When to colour the logs on stderr (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ColorWhen {
    /// On a terminal, unless `NO_COLOR` is set to anything but the empty string.
    #[default]
    Auto,
    /// Always, even into a file or pipe.
    Always,
    /// Never.
    Never,
}

impl ColorWhen {
    /// Whether to colour, for a stream that is or is not a terminal, given `NO_COLOR`'s value
    /// (<https://no-color.org>: present and non-empty means no colour).
    pub fn colors(self, is_terminal: bool, no_color: Option<&OsStr>) -> bool {
        match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => is_terminal && no_color.is_none_or(|v| v.is_empty()),
        }
    }

    /// clap's own choice for help and usage errors, which are printed before the parsed
    /// `--color` exists: found by a look at the raw arguments (the last one wins, as in clap).
    pub fn from_raw_args(args: &[std::ffi::OsString]) -> Self {
        let mut when = ColorWhen::Auto;
        let mut iter = args.iter().map(|a| a.to_string_lossy());
        while let Some(arg) = iter.next() {
            let value = match arg.strip_prefix("--color") {
                Some(rest) if rest.starts_with('=') => Some(rest[1..].to_string()),
                Some("") => iter.next().map(|v| v.to_string()),
                _ => None,
            };
            if let Some(v) = value.and_then(|v| ColorWhen::from_str(&v, true).ok()) {
                when = v;
            }
        }
        when
    }

    /// The same choice for clap (whose `Auto` honours `NO_COLOR` itself).
    pub fn clap(self) -> clap::ColorChoice {
        match self {
            ColorWhen::Auto => clap::ColorChoice::Auto,
            ColorWhen::Always => clap::ColorChoice::Always,
            ColorWhen::Never => clap::ColorChoice::Never,
        }
    }
}

/// `reaper completions SHELL`: the completion script on stdout. Generated into memory first:
/// clap_complete panics on a write error, and a closed pipe is an error to report, not a crash.
pub fn print_completions(shell: clap_complete::Shell) -> std::io::Result<()> {
    let mut command = crate::config::command(MAX_WIDTH);
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "reaper", &mut script);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script)?;
    stdout.flush()
}

/// `reaper man`: the man page of `reaper` (roff) on stdout; its SUBCOMMANDS section lists the
/// commands, whose own options are in `reaper COMMAND --help`.
pub fn print_man() -> std::io::Result<()> {
    let command = crate::config::command(MAX_WIDTH);
    let mut stdout = std::io::stdout().lock();
    clap_mangen::Man::new(command).render(&mut stdout)?;
    stdout.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_set_and_non_empty_turns_colour_off_on_a_terminal() {
        let set = Some(OsStr::new("1"));
        assert!(!ColorWhen::Auto.colors(true, set));
        assert!(ColorWhen::Auto.colors(true, None));
        assert!(
            ColorWhen::Auto.colors(true, Some(OsStr::new(""))),
            "empty is unset"
        );
        assert!(
            !ColorWhen::Auto.colors(false, None),
            "a pipe gets no colour"
        );
        assert!(ColorWhen::Always.colors(false, set), "--color always wins");
        assert!(!ColorWhen::Never.colors(true, None));
    }

    #[test]
    fn the_color_flag_is_found_in_the_raw_arguments_either_way_it_is_written() {
        let args = |a: &[&str]| a.iter().map(Into::into).collect::<Vec<_>>();
        assert_eq!(
            ColorWhen::from_raw_args(&args(&["reaper", "--color", "never"])),
            ColorWhen::Never
        );
        assert_eq!(
            ColorWhen::from_raw_args(&args(&["reaper", "sweep", "--color=always"])),
            ColorWhen::Always
        );
        assert_eq!(
            ColorWhen::from_raw_args(&args(&["reaper", "--color", "purple"])),
            ColorWhen::Auto
        );
    }

    #[test]
    fn wrapped_settings_help_fits_the_width_at_every_width() {
        for width in [MIN_WIDTH, 60, 80, MAX_WIDTH] {
            let text = settings_help(width);
            // Only a word longer than the line may overflow it (a URL at width 40).
            let long: Vec<&str> = text
                .lines()
                .filter(|l| l.len() > width && l.split_whitespace().count() > 1)
                .collect();
            assert!(long.is_empty(), "width {width}: {long:#?}");
            assert!(text.contains("REAPER_DETACHED_TTL") && text.contains("Exit codes"));
        }
    }

    #[test]
    fn the_markdown_table_has_a_row_per_setting() {
        let table = settings_markdown();
        assert_eq!(table.lines().count(), SETTINGS.len() + 2);
        assert!(table.contains("| Run budget | `--run-budget` | `REAPER_RUN_BUDGET` |"));
    }

    /// The `REAPER_*` names a row's environment column gives, old names left out.
    fn row_vars(row: &Row) -> Vec<&'static str> {
        row.env
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| n.starts_with("REAPER_"))
            .filter(|n| {
                !reaper_core::settings::SETTINGS
                    .iter()
                    .any(|s| s.old_names.contains(n))
            })
            .collect()
    }

    #[test]
    fn every_cli_setting_is_registered_for_the_cli_with_the_range_its_row_states() {
        use reaper_core::settings::{setting, Binary, Value, SETTINGS as REGISTRY};
        let mut ours: Vec<&str> = SETTINGS.iter().flat_map(row_vars).collect();
        // Read by the HTTP providers the CLI serves; named in the providers row's text.
        ours.extend(["REAPER_SANDBOXD_URL", "REAPER_SANDBOXD_TOKEN"]);
        ours.extend(reaper_providers::ProviderKind::Cloudflare.variables());
        ours.sort();
        let mut registered: Vec<&str> = REGISTRY
            .iter()
            .filter(|s| s.is_read_by(Binary::Cli))
            .map(|s| s.name)
            .collect();
        registered.sort();
        assert_eq!(ours, registered);
        for row in SETTINGS {
            for name in row_vars(row) {
                let value = setting(name).unwrap().value;
                if !matches!(value, Value::Text(_)) {
                    assert!(
                        row.accepted.contains(&value.accepted()),
                        "{name}: {:?} should say {:?}",
                        row.accepted,
                        value.accepted()
                    );
                }
            }
        }
    }

    #[test]
    fn every_exit_code_of_the_cli_is_documented_in_the_settings_registry() {
        use crate::Exit;
        use reaper_core::settings::{Binary, EXITS};
        let documented: Vec<&str> = EXITS
            .iter()
            .filter(|e| e.binary == Binary::Cli)
            .map(|e| e.code)
            .collect();
        let ours =
            [Exit::Ok, Exit::Usage, Exit::Failures, Exit::CannotRun].map(|e| (e as u8).to_string());
        assert_eq!(documented, ours);
        for code in ours {
            assert!(EXIT_CODES.contains(&format!(" {code} ")), "--help: {code}");
        }
    }
}
