//! Several sandbox providers behind one [`SandboxProvider`]: one sweep serves runs whose
//! sandboxes live with different providers (Docker on the host, Daytona, E2B, ...).
//!
//! Every instance record names its provider, and the core reaches a recorded sandbox only
//! through [`SandboxProvider::resume_recorded`] and [`SandboxProvider::destroy_recorded`], which a
//! set routes by that name to the one member of that name. A record naming a provider the set
//! lacks is refused (the probe says `unknown`, reclaim keeps the record); an id is never handed to
//! another provider's API, where it could name an unrelated sandbox.

use std::sync::Arc;

use crate::error::SandboxError;
use crate::ports::{not_served, SandboxHandle, SandboxProvider, SandboxState};

/// Providers routed by the name in each instance record. Names are unique.
#[derive(Clone)]
pub struct ProviderSet {
    members: Vec<Arc<dyn SandboxProvider>>,
    name: String,
}

/// Why a set could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderSetError {
    #[error("no sandbox provider is configured: configure at least one")]
    /// No provider was given.
    Empty,
    #[error(
        "two sandbox providers are both named {0:?}: each instance record names one provider, so names must be unique"
    )]
    /// Two providers have this name.
    DuplicateName(String),
}

impl ProviderSet {
    /// A set of providers, each reached by its own name; the names must differ.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use reaper_core::{ProviderSet, ProviderSetError, SandboxProvider};
    /// use reaper_testkit::fakes::FakeProvider;
    ///
    /// let local: Arc<dyn SandboxProvider> = Arc::new(FakeProvider::new("local"));
    /// let docker: Arc<dyn SandboxProvider> = Arc::new(FakeProvider::new("docker"));
    /// assert!(ProviderSet::new(vec![local.clone(), docker]).is_ok());
    /// // An instance record names one provider, so two of one name would be ambiguous.
    /// let twice = ProviderSet::new(vec![local.clone(), local]).unwrap_err();
    /// assert_eq!(twice, ProviderSetError::DuplicateName("local".into()));
    /// ```
    pub fn new(members: Vec<Arc<dyn SandboxProvider>>) -> Result<Self, ProviderSetError> {
        if members.is_empty() {
            return Err(ProviderSetError::Empty);
        }
        let mut names: Vec<&str> = Vec::with_capacity(members.len());
        for member in &members {
            if names.contains(&member.name()) {
                return Err(ProviderSetError::DuplicateName(member.name().to_string()));
            }
            names.push(member.name());
        }
        let name = names.join("+");
        Ok(ProviderSet { members, name })
    }

    /// The member serving sandboxes recorded under `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn SandboxProvider>> {
        self.members.iter().find(|m| m.serves(name))
    }

    /// The members' names, in the order given.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.name())
    }

    /// The one member, when there is exactly one: unrouted calls (an id with no provider name)
    /// are unambiguous only then.
    fn only(&self) -> Result<&Arc<dyn SandboxProvider>, SandboxError> {
        match self.members.as_slice() {
            [one] => Ok(one),
            _ => Err(SandboxError::Refused(format!(
                "a sandbox id without its provider name cannot be routed among {}",
                self.name
            ))),
        }
    }

    fn member(&self, name: &str) -> Result<&Arc<dyn SandboxProvider>, SandboxError> {
        self.get(name).ok_or_else(|| not_served(&self.name, name))
    }
}

impl std::fmt::Debug for ProviderSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSet")
            .field("members", &self.name)
            .finish()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for ProviderSet {
    /// The members' names joined with `+` (for logs): no instance record names this.
    fn name(&self) -> &str {
        &self.name
    }

    fn serves(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.only()?.resume(id).await
    }

    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.only()?.destroy(id).await
    }

    async fn resume_recorded(
        &self,
        name: &str,
        id: &str,
    ) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.member(name)?.resume_recorded(name, id).await
    }

    async fn destroy_recorded(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        self.member(name)?.destroy_recorded(name, id).await
    }

    async fn state(&self, id: &str) -> Result<Option<SandboxState>, SandboxError> {
        self.only()?.state(id).await
    }

    async fn start_for_read(&self, id: &str) -> Result<(), SandboxError> {
        self.only()?.start_for_read(id).await
    }

    async fn restore(&self, id: &str) -> Result<(), SandboxError> {
        self.only()?.restore(id).await
    }

    async fn state_recorded(
        &self,
        name: &str,
        id: &str,
    ) -> Result<Option<SandboxState>, SandboxError> {
        self.member(name)?.state_recorded(name, id).await
    }

    async fn start_for_read_recorded(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        self.member(name)?.start_for_read_recorded(name, id).await
    }

    async fn restore_recorded(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        self.member(name)?.restore_recorded(name, id).await
    }
}
