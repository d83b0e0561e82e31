//! The hostile suite: what a hostile user or a careless operator can throw
//! at Leasehold, one test per case, grouped by where the input comes in.
//! `cargo test -p leasehold-tests --test hostile` lists every case with its
//! verdict. Each case proves one promise and fails when that promise breaks:
//!
//! - `secrets`: no password or token reaches a person or a table (log in
//!   both formats, `/readyz`, `/metrics`, history API and CLI, stored rows,
//!   config errors, reload refusals), and database errors keep their cause;
//! - `http`: slow and idle sockets, connection floods, preconditions and
//!   credentials on the HTTP API;
//! - `logs`: guest and user text cannot forge a host log line;
//! - `database`: a database that refuses writes, a copy of a live holder;
//! - `limits`: durations that make no sense, guests that write without end;
//! - `tls`: TLS handshakes that never finish, mutual TLS without a client
//!   certificate or with one of another CA.
//!
//! Multi-process cases start the `leasehold` binary and need the guests
//! (`cargo xtask guests`) and PostgreSQL (`LEASEHOLD_DATABASE_URL`), like the
//! service suite.

mod database;
mod http;
mod limits;
mod logs;
mod secrets;
mod tls;
