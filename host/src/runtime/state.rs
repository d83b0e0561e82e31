//! The host state bound to one guest `Store`: one slice per WIT interface,
//! WASI with no ambient authority, the resource limiter and the
//! interruption state the epoch callback reads.

use tokio::time::Instant;
use wasmtime::ResourceLimiter;
use wasmtime::component::{HasData, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::Revocation;
use super::host::{
    http::HttpHost, logging::LoggingHost, settings::SettingsHost, store::StoreHost,
    tenure::TenureHost,
};

/// Why the host interrupted a guest; carried as the trap's error so the
/// caller can tell the cases apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Interrupt {
    /// The tenure's fence was revoked.
    #[error("the lease was lost; the host revoked this tenure")]
    Revoked,
    /// The per-call deadline passed.
    #[error("the call ran past its deadline")]
    Deadline,
    /// The guest tried to grow memory or a table past its limit.
    #[error("the guest exceeded its memory limit")]
    Memory,
}

/// Memory and count limits of one guest. Refusing a grow traps (rather
/// than returning -1 to the guest), so a runaway guest is torn down.
pub struct GuestLimiter {
    pub(crate) memory_bytes: usize,
    pub(crate) table_elements: usize,
    pub(crate) instances: usize,
    pub(crate) tables: usize,
    pub(crate) memories: usize,
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return Err(Interrupt::Memory.into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return Err(Interrupt::Memory.into());
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

/// Everything the host keeps for one guest instance (one tenure).
pub struct GuestState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: GuestLimiter,
    pub(crate) store: StoreHost,
    pub(crate) tenure: TenureHost,
    pub(crate) logging: LoggingHost,
    pub(crate) settings: SettingsHost,
    pub(crate) http: HttpHost,
    pub(crate) revocation: Revocation,
    /// Deadline of the call in progress, checked at every epoch tick.
    pub(crate) deadline: Option<Instant>,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime_wasi_http::WasiHttpView for GuestState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            hooks: &mut self.http.hooks,
            table: &mut self.table,
            ctx: &mut self.http.ctx,
        }
    }
}

/// Narrow view of [`GuestState`] for the store interface.
pub struct StoreView;
impl HasData for StoreView {
    type Data<'a> = &'a mut StoreHost;
}

/// Narrow view of [`GuestState`] for the tenure interface.
pub struct TenureView;
impl HasData for TenureView {
    type Data<'a> = &'a mut TenureHost;
}

/// Narrow view of [`GuestState`] for the logging interface.
pub struct LoggingView;
impl HasData for LoggingView {
    type Data<'a> = &'a mut LoggingHost;
}

/// Narrow view of [`GuestState`] for the settings interface (0.2.0 on).
pub struct SettingsView;
impl HasData for SettingsView {
    type Data<'a> = &'a mut SettingsHost;
}
