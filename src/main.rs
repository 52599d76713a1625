use std::process::ExitCode;

use clap::Parser;

// One thread: the controller waits on the network nearly all the time, and
// its longest piece of computation (splitting 10,000 servers among the
// pools) takes milliseconds. A second worker thread only added an allocator
// arena that kept a cycle's freed memory (see benches/RESULTS.md, issue 11).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    canada_kaktus::cli::run(canada_kaktus::cli::Cli::parse()).await
}
