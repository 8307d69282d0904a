//! Base URLs as they may be shown: `REAPER_SANDBOXD_URL` can carry credentials
//! (`https://user:pass@host`, `?token=…` for a proxy in front of the daemon), and none of them
//! may reach a log, a `Debug` output or an error message.

/// What replaces a secret part of a URL.
const MASK: &str = "***";

/// `url` with its userinfo and its query (and fragment) replaced by `***`:
/// `https://user:pass@host/p?token=t` becomes `https://***@host/p?***`. Everything else — the
/// scheme, host, port and path, which say *where* — is kept. Text that is not a URL is returned
/// as it is, minus anything after a `?` or `#`.
pub fn redact_url(url: &str) -> String {
    let parts = UrlParts::split(url);
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    if parts.userinfo.is_some() {
        out.push_str(MASK);
        out.push('@');
    }
    out.push_str(parts.host_and_path);
    if parts.query.is_some() {
        out.push('?');
        out.push_str(MASK);
    }
    out
}

/// Removes the secret parts of `url` from any text (a transport's error message, which may
/// quote the URL it was given), replacing each with `***`.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub(crate) fn for_url(url: &str) -> Self {
        let parts = UrlParts::split(url);
        let mut secrets: Vec<String> = [parts.userinfo, parts.query]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        // The password alone too: a transport may quote it without the user name.
        if let Some((_, password)) = parts.userinfo.and_then(|u| u.split_once(':')) {
            if !password.is_empty() {
                secrets.push(password.to_string());
            }
        }
        // Longest first, so a secret that contains another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        text
    }
}

struct UrlParts<'a> {
    /// `https://`, or empty when there is no scheme.
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host_and_path: &'a str,
    /// The query and fragment, without the leading `?` / `#`.
    query: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    fn split(url: &'a str) -> Self {
        let (scheme, rest) = match url.find("://") {
            Some(i) => url.split_at(i + 3),
            None => ("", url),
        };
        let (before_query, query) = match rest.find(['?', '#']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let authority_end = before_query.find('/').unwrap_or(before_query.len());
        // The last `@` of the authority ends the userinfo (a password may hold an `@`).
        match before_query[..authority_end].rfind('@') {
            Some(at) => UrlParts {
                scheme,
                userinfo: Some(&before_query[..at]),
                host_and_path: &before_query[at + 1..],
                query,
            },
            None => UrlParts {
                scheme,
                userinfo: None,
                host_and_path: before_query,
                query,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_query_are_masked_and_the_location_is_kept() {
        for (url, shown) in [
            ("http://127.0.0.1:7878", "http://127.0.0.1:7878"),
            ("https://h.example/p/", "https://h.example/p/"),
            (
                "https://user:pa@ss@h.example:8443/p",
                "https://***@h.example:8443/p",
            ),
            ("https://token@h.example", "https://***@h.example"),
            (
                "https://h.example/p?token=s3cret#frag",
                "https://h.example/p?***",
            ),
            (
                "https://u:p@h.example/a@b?k=v",
                "https://***@h.example/a@b?***",
            ),
            ("not a url?secret", "not a url?***"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn a_redactor_scrubs_every_secret_part_from_any_text() {
        let r = Redactor::for_url("https://alice:hunter22@h.example/p?key=k3y");
        let text = "cannot reach https://alice:hunter22@h.example/p/v1/x?key=k3y: \
                    bad password hunter22";
        let scrubbed = r.scrub(text);
        for secret in ["alice", "hunter22", "k3y"] {
            assert!(!scrubbed.contains(secret), "{secret} in {scrubbed}");
        }
        assert!(scrubbed.contains("h.example/p/v1/x"), "{scrubbed}");
    }
}
