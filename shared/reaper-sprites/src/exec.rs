//! `exec` over Sprites' WebSocket exec API (non-TTY, no stdin).
//!
//! Binary messages carry one stream byte then the payload (1 stdout, 2 stderr, 3 exit with the
//! code in the next byte); text messages are JSON (`exit` with `exit_code`, `session_info`, port
//! notices). Output is counted as it arrives: one byte past the bound, or the timeout, and the
//! socket is dropped; the service then ends the command after `max_run_after_disconnect`.

use std::time::Duration;

use futures_util::StreamExt;
use reaper_core::{ExecOptions, ExecOutput, SandboxError};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::provider::{body_says_not_found, detail, status_error, SpritesSandbox};

const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const EXIT: u8 = 3;

pub(crate) async fn run(
    sandbox: &SpritesSandbox,
    command: &str,
    options: ExecOptions,
) -> Result<ExecOutput, SandboxError> {
    let work = exchange(sandbox, command);
    match tokio::time::timeout(Duration::from_millis(options.timeout_ms), work).await {
        Ok(result) => result,
        // Dropping the socket leaves the command to the service's max_run_after_disconnect.
        Err(_) => Err(SandboxError::Timeout(options.timeout_ms)),
    }
}

/// The exec URL: `ws(s)://…/v1/sprites/{name}/exec?cmd=sh&cmd=-c&cmd=<command>&…`.
pub(crate) fn exec_url(sandbox: &SpritesSandbox, command: &str) -> String {
    let http = sandbox.inner.sprite_url(&sandbox.name);
    let ws = match http.strip_prefix("https://") {
        Some(rest) => format!("wss://{rest}"),
        None => format!("ws://{}", http.trim_start_matches("http://")),
    };
    format!(
        "{ws}/exec?cmd=sh&cmd=-c&cmd={}&stdin=false&max_run_after_disconnect={}s",
        encode(command),
        sandbox.inner.config.exec_linger_secs
    )
}

async fn exchange(sandbox: &SpritesSandbox, command: &str) -> Result<ExecOutput, SandboxError> {
    let name = &sandbox.name;
    let mut request = exec_url(sandbox, command)
        .into_client_request()
        .map_err(|e| {
            SandboxError::Other(format!(
                "cannot build the exec request for sprite {name}: {e}"
            ))
        })?;
    let auth = HeaderValue::from_str(&sandbox.inner.authorization())
        .map_err(|_| SandboxError::Refused("SPRITES_TOKEN is not a valid header value".into()))?;
    request.headers_mut().insert("authorization", auth);
    let (mut socket, _) = match tokio_tungstenite::connect_async(request).await {
        Ok(connected) => connected,
        Err(WsError::Http(response)) => {
            let status = response.status().as_u16();
            let body = response.body().clone().unwrap_or_default();
            if status == 404 && body_says_not_found(&body) {
                return Err(SandboxError::NotFound(name.clone()));
            }
            return Err(status_error(
                status,
                &detail(&body),
                "run a command in",
                name,
            ));
        }
        Err(e) => {
            return Err(SandboxError::Unreachable(format!(
                "Sprites: cannot open the exec socket of sprite {name}: {e}"
            )))
        }
    };
    let limit = sandbox.inner.config.output_limit;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let exit_code = loop {
        let Some(message) = socket.next().await else {
            break None;
        };
        let message = message.map_err(|e| {
            SandboxError::Unreachable(format!(
                "Sprites: the exec socket of sprite {name} failed: {e}"
            ))
        })?;
        match message {
            Message::Binary(data) => match data.split_first() {
                Some((&STDOUT, chunk)) => append(&mut stdout, chunk, limit, "stdout")?,
                Some((&STDERR, chunk)) => append(&mut stderr, chunk, limit, "stderr")?,
                Some((&EXIT, code)) => break Some(code.first().copied().map_or(0, i32::from)),
                _ => {}
            },
            Message::Text(text) => {
                if let Ok(control) = serde_json::from_str::<Control>(text.as_str()) {
                    if control.kind == "exit" {
                        break Some(control.exit_code.unwrap_or(0));
                    }
                }
            }
            Message::Close(_) => break None,
            _ => {}
        }
    };
    let Some(exit_code) = exit_code else {
        // Without an exit code the command's fate is unknown: never read as success.
        return Err(SandboxError::Unreachable(format!(
            "Sprites: the exec socket of sprite {name} closed before the command's exit code"
        )));
    };
    let _ = socket.close(None).await;
    Ok(ExecOutput {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        exit_code,
    })
}

#[derive(serde::Deserialize)]
struct Control {
    #[serde(rename = "type")]
    kind: String,
    exit_code: Option<i32>,
}

fn append(to: &mut Vec<u8>, chunk: &[u8], limit: usize, stream: &str) -> Result<(), SandboxError> {
    if to.len() + chunk.len() > limit {
        return Err(SandboxError::OutputLimit {
            stream: stream.into(),
            limit: limit as u64,
        });
    }
    to.extend_from_slice(chunk);
    Ok(())
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn a_command_is_percent_encoded_whole_into_one_query_value() {
        assert_eq!(encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
