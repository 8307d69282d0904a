//! A fake STS on 127.0.0.1: a real HTTP/1.1 server answering `AssumeRoleWithWebIdentity` with
//! the XML STS sends, after checking that the request carries the expected role ARN and token.
//! Anything else gets STS's `AccessDenied` error document. Shared by the reaper-serverless and
//! reaper-vercel tests (included by path).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fake hands out: a secret key and session token a test can look for in logs.
pub const ACCESS_KEY_ID: &str = "ASIAFAKEASSUMEDKEY01";
pub const SECRET_ACCESS_KEY: &str = "assumed-secret-key-0f6b9e";
pub const SESSION_TOKEN: &str = "assumed-session-token-9c2d4a";

/// One `AssumeRoleWithWebIdentity` the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub role_arn: String,
    pub session_name: String,
    pub token: String,
}

pub struct FakeSts {
    pub endpoint: String,
    calls: Arc<Mutex<Vec<Call>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSts {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeSts {
    /// Accepts any of `tokens` for `role_arn` and answers with credentials expiring at
    /// `expiration` (ISO 8601, as STS writes it).
    pub async fn start(role_arn: &str, tokens: &[&str], expiration: &str) -> FakeSts {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake STS");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let role_arn = role_arn.to_string();
        let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        let expiration = expiration.to_string();
        let recorded = calls.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (recorded, role_arn, tokens, expiration) = (
                    recorded.clone(),
                    role_arn.clone(),
                    tokens.clone(),
                    expiration.clone(),
                );
                tokio::spawn(async move {
                    serve(stream, &recorded, &role_arn, &tokens, &expiration).await;
                });
            }
        });
        FakeSts {
            endpoint,
            calls,
            task,
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

/// Serves the requests of one connection (the SDK keeps connections alive).
async fn serve(
    mut stream: TcpStream,
    calls: &Mutex<Vec<Call>>,
    role_arn: &str,
    tokens: &[String],
    expiration: &str,
) {
    let mut buffer = Vec::new();
    loop {
        let Some((head_end, length)) = read_head(&mut stream, &mut buffer).await else {
            return;
        };
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buffer[head_end..head_end + length]).into_owned();
        buffer.drain(..head_end + length);
        let form = parse_form(&body);
        let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let call = Call {
            role_arn: field("RoleArn").unwrap_or_default(),
            session_name: field("RoleSessionName").unwrap_or_default(),
            token: field("WebIdentityToken").unwrap_or_default(),
        };
        let accepted = field("Action").as_deref() == Some("AssumeRoleWithWebIdentity")
            && call.role_arn == role_arn
            && tokens.contains(&call.token);
        calls.lock().unwrap().push(call);
        let (status, xml) = if accepted {
            ("200 OK", success(role_arn, expiration))
        } else {
            ("403 Forbidden", ACCESS_DENIED.to_string())
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/xml\r\ncontent-length: {}\r\n\r\n{xml}",
            xml.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads until the end of a request head; returns where the body starts and its length.
async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(usize, usize)> {
    loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..at]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            return Some((at + 4, length));
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

fn parse_form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// `application/x-www-form-urlencoded` decoding.
fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn success(role_arn: &str, expiration: &str) -> String {
    let account = role_arn.split(':').nth(4).unwrap_or("000000000000");
    format!(
        r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>{ACCESS_KEY_ID}</AccessKeyId>
      <SecretAccessKey>{SECRET_ACCESS_KEY}</SecretAccessKey>
      <SessionToken>{SESSION_TOKEN}</SessionToken>
      <Expiration>{expiration}</Expiration>
    </Credentials>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::{account}:assumed-role/reaper-vercel/reaper</Arn>
      <AssumedRoleId>AROAFAKEROLEID:reaper</AssumedRoleId>
    </AssumedRoleUser>
    <SubjectFromWebIdentityToken>owner:acme:project:reaper:environment:production</SubjectFromWebIdentityToken>
    <Audience>https://vercel.com/acme</Audience>
    <Provider>oidc.vercel.com/acme</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000001</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#
    )
}

const ACCESS_DENIED: &str = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>Sender</Type>
    <Code>AccessDenied</Code>
    <Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message>
  </Error>
  <RequestId>00000000-0000-0000-0000-000000000002</RequestId>
</ErrorResponse>"#;
