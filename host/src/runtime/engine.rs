//! The one shared wasmtime `Engine`: component model, epoch interruption
//! driven by a ticker thread, the pooling allocator (with a fallback when
//! the address space cannot hold the pool), and the on-disk cache of
//! compiled artifacts.

use std::path::PathBuf;

use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

use super::RuntimeError;

/// How the engine is built.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Guests alive at once (new tenures overlap briefly with old ones, so
    /// the pool is sized at twice this plus slack).
    pub max_guests: u32,
    /// Largest linear memory of one guest.
    pub memory_bytes: usize,
    /// Use the pooling allocator (falls back to on-demand if it cannot be
    /// reserved).
    pub pooling: bool,
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
}

/// A built engine and how it allocates.
pub(crate) struct BuiltEngine {
    pub engine: Engine,
    pub pooling: bool,
    /// The on-disk compile cache, if one is configured: kept to read its
    /// tallies ([`CacheStats`]).
    pub cache: Option<Cache>,
}

/// What the on-disk compile cache did for one engine since it was built:
/// components read from the cache, and components compiled and written
/// to it. A restart with an unchanged component counts a hit and no miss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Compilations answered from the cache directory.
    pub hits: usize,
    /// Compilations done and stored in the cache directory.
    pub misses: usize,
}

impl CacheStats {
    pub(crate) fn of(cache: &Cache) -> Self {
        Self {
            hits: cache.cache_hits(),
            misses: cache.cache_misses(),
        }
    }
}

fn base_config(config: &EngineConfig) -> Result<(Config, Option<Cache>), RuntimeError> {
    let mut wasm = Config::new();
    wasm.wasm_component_model(true);
    wasm.epoch_interruption(true);
    let mut kept = None;
    if let Some(dir) = &config.cache_dir {
        let mut cache = CacheConfig::new();
        cache.with_directory(dir);
        let cache = Cache::new(cache).map_err(|e| {
            RuntimeError::Engine(format!(
                "cannot use compilation cache directory {}: {e}",
                dir.display()
            ))
        })?;
        kept = Some(cache.clone());
        wasm.cache(Some(cache));
    }
    Ok((wasm, kept))
}

/// Linear memories the pool holds per guest slot: every toolchain's
/// components measured define one (Rust, componentize-js and
/// componentize-py alike), and each pooled memory reserves address space,
/// so the pool holds two per slot rather than the store's cap
/// (`max_memories`); a controller allowed more than the default cap counts
/// as several guests (`ControllerConfig::pool_weight`).
const POOLED_MEMORIES_PER_GUEST: u32 = 2;

pub(crate) fn build(config: &EngineConfig) -> Result<BuiltEngine, RuntimeError> {
    if config.pooling {
        let slots = config.max_guests.saturating_mul(2).saturating_add(4);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(crate::limits::GUEST_INSTANCES as u32))
            .total_memories(slots.saturating_mul(POOLED_MEMORIES_PER_GUEST))
            .total_tables(slots.saturating_mul(crate::limits::GUEST_TABLES as u32))
            .total_stacks(slots)
            .max_memory_size(config.memory_bytes);
        let (mut wasm, cache) = base_config(config)?;
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        match Engine::new(&wasm) {
            Ok(engine) => {
                return Ok(BuiltEngine {
                    engine,
                    pooling: true,
                    cache,
                });
            }
            Err(e) => tracing::warn!(
                error = %e,
                slots,
                "pooling allocator unavailable (address space too small?); falling back to on-demand allocation"
            ),
        }
    }
    let (wasm, cache) = base_config(config)?;
    let engine = Engine::new(&wasm).map_err(|e| RuntimeError::Engine(e.to_string()))?;
    Ok(BuiltEngine {
        engine,
        pooling: false,
        cache,
    })
}

/// Bump the engine's epoch every `tick` until the engine is dropped. The
/// thread holds only a weak reference, so it never keeps the engine alive.
pub(crate) fn spawn_ticker(engine: &Engine, tick: std::time::Duration) -> Result<(), RuntimeError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("leasehold-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map(drop)
        .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch ticker thread: {e}")))
}
