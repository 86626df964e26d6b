//! The `holdfast` binary: parse the command line, start logging, run.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = holdfast::cli::Cli::parse();
    holdfast::telemetry::init("holdfast=info");
    match holdfast::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("holdfast: {e:#}");
            ExitCode::FAILURE
        }
    }
}
