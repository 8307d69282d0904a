//! The Lambda bootstrap: tracing as Lambda's log settings ask, the function built once, then
//! the runtime loop. A bad configuration ends the process here, before any event is taken.

use std::process::ExitCode;

use lambda_runtime::{service_fn, LambdaEvent};
use reaper_lambda::Function;
use serde_json::Value;

#[tokio::main]
async fn main() -> ExitCode {
    // AWS_LAMBDA_LOG_LEVEL (else RUST_LOG, else INFO) and AWS_LAMBDA_LOG_FORMAT=JSON.
    lambda_runtime::tracing::init_default_subscriber();
    let function = match Function::init(|k| std::env::var(k).ok()).await {
        Ok(f) => f,
        Err(error) => {
            tracing::error!(%error, "reaper-lambda cannot start; fix the function's environment and redeploy");
            return ExitCode::FAILURE;
        }
    };
    let function = &function;
    let handler = service_fn(move |event: LambdaEvent<Value>| async move {
        Ok::<_, lambda_runtime::Error>(function.handle(event).await)
    });
    match lambda_runtime::run(handler).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "the Lambda runtime loop failed");
            ExitCode::FAILURE
        }
    }
}
