//! A secret value (a bearer token, a cron secret) that never reaches `Debug`, logs or errors.

/// Holds a secret string; only [`Secret::expose`] hands it out.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Holds `value`; it is shown only by [`Secret::expose`].
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this secret, in time independent of where they differ or how
    /// long either is: the SHA-256 digests are compared in constant time (`subtle`).
    pub fn matches(&self, presented: &[u8]) -> bool {
        digests_match(self.0.as_bytes(), presented)
    }
}

/// Whether `a` and `b` are the same bytes, compared by SHA-256 digest in constant time, so
/// neither the content nor the length of a secret shows in a response's timing.
pub fn digests_match(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    let a: [u8; 32] = Sha256::digest(a).into();
    let b: [u8; 32] = Sha256::digest(b).into();
    a.ct_eq(&b).into()
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_output_never_shows_the_secret() {
        let s = Secret::new("hunter2-token");
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(&s)), "Some(<redacted>)");
        assert_eq!(s.expose(), "hunter2-token");
    }

    #[test]
    fn a_secret_matches_only_its_own_bytes() {
        let s = Secret::new("0123456789abcdefXYZ");
        assert!(s.matches(b"0123456789abcdefXYZ"));
        for near in [
            "0123456789abcdefXYz",
            "0123456789abcdefXY",
            "0123456789abcdefXYZ ",
            "",
        ] {
            assert!(!s.matches(near.as_bytes()), "{near:?}");
        }
    }
}
