//! `CRON_SECRET`: read once at start-up, checked on every request in constant time.
//!
//! Vercel sends the project's `CRON_SECRET` as `Authorization: Bearer <value>` on every cron
//! request. Anyone can reach a production URL, so without the secret the function refuses to
//! sweep (fail closed) instead of running for every caller.

use std::ffi::OsStr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The environment variable Vercel reads the cron secret from (and sends as the bearer token).
pub const CRON_SECRET_ENV: &str = "CRON_SECRET";
/// Vercel's advice for the secret's length, which is also every reaper token's floor; a shorter
/// `CRON_SECRET` is accepted with a warning (Vercel documents no floor).
pub const RECOMMENDED_SECRET_BYTES: usize = reaper_core::settings::TOKEN_MIN_CHARS;

/// The secret as found at start-up.
#[derive(Clone)]
pub enum CronSecret {
    /// Unset or empty: every request is refused with 500 (a deploy mistake, not a caller's).
    Missing,
    /// Only the digest of the whole expected header value is kept: comparing digests in constant
    /// time hides both the secret's content and its length from response timing.
    Set {
        expected: [u8; 32],
        /// Where a `CRON_SECRET` Vercel accepts falls short of the reaper's token rule: the
        /// start-up warning (the sentence every binary gives).
        weak: Option<SecretError>,
    },
}

impl std::fmt::Debug for CronSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CronSecret::Missing => f.write_str("CronSecret::Missing"),
            CronSecret::Set { .. } => f.write_str("CronSecret::Set(<redacted>)"),
        }
    }
}

/// A secret the function refuses to start with: the sentence every reaper binary gives for a
/// token, naming the variable and never its value.
pub type SecretError = reaper_core::settings::TokenError;

impl CronSecret {
    /// Checks `CRON_SECRET`'s raw environment value (`None` when unset). Vercel's value is the
    /// user's to choose and Vercel sends it as is, so what Vercel accepts is kept working: a
    /// value shorter than 16 characters or with a space inside is accepted with a warning
    /// ([`CronSecret::weakness`]). Surrounding whitespace or a control or non-ASCII character
    /// is refused: such a value could never be matched as written.
    pub fn from_env_value(raw: Option<&OsStr>) -> Result<CronSecret, SecretError> {
        use reaper_core::settings::TokenProblem;
        let Some(raw) = raw else {
            return Ok(CronSecret::Missing);
        };
        let raw = raw.to_str().ok_or_else(|| not_utf8(CRON_SECRET_ENV))?;
        if raw.is_empty() {
            return Ok(CronSecret::Missing);
        }
        let weak = match reaper_core::settings::check_token(CRON_SECRET_ENV, raw) {
            Ok(()) => None,
            Err(e)
                if matches!(
                    e.problem,
                    TokenProblem::TooShort { .. } | TokenProblem::Space
                ) =>
            {
                Some(e)
            }
            Err(e) => return Err(e),
        };
        Ok(CronSecret::Set {
            expected: digest(format!("Bearer {raw}").as_bytes()),
            weak,
        })
    }

    /// A reaper token setting (`REAPER_STATUS_TOKEN`) held like the cron secret, by the rule
    /// every reaper token follows (`reaper_core::settings::check_token`), with no leniency:
    /// the reaper chose that rule, not Vercel. Unset or empty is [`CronSecret::Missing`].
    pub fn from_token_setting(name: &str, raw: Option<&OsStr>) -> Result<CronSecret, SecretError> {
        let raw = match raw {
            None => None,
            Some(raw) => Some(raw.to_str().ok_or_else(|| not_utf8(name))?.to_string()),
        };
        Ok(match reaper_core::settings::read_token(name, raw)? {
            None => CronSecret::Missing,
            Some(v) => CronSecret::Set {
                expected: digest(format!("Bearer {v}").as_bytes()),
                weak: None,
            },
        })
    }

    /// Reads [`CRON_SECRET_ENV`] from the process environment.
    pub fn from_env() -> Result<CronSecret, SecretError> {
        Self::from_env_value(std::env::var_os(CRON_SECRET_ENV).as_deref())
    }

    /// How an accepted secret falls short of the reaper's token rule (worth a warning at
    /// start-up), if it does.
    pub fn weakness(&self) -> Option<&SecretError> {
        match self {
            CronSecret::Set { weak, .. } => weak.as_ref(),
            CronSecret::Missing => None,
        }
    }

    /// Whether the secret is shorter than Vercel recommends.
    pub fn is_short(&self) -> bool {
        matches!(
            self.weakness().map(|e| e.problem),
            Some(reaper_core::settings::TokenProblem::TooShort { .. })
        )
    }
}

fn not_utf8(name: &str) -> SecretError {
    SecretError {
        setting: name.to_string(),
        problem: reaper_core::settings::TokenProblem::Charset,
    }
}

/// Why a request was not authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// The function has no secret: nobody can be authorized.
    SecretMissing,
    /// No `Authorization` header, more than one, or a value that is not exactly
    /// `Bearer <CRON_SECRET>` (the scheme's case included: Vercel sends `Bearer`).
    Unauthorized,
}

/// Checks the request's `Authorization` header against the secret in constant time.
pub fn authorize(headers: &http::HeaderMap, secret: &CronSecret) -> Result<(), AuthFailure> {
    let CronSecret::Set { expected, .. } = secret else {
        return Err(AuthFailure::SecretMissing);
    };
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(AuthFailure::Unauthorized);
    };
    if bool::from(digest(value.as_bytes()).ct_eq(expected)) {
        Ok(())
    } else {
        Err(AuthFailure::Unauthorized)
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};
    use reaper_core::settings::TokenProblem;

    const SECRET: &str = "s3cr3t-0123456789abcdef";

    fn secret(raw: &str) -> CronSecret {
        CronSecret::from_env_value(Some(OsStr::new(raw))).unwrap()
    }

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                http::header::AUTHORIZATION,
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_exact_bearer_header_is_authorized() {
        let header = format!("Bearer {SECRET}");
        assert_eq!(
            authorize(&headers(&[header.as_bytes()]), &secret(SECRET)),
            Ok(())
        );
    }

    #[test]
    fn missing_wrong_near_miss_recased_and_padded_headers_are_unauthorized() {
        let s = secret(SECRET);
        let near_miss = format!("Bearer {}", &SECRET[..SECRET.len() - 1]);
        let longer = format!("Bearer {SECRET}x");
        let recased = format!("Bearer {}", SECRET.to_uppercase());
        let scheme_recased = format!("bearer {SECRET}");
        let padded = format!("Bearer  {SECRET} ");
        let no_scheme = SECRET.to_string();
        for value in [
            "Bearer wrong".to_string(),
            near_miss,
            longer,
            recased,
            scheme_recased,
            padded,
            no_scheme,
            "Bearer ".to_string(),
            String::new(),
        ] {
            assert_eq!(
                authorize(&headers(&[value.as_bytes()]), &s),
                Err(AuthFailure::Unauthorized),
                "{value:?}"
            );
        }
        assert_eq!(
            authorize(&HeaderMap::new(), &s),
            Err(AuthFailure::Unauthorized)
        );
    }

    #[test]
    fn two_authorization_headers_are_unauthorized_even_if_one_is_right() {
        let right = format!("Bearer {SECRET}");
        assert_eq!(
            authorize(
                &headers(&[right.as_bytes(), b"Bearer other"]),
                &secret(SECRET)
            ),
            Err(AuthFailure::Unauthorized)
        );
    }

    #[test]
    fn non_utf8_header_bytes_are_unauthorized_not_a_panic() {
        assert_eq!(
            authorize(&headers(&[b"Bearer \xff\xfe"]), &secret(SECRET)),
            Err(AuthFailure::Unauthorized)
        );
    }

    #[test]
    fn an_unset_or_empty_secret_fails_closed_for_every_request() {
        for missing in [None, Some(OsStr::new(""))] {
            let s = CronSecret::from_env_value(missing).unwrap();
            assert!(matches!(s, CronSecret::Missing));
            assert_eq!(
                authorize(&headers(&[b"Bearer "]), &s),
                Err(AuthFailure::SecretMissing)
            );
            assert_eq!(
                authorize(&HeaderMap::new(), &s),
                Err(AuthFailure::SecretMissing)
            );
        }
    }

    #[test]
    fn a_secret_with_surrounding_whitespace_is_refused_without_echoing_it() {
        for raw in [
            " abcdefghijklmnop",
            "abcdefghijklmnop\n",
            "\tabcdefghijklmnop",
            " ",
        ] {
            let err = CronSecret::from_env_value(Some(OsStr::new(raw))).unwrap_err();
            assert_eq!(err.problem, TokenProblem::Padded);
            let message = err.to_string();
            assert!(message.contains(CRON_SECRET_ENV) && message.contains("whitespace"));
            assert!(!message.contains("abcdefghijklmnop"));
        }
    }

    #[test]
    fn a_secret_with_control_or_non_ascii_characters_is_refused() {
        for raw in [
            "abc\u{7}defghijklmnop",
            "abcdéfghijklmnop",
            "abc\ndefghijklmnop",
        ] {
            assert_eq!(
                CronSecret::from_env_value(Some(OsStr::new(raw)))
                    .unwrap_err()
                    .problem,
                TokenProblem::Charset,
                "{raw:?}"
            );
        }
    }

    #[test]
    fn a_short_or_spaced_cron_secret_vercel_accepts_is_kept_with_the_shared_sentence_as_warning() {
        for raw in ["short", "correct horse battery staple"] {
            let s = secret(raw);
            let warning = s.weakness().expect("a warning").to_string();
            assert_eq!(
                warning,
                reaper_core::settings::check_token(CRON_SECRET_ENV, raw)
                    .unwrap_err()
                    .to_string()
            );
            let header = format!("Bearer {raw}");
            assert_eq!(authorize(&headers(&[header.as_bytes()]), &s), Ok(()));
        }
        assert!(secret(SECRET).weakness().is_none());
    }

    #[test]
    fn a_reaper_token_setting_gets_no_leniency() {
        let name = "REAPER_STATUS_TOKEN";
        for raw in [
            "short",
            "correct horse battery staple",
            "0123456789abcdef\n",
        ] {
            let err = CronSecret::from_token_setting(name, Some(OsStr::new(raw))).unwrap_err();
            assert_eq!(
                err,
                reaper_core::settings::check_token(name, raw).unwrap_err()
            );
        }
        assert!(matches!(
            CronSecret::from_token_setting(name, Some(OsStr::new(""))),
            Ok(CronSecret::Missing)
        ));
    }

    #[test]
    fn the_secret_never_appears_in_debug_output() {
        let s = secret(SECRET);
        assert!(!format!("{s:?}").contains(SECRET));
        assert!(!s.is_short());
        assert!(secret("short").is_short());
    }
}
