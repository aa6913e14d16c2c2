//! `rl`: train, plan, evaluate, resume, plot and export runs on the built-in
//! environments (`rl --help`). The command is [`rl::cli::run_command`]; a program that
//! registers its own environments calls it with its own registry.

use std::process::ExitCode;

fn main() -> ExitCode {
    rl::cli::run_command(&rl::cli::Registry::builtin())
}
