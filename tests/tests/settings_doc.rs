//! `SETTINGS.md` is the table [`reaper_core::settings::markdown`] generates, and the deploy
//! templates and platform READMEs use the settings' current names only.

use std::path::{Path, PathBuf};

use reaper_core::settings::{Binary, SETTINGS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn settings_md_is_the_table_generated_from_the_settings_registry() {
    let generated = reaper_core::settings::markdown();
    let path = root().join("SETTINGS.md");
    if std::env::var_os("REAPER_UPDATE_SETTINGS_MD").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "SETTINGS.md differs from reaper_core::settings: regenerate it with \
         `cargo run -p reaper-cli -- settings --all > SETTINGS.md`"
    );
}

/// `REAPER_*` names at the start of `KEY = ` / `KEY:` lines (wrangler.toml, SAM, vercel.json).
fn assigned(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim().trim_start_matches('"'))
        .filter(|l| l.starts_with("REAPER_"))
        .filter_map(|l| {
            let end =
                l.find(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))?;
            let rest = l[end..].trim_start_matches('"').trim_start();
            (rest.starts_with('=') || rest.starts_with(':')).then(|| l[..end].to_string())
        })
        .collect()
}

#[test]
fn every_variable_a_deploy_template_sets_is_registered_for_its_platform() {
    for (path, binary) in [
        ("handlers/reaper-cloudflare/wrangler.toml", Binary::Worker),
        ("infra/aws/template.yaml", Binary::Lambda),
        ("handlers/reaper-vercel/vercel.json", Binary::Vercel),
        ("deploy/systemd/reaper-watch.service", Binary::Cli),
    ] {
        if !root().join(path).exists() {
            continue;
        }
        for name in assigned(&read(path)) {
            let known = SETTINGS
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{path} sets {name}, which no binary reads"));
            assert!(
                known.is_read_by(binary),
                "{path} sets {name}, which {} does not read",
                binary.name()
            );
        }
    }
}

#[test]
fn templates_and_platform_readmes_use_old_setting_names_only_to_say_they_were_renamed() {
    let files = [
        "handlers/reaper-cloudflare/wrangler.toml",
        "handlers/reaper-cloudflare/README.md",
        "handlers/reaper-lambda/README.md",
        "handlers/reaper-vercel/README.md",
        "handlers/reaper-cli/README.md",
        "shared/reaper-serverless/README.md",
        "infra/aws/template.yaml",
        "infra/aws/README.md",
        "infra/README.md",
        "deploy/README.md",
        "ARCHITECTURE.md",
    ];
    for path in files {
        if !root().join(path).exists() {
            continue;
        }
        for (n, line) in read(path).lines().enumerate() {
            for setting in SETTINGS {
                for old in setting.old_names {
                    // An old name is a prefix of no current one, so a plain search is exact.
                    if line.contains(old) {
                        assert!(
                            line.contains("formerly") || line.contains("deprecated"),
                            "{path}:{}: {old} is now {}: {line}",
                            n + 1,
                            setting.name
                        );
                    }
                }
            }
        }
    }
}
