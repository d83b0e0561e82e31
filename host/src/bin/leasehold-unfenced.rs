//! `leasehold-unfenced`: the `leasehold` program built with the test-only
//! feature `unsafe-disable-fence`, which turns the fence check inside fenced
//! commits into a no-op. Only the fault suite runs it, to prove that its
//! invariant checker catches stale-epoch writes. Never deploy it.

#[path = "../main.rs"]
mod leasehold;

fn main() -> std::process::ExitCode {
    leasehold::main()
}
