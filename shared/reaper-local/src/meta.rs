//! Sandbox ids and the metadata file each sandbox directory carries.

use std::io::Read;
use std::path::{Path, PathBuf};

use reaper_core::{EpochMs, SandboxError};
use serde::{Deserialize, Serialize};

pub(crate) const METADATA_FILE: &str = "sandbox.json";

/// Longest accepted sandbox id; generated ids are 20 characters.
const MAX_ID_LEN: usize = 64;

/// Rejects an id that could escape or alias a path before it is joined to the root: only
/// `[A-Za-z0-9-]`, non-empty, bounded, so no `/`, `..`, NUL or dot-file can be formed.
pub fn validate_sandbox_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "invalid sandbox id {id:?}: ids are 1-{MAX_ID_LEN} characters of [A-Za-z0-9-]"
        )))
    }
}

/// `sbx-` and 16 random hex digits from the kernel's generator.
pub(crate) fn generate_sandbox_id() -> Result<String, SandboxError> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            SandboxError::Other(format!("cannot read /dev/urandom for a sandbox id: {e}"))
        })?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sbx-{hex}"))
}

/// One agent started with `start_agent`: the group `destroy` must kill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    /// The run the agent works for.
    pub run_id: String,
    /// The agent's wrapper shell.
    pub pid: u32,
    /// The group the agent's keeper leads (the keeper's pid). Sandboxes recorded before keepers
    /// have the wrapper's own pid here, which led its group then: both are killed the same way.
    pub pgid: i32,
    /// `/proc/<pgid>/stat` start time, to avoid signalling a group whose id was reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
}

/// `<sandbox>/sandbox.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetadata {
    /// The sandbox's id: its directory's name under the provider's root.
    pub id: String,
    /// When the sandbox was created.
    pub created_at: EpochMs,
    /// The journal directory of the sandbox's runs, inside the sandbox.
    pub journal_dir: String,
    /// `PATH` for this sandbox's commands; `None` uses the provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default)]
    /// The agents started in it, which `destroy` kills.
    pub agents: Vec<AgentRecord>,
}

/// `None` when the file does not exist (a missing or half-destroyed sandbox).
pub(crate) async fn read_metadata(dir: &Path) -> Result<Option<SandboxMetadata>, SandboxError> {
    let path = dir.join(METADATA_FILE);
    match tokio::fs::read(&path).await {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            SandboxError::Other(format!(
                "corrupt sandbox metadata {}: {e}; remove the directory to discard it",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SandboxError::Other(format!(
            "cannot read sandbox metadata {}: {e}",
            path.display()
        ))),
    }
}

/// Writes through a temporary file and a rename, so a reader never sees half a file.
pub(crate) async fn write_metadata(dir: &Path, meta: &SandboxMetadata) -> Result<(), SandboxError> {
    let path = dir.join(METADATA_FILE);
    let tmp: PathBuf = dir.join(format!(".{METADATA_FILE}.tmp"));
    let bytes = serde_json::to_vec_pretty(meta)
        .map_err(|e| SandboxError::Other(format!("cannot encode sandbox metadata: {e}")))?;
    let io = |e: std::io::Error| {
        SandboxError::Other(format!(
            "cannot write sandbox metadata {}: {e}",
            path.display()
        ))
    };
    tokio::fs::write(&tmp, bytes).await.map_err(io)?;
    tokio::fs::rename(&tmp, &path).await.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_sandbox_ids_are_rejected() {
        for id in [
            "",
            "..",
            ".",
            "a/b",
            "../etc",
            "a b",
            "a;b",
            "a\nb",
            "a\0b",
            "é",
            "x_y",
            &"a".repeat(65),
        ] {
            assert!(validate_sandbox_id(id).is_err(), "{id:?} was accepted");
        }
        for id in ["sbx-0123abcd", "A-1", "-", &"a".repeat(64)] {
            assert!(validate_sandbox_id(id).is_ok(), "{id:?} was refused");
        }
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = generate_sandbox_id().unwrap();
        let b = generate_sandbox_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 20);
        validate_sandbox_id(&a).unwrap();
    }
}
