//! Where a guest's clocks, randomness and outbound requests come from.
//!
//! Production guests read the machine's clocks, draw the operating
//! system's randomness and reach the network through the fenced hooks of
//! `host/http.rs`. `leasehold sim` runs the same component in the same
//! runtime against a world of its own: a virtual clock, randomness seeded
//! from the run's seed, and simulated services instead of the network.
//! [`GuestEnvironment`] is the one seam between the two, handed to a
//! compiled controller explicitly ([`CompiledController::with_environment`]);
//! nothing global switches it.
//!
//! Must never: weaken what production enforces. A simulated request has
//! passed the same admission as a real one (refused after loss, denied
//! outside `http_allow`, bounded, stamped with the fence) before
//! [`Simulation::send`] sees it, and the revocation still cuts it; only
//! the delivery differs, and it never touches a socket.
//!
//! [`CompiledController::with_environment`]: super::CompiledController::with_environment

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// The world a guest instance lives in, beyond the store it is given.
#[derive(Clone, Default)]
pub enum GuestEnvironment {
    /// The machine's clocks, the operating system's randomness and the
    /// network (through the fenced outbound hooks).
    #[default]
    Host,
    /// A simulation's: its virtual clock, its seeded randomness and its
    /// simulated services. No socket is ever opened.
    Simulated(Arc<dyn Simulation>),
}

impl std::fmt::Debug for GuestEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuestEnvironment::Host => f.write_str("Host"),
            GuestEnvironment::Simulated(_) => f.write_str("Simulated"),
        }
    }
}

/// One outbound request a guest sent, as a simulation receives it: after
/// the host's admission and with the fence headers the host set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedRequest {
    /// `PUT`, `POST`, ...
    pub method: String,
    /// The whole URL.
    pub url: String,
    /// Every header, in the order the request carries them; names in
    /// lower case.
    pub headers: Vec<(String, String)>,
    /// The whole body (within the host's request body bound).
    pub body: Vec<u8>,
    /// The first-byte timeout the request runs under: the guest's, never
    /// longer than the host's bound.
    pub first_byte_timeout: Option<Duration>,
}

impl SimulatedRequest {
    /// The first value of header `name` (lower case), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A simulated service's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedResponse {
    /// The status code.
    pub status: u16,
    /// Headers; names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// What a simulation answers for one request: a response, a failure on
/// the wire as the guest would see it (refused, timed out, terminated),
/// or never (the future stays pending: the simulation revoked the tenure,
/// and the host's revocation, not an answer, ends the request).
pub type SimulatedSend =
    Pin<Box<dyn Future<Output = Result<SimulatedResponse, wasmtime_wasi_http::Error>> + Send>>;

/// A simulated world a guest instance runs in (`leasehold sim`).
pub trait Simulation: Send + Sync + 'static {
    /// The guest's wall clock, as time since the Unix epoch.
    fn wall_clock(&self) -> Duration;
    /// The guest's monotonic clock, in nanoseconds from an arbitrary start.
    fn monotonic_clock(&self) -> u64;
    /// The seed of the randomness of the next instance (`wasi:random`,
    /// secure and insecure alike: a simulated guest must be reproducible).
    fn random_seed(&self) -> u64;
    /// Deliver `request`, which passed the host's admission and carries the
    /// fence headers, to a simulated service.
    fn send(&self, request: SimulatedRequest) -> SimulatedSend;
}

/// `wasi:clocks/wall-clock` from a simulation.
pub(crate) struct SimulatedWallClock(pub(crate) Arc<dyn Simulation>);

impl HostWallClock for SimulatedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        self.0.wall_clock()
    }
}

/// `wasi:clocks/monotonic-clock` from a simulation.
pub(crate) struct SimulatedMonotonicClock(pub(crate) Arc<dyn Simulation>);

impl HostMonotonicClock for SimulatedMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.0.monotonic_clock()
    }
}

/// A small seeded generator (SplitMix64) for a simulated guest's
/// `wasi:random`: the same seed gives the same bytes on every machine and
/// in every build, which a replay needs.
pub(crate) struct SeededRandom {
    state: u64,
}

impl SeededRandom {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl rand_core::TryRng for SeededRandom {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((self.next() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::TryRng;

    /// The same seed gives the same bytes, another seed others: a replay
    /// of a simulated run hands its guest the randomness it had.
    #[test]
    fn seeded_randomness_repeats_with_its_seed() {
        let bytes = |seed| {
            let mut random = SeededRandom::new(seed);
            let mut buf = [0u8; 37];
            random.try_fill_bytes(&mut buf).unwrap();
            buf
        };
        assert_eq!(bytes(7), bytes(7));
        assert_ne!(bytes(7), bytes(8));
        assert_ne!(bytes(7)[..8], bytes(7)[8..16], "the stream moves on");
    }
}
