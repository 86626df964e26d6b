//! The `holdfast` binary: parse the command line, run it (which starts logging).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = holdfast::cli::Cli::parse();
    match holdfast::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("holdfast: {e:#}");
            ExitCode::FAILURE
        }
    }
}
