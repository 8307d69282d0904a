//! The reqwest transport against a real HTTP exchange on loopback: response headers reach the
//! caller (a provider needs `Retry-After`), and a content type the caller chose is sent as is.

#![cfg(feature = "native")]

use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpTransport, ReqwestTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers one request with a 429 and `Retry-After: 7`, and hands back the request's head.
async fn one_exchange() -> (String, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/x", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client closed before sending its head");
            seen.extend_from_slice(&buf[..n]);
        }
        socket
            .write_all(
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow",
            )
            .await
            .unwrap();
        String::from_utf8_lossy(&seen).to_lowercase()
    });
    (url, server)
}

fn post(url: String, headers: Vec<(String, String)>) -> HttpRequest {
    HttpRequest {
        method: HttpMethod::Post,
        url,
        headers,
        body: Some(b"{}".to_vec()),
        timeout_ms: 5_000,
        max_response_bytes: 1024,
    }
}

#[tokio::test]
async fn response_headers_reach_the_caller() {
    let (url, server) = one_exchange().await;
    let response = ReqwestTransport::new()
        .unwrap()
        .send(post(url, vec![]))
        .await
        .unwrap();
    let head = server.await.unwrap();

    assert_eq!(response.status, 429);
    assert_eq!(response.header("Retry-After"), Some("7"));
    assert_eq!(response.body, b"slow");
    assert!(head.contains("content-type: application/json"), "{head}");
}

#[tokio::test]
async fn a_content_type_the_caller_chose_is_sent_unchanged() {
    let (url, server) = one_exchange().await;
    let chosen = vec![(
        "Content-Type".to_string(),
        "application/connect+json".to_string(),
    )];
    ReqwestTransport::new()
        .unwrap()
        .send(post(url, chosen))
        .await
        .unwrap();
    let head = server.await.unwrap();

    assert!(
        head.contains("content-type: application/connect+json"),
        "{head}"
    );
    assert!(!head.contains("content-type: application/json"), "{head}");
}
