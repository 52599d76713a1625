use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    canada_kaktus::cli::run(canada_kaktus::cli::Cli::parse()).await
}
