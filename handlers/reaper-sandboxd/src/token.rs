//! The bearer token: loaded once at start, checked on every request in constant time.

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The environment variable holding the token.
pub const TOKEN_ENV: &str = "REAPER_SANDBOXD_TOKEN";
/// Shorter tokens are refused at start: they can be guessed (the rule every token follows).
pub const MIN_TOKEN_BYTES: usize = reaper_core::settings::TOKEN_MIN_CHARS;

/// Why the daemon will not start with the token it was given.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no token: set {TOKEN_ENV} or pass --token-file FILE ({advice}); the daemon never runs \
         without one",
        advice = reaper_core::settings::TOKEN_ADVICE
    )]
    Missing,
    #[error("both {TOKEN_ENV} and --token-file are set: give the token one way only")]
    Ambiguous,
    #[error("cannot read the token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The value breaks the rule every reaper token follows; the sentence is the same one
    /// every binary gives.
    #[error(transparent)]
    Invalid(#[from] reaper_core::settings::TokenError),
}

/// The expected token, kept only as its SHA-256 digest. Comparing digests in constant time hides
/// both the token's content and its length from response timing.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Checks a raw token by `reaper_core::settings::check_token`; `origin` names where it
    /// came from for the error message.
    pub fn parse(raw: &str, origin: &str) -> Result<Token, TokenError> {
        reaper_core::settings::check_token(origin, raw)?;
        Ok(Token {
            digest: Sha256::digest(raw.as_bytes()).into(),
        })
    }

    /// The token from the environment value or the file, exactly one of which must be given.
    /// A file may end with one `\n` (or `\r\n`), as editors and `echo` write it: that ends
    /// the file's line, it is not part of the value.
    pub fn load(env_value: Option<String>, file: Option<&Path>) -> Result<Token, TokenError> {
        // Empty is unset, as for every token setting (`reaper_core::settings::read_token`).
        let env_value = env_value.filter(|v| !v.is_empty());
        match (env_value, file) {
            (Some(_), Some(_)) => Err(TokenError::Ambiguous),
            (None, None) => Err(TokenError::Missing),
            (Some(value), None) => Token::parse(&value, TOKEN_ENV),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                let text = text
                    .strip_suffix("\r\n")
                    .or_else(|| text.strip_suffix('\n'))
                    .unwrap_or(&text);
                Token::parse(
                    text,
                    &format!("the token in --token-file {}", path.display()),
                )
            }
        }
    }

    /// Whether `presented` is the token, in time independent of where they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        digest.ct_eq(&self.digest).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reaper_core::settings::TokenProblem;

    const GOOD: &str = "0123456789abcdefXYZ";

    #[test]
    fn a_token_matches_only_itself() {
        let token = Token::parse(GOOD, "test").unwrap();
        assert!(token.matches(GOOD.as_bytes()));
        for near in [
            "0123456789abcdefXYz",
            "0123456789abcdefXY",
            "0123456789ABCDEFXYZ",
            " 0123456789abcdefXYZ",
            "0123456789abcdefXYZ ",
            "",
        ] {
            assert!(!token.matches(near.as_bytes()), "{near:?} matched");
        }
    }

    fn problem(result: Result<Token, TokenError>) -> TokenProblem {
        match result {
            Err(TokenError::Invalid(e)) => e.problem,
            other => panic!("not refused for its value: {other:?}"),
        }
    }

    #[test]
    fn short_padded_or_unprintable_tokens_are_refused_with_the_reason() {
        assert_eq!(
            problem(Token::parse("short", "t")),
            TokenProblem::TooShort { chars: 5 }
        );
        assert_eq!(
            problem(Token::parse(" 0123456789abcdefXYZ", "t")),
            TokenProblem::Padded
        );
        assert_eq!(
            problem(Token::parse("0123456789abcdefXYZ\n", "t")),
            TokenProblem::Padded
        );
        assert_eq!(
            problem(Token::parse("0123456789 abcdefXYZ", "t")),
            TokenProblem::Space
        );
        assert_eq!(
            problem(Token::parse("0123456789abcdéfXYZ", "t")),
            TokenProblem::Charset
        );
    }

    #[test]
    fn a_token_file_may_end_with_one_newline_but_not_more_whitespace() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{GOOD}\n")).unwrap();
        let token = Token::load(None, Some(&file)).unwrap();
        assert!(token.matches(GOOD.as_bytes()));
        std::fs::write(&file, format!("{GOOD}\n\n")).unwrap();
        assert_eq!(
            problem(Token::load(None, Some(&file))),
            TokenProblem::Padded
        );
        assert!(matches!(Token::load(None, None), Err(TokenError::Missing)));
        assert!(matches!(
            Token::load(Some(GOOD.into()), Some(&file)),
            Err(TokenError::Ambiguous)
        ));
    }

    #[test]
    fn debug_never_shows_the_token() {
        let token = Token::parse(GOOD, "t").unwrap();
        assert!(!format!("{token:?}").contains(GOOD));
    }
}
